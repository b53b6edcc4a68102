"""The torch backend's model checked on recorded measurements (no torch, nothing timed).

``torch_recorded/small`` and ``torch_recorded/holdout`` are two ``calibrate measure`` folders
(step records, microbenchmarks, meta with host and load) recorded on the project's 2-core host;
``torch_recorded/PROVENANCE.md`` says the commands, the date, the load and the figures. Here
the profile is fitted on the small campaign's microbenchmarks only and predicts both models'
plans. Every figure below is deterministic: the same files give the same predictions, so these
tests can fail only when the model or the fit changes (a legitimate improvement moves the
guarded figures: update them and say so). The live timing check is a benchmark,
``benchmarks/torch_backend_check.sh``, never a test.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from clustersim.simulator.calibration.fit import fit_profiles
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.calibration.torch_backend.check import check, misordered, summary
from clustersim.simulator.calibration.torch_backend.measure import load_steps
from clustersim.simulator.calibration.torch_backend.specs import TimingRecipe
from clustersim.simulator.cli.calibrate import register
from clustersim.simulator.calibration.torch_backend.stats import ci_relative_width

RECORDED = Path(__file__).parent / "torch_recorded"
SMALL, HOLDOUT = RECORDED / "small", RECORDED / "holdout"


@pytest.fixture(scope="module")
def profiles() -> dict[int, CalibrationProfile]:
    return {n: r.profile for n, r in fit_profiles(SMALL).items()}


def test_the_recordings_carry_their_provenance() -> None:
    text = (RECORDED / "PROVENANCE.md").read_text()
    for folder in (SMALL, HOLDOUT):
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["host"]["cores"] >= 1 and len(meta["host"]["load_average"]) == 3
        assert "calibrate measure --out" in text and folder.name in text
    assert "load" in text


def test_the_recorded_steps_followed_the_protocol() -> None:
    # the stop rule on real data: each plan stopped at its interval target, its cap or its budget
    for folder in (SMALL, HOLDOUT):
        timing = TimingRecipe(**json.loads((folder / "meta.json").read_text())["timing"])
        for r in load_steps(folder):
            n = len(r.step_times)
            assert timing.repeats <= n <= timing.repeats_max, r.plan.name
            stopped_on_width = ci_relative_width(r.step_times) <= timing.ci_width
            assert stopped_on_width or n == timing.repeats_max or sum(r.step_times) >= timing.budget_s, r.plan.name
            assert timing.warmup <= r.warmup_steps <= timing.warmup_max and r.threads_per_rank >= 1


def test_every_recorded_plan_trained_like_the_single_rank() -> None:
    for folder in (SMALL, HOLDOUT):
        records = {r.plan.name: r for r in load_steps(folder)}
        base = records["single"].warmup_losses
        assert base[0] == pytest.approx(math.log(records["single"].model.vocab_size), rel=0.02)
        for name, r in records.items():
            assert r.warmup_losses == pytest.approx(base, rel=1e-4), (folder.name, name)


def test_recorded_collectives_follow_alpha_beta() -> None:
    micro = json.loads((SMALL / "micro_w2.json").read_text())
    by = {(e["kind"], e["size"]): e["time_s"] for e in micro["collectives"]["entries"]}
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "send_recv"):
        small, large = by[(kind, 4096.0)], by[(kind, float(1 << 22))]
        # 4 KiB is latency-bound and 4 MiB bandwidth-bound: the large one moves bytes >= 10x faster
        assert (1 << 22) / large > 10 * 4096.0 / small, kind


def test_the_profile_holds_every_measured_law(profiles: dict[int, CalibrationProfile]) -> None:
    two = profiles[2]
    assert set(two.collective_laws) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
    assert set(two.framework_overhead) == {"ddp", "fsdp", "tp", "tp-sp"}
    assert profiles[1].machine["threads_per_rank"] >= two.machine["threads_per_rank"]


def test_predictions_of_the_recorded_runs_are_deterministic(profiles: dict[int, CalibrationProfile]) -> None:
    records = load_steps(SMALL)
    first = check(records, profiles, "median")
    again = check(records, {n: r.profile for n, r in fit_profiles(SMALL).items()}, "median")
    assert [r.predicted for r in first] == [r.predicted for r in again]
    assert all(math.isfinite(r.predicted) and r.predicted > 0 for r in first)


# Guarded figures of the recorded campaigns (PROVENANCE.md), predicted with the small campaign's
# microbenchmark-only profile; recorded at load 10-15 on 2 cores, so the medians carry 3-5x of
# other jobs' CPU time and the run-delay-corrected ("uncontended") statistic is the one compared.
# (median |error| upper bound, Spearman lower bound) per folder; model changes that move them: say so.
# Moved by the collective census (branch torch2): the simulator now prices the calls the current
# backend issues (TP's ends and loss, the SP norms' all-reduce, FSDP2's root unit, DDP's first
# bucket), which these recordings' older backend (before loss_parallel and one reduction of q/k/v's
# input gradient) did not issue as such: small 26.1 -> 32.3 %, holdout 20.4 -> 34.1 % (tp2 +14 ->
# +32 % and +31 -> +56 %). Replace with a quiet recording of the current backend.
GUARDS = {"small": (0.33, 0.71), "holdout": (0.35, 0.64)}


@pytest.mark.parametrize("name", sorted(GUARDS))
def test_recorded_runs_are_predicted_as_well_as_guarded(name: str, profiles: dict[int, CalibrationProfile]) -> None:
    rows = check(load_steps(RECORDED / name), profiles, "uncontended")
    s = summary(rows)
    worst, rho = GUARDS[name]
    assert s["median_abs_error"] <= worst, s
    assert s["rank_correlation"] >= rho, s
    assert s["fastest_gap"] <= 0.05, s  # the plan predicted fastest is measured fastest or within 5 %
    assert len(misordered(rows)) == s["misordered_pairs"] < len(rows) * (len(rows) - 1) // 4


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `calibrate` a sub-command
    return app


def test_cli_check_prints_the_ranking_and_writes_it(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    res = CliRunner().invoke(_app(), ["calibrate", "check", str(HOLDOUT), "--micro", str(SMALL),
                                      "--statistic", "uncontended", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert "rank correlation (Spearman)" in res.output and "pairs ordered wrongly" in res.output
    assert "host load" in res.output and doc["profile_from"] == str(SMALL)
    assert len(doc["misordered"]) == doc["summary"]["misordered_pairs"]


@pytest.mark.parametrize("args, says", [
    (["--micro", "/nonexistent-folder"], "no micro_w"),
    (["--micro", str(SMALL), "--calibration", "p.yaml"], "not both"),
    (["--statistic", "mean"], "--statistic"),
])
def test_cli_check_refuses_bad_options_with_one_line(args: list[str], says: str) -> None:
    # as a user runs it: the installed CLI's one error path (exit 2, one line, no traceback)
    res = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "check", str(HOLDOUT), *args],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and says in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
