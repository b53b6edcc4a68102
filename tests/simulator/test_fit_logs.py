"""``calibrate fit --runs``: leave-one-family-out on imported runs whose measured times come from a
known profile (the fit must recover its scale and predict held-out families within the interval)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clustersim.files import write_json
from clustersim.simulator.calibration.fit_logs import (
    COMPUTE_GRID, QUANTILE_RUNS, fit_on_runs, interval_of, load_runs, predict,
)
from clustersim.simulator.calibration.fit_runs import scaled
from clustersim.simulator.fitted_interval import read_interval
from clustersim.simulator.calibration.imported_runs import RUN_FORMAT
from clustersim.simulator.profile import default_profile
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.scenario import scenario_from_dict
from clustersim.simulator.step.simulate import simulate

TRUE_COMPUTE = COMPUTE_GRID[4]  # 0.5 on the grid: the cluster runs its GEMMs at half the default efficiency
PLANS = {"pp2": {"tp": 2, "dp": 2, "pp": 2}, "dp": {"tp": 1, "dp": 8}, "tp2": {"tp": 2, "dp": 4}}


def write_runs(root: Path, factor: dict[str, float] | None = None) -> None:
    """One run per (model, plan) on 8 H100s; measured = simulated with the compute scale TRUE_COMPUTE."""
    for model in ("tiny", "tiny-moe"):
        for plan_name, plan in PLANS.items():
            data = {"name": f"{model}-{plan_name}", "model": model, "training": {"seq_len": 4096, "global_batch_size": 64},
                    "cluster": {"preset": "dgx-h100", "num_gpus": 8}, "plan": {"pp": 1, "micro_batch": 1, "sp": True, **plan}}
            sc = scenario_from_dict(data)
            prof = scaled(default_profile(sc.cluster.accelerator.name), TRUE_COMPUTE, 1.0)
            t = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=prof).step_time * (factor or {}).get(model, 1.0)
            folder = root / data["name"]
            folder.mkdir(parents=True)
            (folder / "scenario.yaml").write_text(yaml.safe_dump(data))
            write_json(folder / "run.json", {"format": RUN_FORMAT, "name": data["name"], "family": model,
                                             "steady": {"median_s": t}})


def test_fit_recovers_the_scale_and_predicts_held_out_families(tmp_path: Path) -> None:
    write_runs(tmp_path)
    runs = load_runs(tmp_path)
    fit = fit_on_runs(runs)
    assert fit.compute_scale == pytest.approx(TRUE_COMPUTE)
    assert fit.in_sample_error < 1e-9 and fit.out_of_sample_error < 1e-9
    assert fit.before_error > 0.05  # the default profile was wrong (overheads and communication dilute the factor 2)
    lo, hi = fit.interval
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    assert {h.family for h in fit.held_out} == {"tiny", "tiny-moe"} and len(fit.held_out) == len(runs)


def test_held_out_family_and_interval_from_cross_validation(tmp_path: Path) -> None:
    write_runs(tmp_path, factor={"tiny-moe": 1.1})  # the MoE family runs 10% slower than the profile explains
    runs = load_runs(tmp_path)
    fit = fit_on_runs(runs)
    ratios = sorted(h.ratio for h in fit.held_out)
    assert fit.interval == (pytest.approx(ratios[0]), pytest.approx(ratios[-1]))  # min-max under QUANTILE_RUNS runs
    assert len(runs) < QUANTILE_RUNS
    with pytest.raises(CalibrationError, match="needs runs of >= 2 families"):
        fit_on_runs(runs, hold_out="tiny")
    with pytest.raises(CalibrationError, match="no family"):
        fit_on_runs(runs, hold_out="gpt")


def test_interval_rule() -> None:
    assert interval_of([1.0, 1.2, 0.9]) == (0.9, 1.2)
    many = [1.0 + 0.01 * k for k in range(100)]
    lo, hi = interval_of(many)
    assert lo == pytest.approx(1.0495) and hi == pytest.approx(1.9405)


def test_cli_writes_profile_and_report_that_watch_reads(tmp_path: Path) -> None:
    write_runs(tmp_path / "runs")
    out = tmp_path / "cluster.yaml"
    p = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "fit", "--runs", str(tmp_path / "runs"),
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "out-of-sample median |error| 0.0%" in p.stdout
    report = json.loads((tmp_path / "cluster.fit.json").read_text())
    assert report["compute_scale"] == pytest.approx(TRUE_COMPUTE) and read_interval(out) == pytest.approx((1.0, 1.0))
    empty = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "fit", "--runs", str(tmp_path),
                            "--out", str(tmp_path / "x.yaml"), "--hold-out", "nope"], capture_output=True, text=True)
    assert empty.returncode == 2 and "no family" in empty.stderr


def test_predict_is_cached_and_scaled(tmp_path: Path) -> None:
    write_runs(tmp_path)
    run = load_runs(tmp_path)[0]
    cache: dict = {}
    slow = predict(run, 0.5, 1.0, cache)
    assert predict(run, 1.0, 1.0, cache) < slow and len(cache) == 2 and predict(run, 0.5, 1.0, cache) == slow


def test_simulate_with_a_fitted_profile_prints_its_interval(tmp_path: Path) -> None:
    """A profile written by ``calibrate fit --runs`` carries its held-out interval to ``simulate``."""
    from clustersim.simulator.profile import save_profile
    root = Path(__file__).resolve().parents[2]
    scenario = root / "examples" / "llama3_70b_h100.yaml"
    sc = scenario_from_dict(yaml.safe_load(scenario.read_text()))
    prof = default_profile(sc.cluster.accelerator.name)
    save_profile(prof, tmp_path / "P.yaml")
    write_json(tmp_path / "P.fit.json", {"interval": [0.9, 1.25]})
    t = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=prof).step_time
    p = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "simulate", str(scenario), "--calibration",
                        str(tmp_path / "P.yaml")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert f"interval {0.9 * t:.3g}-{1.25 * t:.3g} s (measured = predicted x [0.900, 1.250]" in text
    assert "80 % interval" not in text  # the published-runs interval gives way to the cluster's own
    q = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "simulate", str(scenario), "--calibration",
                        str(tmp_path / "P.yaml"), "--json", "-"], capture_output=True, text=True, timeout=600)
    assert q.returncode == 0, q.stderr
    fitted = json.loads(q.stdout)["fitted_interval"]
    assert (fitted["low_s"], fitted["high_s"]) == pytest.approx((0.9 * t, 1.25 * t))
    assert fitted["source"] == str(tmp_path / "P.fit.json")
