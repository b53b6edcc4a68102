"""One prediction path: ``clustersim simulate`` on a published row's scenario, written as a scenario
file, predicts what ``clustersim validate`` predicts for that row (same default profile, same
communication model), for one row of each family the bundled table simulates with its plan as published;
the fit and the cross-validation default to that model too."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clustersim.simulator.calibration.validate import SYSTEM_OF_PART, load_runs, part_of_row, scenario_for_row, validate_row
from clustersim.simulator.cli.app import app

GBIT = 1e9 / 8


def _rows() -> list[dict]:
    """The first row of each family whose plan is fully published and fits in memory."""
    runs = load_runs()
    picks, seen = [], set()
    for row in runs.to_dict("records"):
        fam = str(row["source_id"]).split("-")[0]
        if fam in seen or row["gpu_type"] not in ("H100", "A100", "GB200") or int(row["num_gpus"]) > 256:
            continue
        try:
            sc = scenario_for_row(row)
        except ValueError:
            continue
        rec = validate_row(row)
        if sc.candidates or rec["status"] != "ok" or "memory check lifted" in str(rec["inferred"]) \
                or "nvfp4" in str(row["precision"]).lower():
            continue
        seen.add(fam)
        picks.append(row)
    return picks


def _scenario_file(row: dict, path: Path) -> Path:
    sc = scenario_for_row(row)
    cluster = {"preset": SYSTEM_OF_PART[part_of_row(row)][0], "num_gpus": sc.cluster.num_gpus,
               "nic_bandwidth_gbps": sc.cluster.nic_bandwidth / GBIT}
    if sc.cluster.accelerator.name != scenario_for_row({**row}).cluster.accelerator.name:
        pytest.skip("accelerator override")
    doc = {"name": f"row-{row['row_id']}", "model": dataclasses.asdict(sc.model),
           "training": dataclasses.asdict(sc.training), "cluster": cluster,
           "plan": {k: v for k, v in dataclasses.asdict(sc.plan).items() if v is not None}}
    path.write_text(yaml.safe_dump(json.loads(json.dumps(doc)), sort_keys=False))
    return path


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r['source_id']}-{r['row_id']}")
def test_simulate_on_a_published_row_gives_what_validate_gives(row: dict, tmp_path: Path) -> None:
    scenario = _scenario_file(row, tmp_path / "row.yaml")
    out = tmp_path / "result.json"
    res = CliRunner().invoke(app, ["simulate", str(scenario), "--json", str(out)])
    assert res.exit_code == 0, res.output
    simulated = json.loads(out.read_text())["step_time_s"]
    assert simulated == pytest.approx(validate_row(row)["predicted_step_time_s"], rel=1e-9)


def test_one_default_collective_model_for_simulate_validate_fit_and_cross_validation() -> None:
    # the profiles are fitted, the intervals cross-validated and the rows validated with the model
    # simulate prints by default: one default, read by every entry point
    from clustersim.simulator.calibration import fit_crossval, fit_defaults, validate
    from clustersim.simulator.network import DEFAULT_FIDELITY, CommPricer
    from clustersim.simulator.step import simulate_step
    from clustersim.simulator.step.colocate import colocate

    entries = (simulate_step, colocate, validate.validate_row, validate.validate_runs,
               fit_defaults.sensitivities, fit_defaults.fit_default_profiles,
               fit_crossval.cross_validate_families)
    for f in entries:
        assert inspect.signature(f).parameters["fidelity"].default == DEFAULT_FIDELITY, f.__qualname__
    assert CommPricer.__dataclass_fields__["fidelity"].default == DEFAULT_FIDELITY


def test_validate_command_defaults_to_the_simulate_model(tmp_path: Path) -> None:
    runs = load_runs()
    row = _rows()[0]
    one = tmp_path / "one.csv"
    runs[runs.row_id == row["row_id"]].to_csv(one, index=False)
    out = tmp_path / "out.csv"
    res = CliRunner().invoke(app, ["validate", str(one), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    got = float(out.read_text().splitlines()[1].split(",")[8])
    assert got == pytest.approx(validate_row(row)["predicted_step_time_s"], rel=1e-9)
    assert got != pytest.approx(validate_row(row, fidelity="analytic")["predicted_step_time_s"], rel=1e-6)
