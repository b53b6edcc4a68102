"""Passes of the compute microbenchmarks: their median, each pass's fit, the predictions' interval.

No torch and nothing timed: the passes are built from the recorded small campaign
(``torch_recorded/small``) with every compute timing of a pass scaled by a known factor, so the
merged entries, the fields' ranges and the order of the predictions have closed forms.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from clustersim.simulator.calibration.fit import field_intervals, fit_profile, fit_profiles
from clustersim.simulator.calibration.torch_backend import micro_passes
from clustersim.simulator.calibration.torch_backend.check import CheckRow, check, summary
from clustersim.simulator.calibration.torch_backend.measure import TINY_GPT, measure, standard_plans, tasks_for
from clustersim.simulator.calibration.torch_backend.measure import load_steps
from clustersim.simulator.calibration.torch_backend.specs import TimingRecipe
from clustersim.simulator.cli.calibrate import register
from clustersim.simulator.errors import CalibrationError

RECORDED = Path(__file__).parent / "torch_recorded" / "small"
TIME_KEYS = ("time_s", "fwd_s", "bwd_s", "tiny_op_s", "per_linear_fwd_bwd_s", "backward_call_s")
FACTORS = (1.0, 1.25, 0.8)
"""Each pass's compute timings relative to the recording: one as recorded, one 25 % slower, one faster."""


def _scaled(compute: dict[str, Any], factor: float) -> dict[str, Any]:
    """One pass: the recorded compute entries with every timing x ``factor`` (rates / ``factor``)."""
    out = {k: copy.deepcopy(compute[k]) for k in micro_passes.SECTIONS + micro_passes.SINGLE
           if k in compute}  # the recording predates the eager-host microbenchmark ("host")
    for entry in [*out["gemm"], *out["attention"], *out["memory"], out["overhead"], out["optimizer"]]:
        for key in TIME_KEYS:
            if key in entry:
                entry[key] *= factor
        if "bandwidth" in entry:
            entry["bandwidth"] /= factor
    return out


def _with_passes(folder: Path, factors: tuple[float, ...] = FACTORS) -> Path:
    """A copy of the recorded campaign whose compute sections hold one pass per factor."""
    shutil.copytree(RECORDED, folder)
    for path in folder.glob("micro_w*.json"):
        micro = json.loads(path.read_text())
        runs = [_scaled(micro["compute"], f) for f in factors]
        micro["compute"] = {**micro["compute"], **micro_passes.merge(runs), "passes": runs}
        if "collectives" in micro:  # the sweep's passes: every call's time x the same factor
            sweeps = [{"entries": [{**e, "time_s": e["time_s"] * f} for e in micro["collectives"]["entries"]]}
                      for f in factors]
            micro["collectives"] = {**micro["collectives"], **micro_passes.merge(sweeps, ("entries",), ()),
                                    "passes": sweeps}
        path.write_text(json.dumps(micro))
    return folder


def test_merge_takes_each_timing_median_and_ignores_one_disturbed_pass() -> None:
    compute = json.loads((RECORDED / "micro_w2.json").read_text())["compute"]
    calm, disturbed = _scaled(compute, 1.0), _scaled(compute, 1.0)
    disturbed["gemm"][3]["time_s"] *= 3.0  # one entry of one pass slowed by the host
    merged = micro_passes.merge([calm, disturbed, _scaled(compute, 1.0)])
    assert merged["gemm"][3]["time_s"] == pytest.approx(compute["gemm"][3]["time_s"])
    merged = micro_passes.merge([_scaled(compute, f) for f in (1.0, 1.5, 0.5)])
    assert merged["attention"][0]["bwd_s"] == pytest.approx(compute["attention"][0]["bwd_s"])
    assert merged["gemm"][0]["layout"] == compute["gemm"][0]["layout"] and merged["gemm"][0]["m"] == compute["gemm"][0]["m"]
    # two passes: the median is their mean
    two = micro_passes.merge([_scaled(compute, 1.0), _scaled(compute, 2.0)])
    assert two["optimizer"]["time_s"] == pytest.approx(1.5 * compute["optimizer"]["time_s"])


@pytest.mark.parametrize("breaks, says", [
    (lambda p: p["gemm"].pop(), "disagree on gemm: \\[87, 86\\]"),
    (lambda p: p["gemm"][0].update(layout="other"), "gemm\\[0\\].layout"),
])
def test_passes_of_other_shapes_are_refused_naming_the_entry(breaks: Any, says: str) -> None:
    compute = json.loads((RECORDED / "micro_w2.json").read_text())["compute"]
    a, b = _scaled(compute, 1.0), _scaled(compute, 1.0)
    breaks(b)
    with pytest.raises(CalibrationError, match=says):
        micro_passes.merge([a, b])
    with pytest.raises(CalibrationError, match="none measured"):
        micro_passes.merge([])
    with pytest.raises(CalibrationError, match="2 recorded, 3 expected"):
        micro_passes.of({"passes": [a, b]}, 3)


def test_a_recording_without_passes_is_one_pass() -> None:
    compute = json.loads((RECORDED / "micro_w2.json").read_text())["compute"]
    (only,) = micro_passes.of(compute)
    assert only == compute
    report = fit_profile(RECORDED, world_size=2)
    assert len(report.passes) == 1 and report.passes[0] == report.profile
    assert all(lo == hi for lo, hi in report.intervals.values())


def test_each_field_ranges_over_the_passes_fits(tmp_path: Path) -> None:
    folder = _with_passes(tmp_path / "small")
    base, report = fit_profile(RECORDED, world_size=2), fit_profile(folder, world_size=2)
    assert len(report.passes) == 3
    # the median of (1, 1.25, 0.8) x each timing is the recorded timing: the same profile
    assert report.profile.machine["peak_flops"] == pytest.approx(base.profile.machine["peak_flops"])
    flat = [v for point in report.profile.gemm_efficiency for v in point]
    assert flat == pytest.approx([v for point in base.profile.gemm_efficiency for v in point])
    peak = base.profile.machine["peak_flops"]
    assert report.intervals["machine.peak_flops"] == pytest.approx((peak / 1.25, peak / 0.8))
    bw = base.profile.machine["memory_bandwidth"]
    assert report.intervals["machine.memory_bandwidth"] == pytest.approx((bw / 1.25, bw / 0.8))
    # efficiencies are ratios to the pass's own peak: a uniform slowdown leaves them unchanged
    for x, e in base.profile.gemm_efficiency:
        lo, hi = report.intervals[f"gemm_efficiency@{x:.0e}"]
        assert lo == pytest.approx(e) and hi == pytest.approx(e)
    # the collective laws: t = alpha + size / bw, every time x f: alpha x f, bandwidth / f
    for kind, (alpha, bus) in base.profile.collective_laws.items():
        assert report.profile.collective_laws[kind] == pytest.approx((alpha, bus))
        assert report.intervals[f"collective_laws.{kind}.alpha"] == pytest.approx((alpha * 0.8, alpha * 1.25))
        assert report.intervals[f"collective_laws.{kind}.bus_bandwidth"] == pytest.approx((bus / 1.25, bus / 0.8))
    lo, hi = report.intervals["step_overhead"]
    assert (lo, hi) == pytest.approx((base.profile.step_overhead * 0.8, base.profile.step_overhead * 1.25))
    # deterministic, and a pass equal to the median fit adds nothing to the range
    assert fit_profile(folder, world_size=2).intervals == report.intervals
    assert field_intervals(report.profile, [report.profile]) == {
        k: (v, v) for k, v in field_intervals(report.profile, []).items() for v in [v[0]]}


def test_check_gives_each_plan_the_interval_of_the_passes(tmp_path: Path) -> None:
    folder = _with_passes(tmp_path / "small")
    reports = fit_profiles(folder)
    records = load_steps(folder)
    profiles = {n: r.profile for n, r in reports.items()}
    plain = check(records, profiles, "median")
    rows = check(records, profiles, "median", passes={n: r.passes for n, r in reports.items()})
    assert [r.predicted for r in rows] == [r.predicted for r in plain]  # the central prediction is unchanged
    for r in rows:
        assert r.predicted_low is not None and r.predicted_high is not None
        assert r.predicted_low <= r.predicted <= r.predicted_high
        # every timing of one pass 25 % slower (compute and collectives): its prediction is slower,
        # by at most 25 % (the frameworks' per-call cost is measured once)
        assert r.predicted < r.predicted_high <= 1.25 * r.predicted * (1 + 1e-9), r.plan
        assert r.predicted_low < r.predicted, r.plan
    s = summary(rows)
    assert s["with_interval"] == len(rows)
    assert s["outside_interval"] == sum(1 for r in rows if not r.predicted_low <= r.measured <= r.predicted_high)  # type: ignore[operator]
    assert summary(plain)["with_interval"] == 0 and summary(plain)["outside_interval"] == 0


def test_outside_is_signed_and_relative_to_the_nearer_end() -> None:
    row = CheckRow(plan="p", world_size=2, measured=1.2, predicted=0.9, spread=0.1, predicted_low=0.8,
                   predicted_high=1.0)
    assert row.outside == pytest.approx(0.2)
    assert CheckRow(plan="p", world_size=2, measured=0.6, predicted=0.9, spread=0.1, predicted_low=0.8,
                    predicted_high=1.0).outside == pytest.approx(-0.25)
    assert CheckRow(plan="p", world_size=2, measured=0.9, predicted=0.9, spread=0.1, predicted_low=0.8,
                    predicted_high=1.0).outside == 0.0
    assert CheckRow(plan="p", world_size=2, measured=5.0, predicted=0.9, spread=0.1).outside == 0.0


def test_cli_check_prints_and_writes_the_interval(tmp_path: Path) -> None:
    folder = _with_passes(tmp_path / "small")
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `calibrate` a sub-command
    out = tmp_path / "check.json"
    res = CliRunner().invoke(app, ["calibrate", "check", str(folder), "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "plans measured outside the profile's own interval" in res.output
    doc = json.loads(out.read_text())
    assert all(r["predicted_low"] <= r["predicted"] <= r["predicted_high"] for r in doc["rows"])
    assert doc["summary"]["with_interval"] == len(doc["rows"])
    fit = CliRunner().invoke(app, ["calibrate", "fit", str(folder), "--out", str(tmp_path / "p.yaml")])
    assert fit.exit_code == 0 and "range over 3 passes" in fit.output


def test_the_tasks_ask_for_the_passes_and_refuse_none(tmp_path: Path) -> None:
    plans = standard_plans(2)
    (compute, collectives, *_rest) = tasks_for(TINY_GPT, plans, TimingRecipe(), 2, micro_passes=4,
                                                micro_placement="first")
    assert compute["kind"] == "compute" and compute["passes"] == 4
    assert collectives["kind"] == "collectives" and collectives["passes"] == 4
    with pytest.raises(CalibrationError, match="microbenchmark passes = 0"):
        measure(tmp_path / "never", TINY_GPT, plans, TimingRecipe(), micro_passes=0)
    assert not (tmp_path / "never").exists()
    # as a user runs it: the installed CLI's one error path (exit 2, one line, no traceback), nothing written
    res = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "measure", "--out",
                          str(tmp_path / "never"), "--micro-passes", "0"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "microbenchmark passes = 0" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


def test_cli_check_says_why_a_prediction_has_no_interval(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `calibrate` a sub-command
    one = CliRunner().invoke(app, ["calibrate", "check", str(RECORDED)])
    assert one.exit_code == 0 and "hold one pass (measure with --micro-passes 3" in one.output
    profile = tmp_path / "p.yaml"
    assert CliRunner().invoke(app, ["calibrate", "fit", str(_with_passes(tmp_path / "small")), "--out", str(profile)]).exit_code == 0
    given = CliRunner().invoke(app, ["calibrate", "check", str(tmp_path / "small"), "--calibration", str(profile)])
    assert given.exit_code == 0 and "a profile file (--calibration) keeps no microbenchmark passes" in given.output
