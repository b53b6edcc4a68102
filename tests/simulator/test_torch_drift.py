"""The drift probe: the host's compute rate and per-call latency, measured with the
microbenchmarks and around every plan, move the profile a plan is predicted with.

No torch and nothing timed: the recorded small campaign (``torch_recorded/small``, measured
before the probe existed) is given probes with known ratios, so the moved profile and the
predictions have closed forms.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from clustersim.simulator.calibration.fit import fit_profiles, probe_reference
from clustersim.simulator.calibration.torch_backend.check import (
    DRIFT_RANGE, Drift, check, drift, drifted, plan_collectives, predict)
from clustersim.simulator.calibration.torch_backend.measure import load_steps
from clustersim.simulator.calibration.torch_backend.specs import record_from_dict
from clustersim.simulator.cli.calibrate import register
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.network import CommPricer
from clustersim.simulator.plan import ParallelPlan, Placement
from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.topologies import get_cluster

RECORDED = Path(__file__).parent / "torch_recorded" / "small"
GEMM_S, ALLREDUCE_S = 3e-3, 1.5e-3
"""The reference probe written into the campaign's microbenchmarks."""


def _with_probes(folder: Path, compute: float, latency: float, *, plans: tuple[str, ...] | None = None) -> Path:
    """The recorded campaign with a reference probe in each microbenchmark file and, around every
    plan (or only ``plans``), probes whose means are ``compute`` x and ``latency`` x the reference."""
    shutil.copytree(RECORDED, folder)
    for path in folder.glob("micro_w*.json"):
        micro = json.loads(path.read_text())
        world = int(path.stem.split("_w")[1])
        ar = ALLREDUCE_S if world > 1 else 0.0
        # the compute suite's probe sets the GEMM reference, the sweep's the latency one
        micro["compute"]["probe"] = {"gemm_s": GEMM_S, "allreduce_s": 9.0 * ar, "gemm_flops": 2.7e8}
        if "collectives" in micro:
            micro["collectives"]["probe"] = {"gemm_s": 7.0 * GEMM_S, "allreduce_s": ar, "gemm_flops": 2.7e8}
        path.write_text(json.dumps(micro))
    steps = json.loads((folder / "steps.json").read_text())
    for s in steps:
        if plans is None or s["plan"]["name"] in plans:
            ar = ALLREDUCE_S if s["world_size"] > 1 else 0.0
            # one sample after each step: their median is the ratio asked for, one outlier ignored
            s["probes"] = [{"gemm_s": GEMM_S * (compute + d), "allreduce_s": ar * (latency + e)}
                           for d, e in ((-0.1, -0.2), (0.0, 0.0), (3.0, 5.0))]
    (folder / "steps.json").write_text(json.dumps(steps))
    return folder


def _predictions(folder: Path, *, with_drift: bool) -> dict[str, float]:
    reports = fit_profiles(folder)
    refs = {n: r.probe for n, r in reports.items() if r.probe} if with_drift else None
    rows = check(load_steps(folder), {n: r.profile for n, r in reports.items()}, references=refs)
    return {r.plan: r.predicted for r in rows}


def test_the_reference_is_the_compute_suites_gemm_and_the_sweeps_latency(tmp_path: Path) -> None:
    folder = _with_probes(tmp_path / "c", 1.0, 1.0)
    reports = fit_profiles(folder)
    assert reports[2].probe == {"gemm_s": GEMM_S, "allreduce_s": ALLREDUCE_S}
    assert reports[1].probe == {"gemm_s": GEMM_S, "allreduce_s": 0.0}  # one rank: the compute suite's, no all-reduce
    assert probe_reference(json.loads((RECORDED / "micro_w2.json").read_text())) == {}  # measured before the probe
    steps = load_steps(folder)
    assert all(len(r.probes) == 3 for r in steps)
    assert record_from_dict(steps[0].to_dict()).probes == steps[0].probes  # the probes travel through steps.json


def test_no_drift_and_no_probes_leave_every_prediction_as_fitted(tmp_path: Path) -> None:
    plain = _predictions(RECORDED, with_drift=True)  # no probes anywhere: drift is 1
    assert plain == _predictions(RECORDED, with_drift=False)
    same = _with_probes(tmp_path / "same", 1.0, 1.0)  # probes equal to the reference
    assert _predictions(same, with_drift=True) == pytest.approx(plain, rel=1e-12)
    rows = check(load_steps(same), {n: r.profile for n, r in fit_profiles(same).items()},
                 references={n: r.probe for n, r in fit_profiles(same).items()})
    assert all(r.drift_compute == pytest.approx(1.0) and r.drift_latency == pytest.approx(1.0) for r in rows)


def test_a_slower_host_slows_the_compute_bound_single_rank_by_exactly_its_factor(tmp_path: Path) -> None:
    plain = _predictions(RECORDED, with_drift=False)
    slow = _predictions(_with_probes(tmp_path / "slow", 1.25, 1.0), with_drift=True)
    # every compute figure moves by the factor (rates / 1.25, overheads x 1.25): the 1-rank step is all compute
    assert slow["single"] == pytest.approx(1.25 * plain["single"], rel=1e-9)
    for plan in plain:  # the 2-rank plans' compute slows, their bandwidth terms do not
        assert plain[plan] < slow[plan] <= 1.25 * plain[plan] * (1 + 1e-9), plan


def test_a_slower_call_latency_moves_only_the_plans_that_communicate(tmp_path: Path) -> None:
    plain = _predictions(RECORDED, with_drift=False)
    lat = _predictions(_with_probes(tmp_path / "lat", 1.0, 1.5), with_drift=True)
    assert lat["single"] == pytest.approx(plain["single"], rel=1e-12)
    steps = {r.plan.name: r for r in load_steps(RECORDED)}
    for plan in plain:
        if plan != "single":
            assert plan_collectives(steps[plan].plan)
            # every per-call cost grows (DDP's measured per-call cost is 0 in this recording)
            assert lat[plan] >= plain[plan] * (1 - 1e-12), plan
    assert all(lat[p] > plain[p] for p in ("dp2-fsdp", "tp2", "tp2-sp", "pp2-gpipe", "pp2-1f1b"))
    # TP issues the most calls per step: it moves the most
    moved = {p: lat[p] - plain[p] for p in plain}
    assert moved["tp2-sp"] > moved["tp2"] > moved["dp2-ddp"]


def test_the_moved_profile_has_the_closed_form_fields(tmp_path: Path) -> None:
    profile = fit_profiles(RECORDED)[2].profile
    d = Drift(compute=1.25, latency=1.5)
    moved = drifted(profile, d)
    assert moved.machine["peak_flops"] == pytest.approx(profile.machine["peak_flops"] / 1.25)
    assert moved.machine["memory_bandwidth"] == pytest.approx(profile.machine["memory_bandwidth"] / 1.25)
    assert moved.kernel_overhead == pytest.approx(1.25 * profile.kernel_overhead)
    assert moved.step_overhead == pytest.approx(1.25 * profile.step_overhead)
    assert moved.collective_overhead == pytest.approx(1.5 * profile.collective_overhead)
    assert moved.p2p_overhead == pytest.approx(1.5 * profile.p2p_overhead)
    assert moved.framework_overhead == pytest.approx({k: 1.5 * v for k, v in profile.framework_overhead.items()})
    for kind, (alpha, bw) in profile.collective_laws.items():
        assert moved.collective_laws[kind] == pytest.approx((1.5 * alpha, bw))
    assert drifted(profile, Drift()) is profile
    # predicting with the reference is predicting with the moved profile
    folder = _with_probes(tmp_path / "both", 1.25, 1.5)
    rec = next(r for r in load_steps(folder) if r.plan.name == "tp2")
    ref = fit_profiles(folder)[2].probe
    assert drift(rec, ref) == Drift(compute=pytest.approx(1.25), latency=pytest.approx(1.5))  # type: ignore[arg-type]
    assert predict(rec, profile, reference=ref) == pytest.approx(predict(rec, moved), rel=1e-12)


def test_a_wild_probe_is_clipped_and_a_missing_one_is_no_drift(tmp_path: Path) -> None:
    folder = _with_probes(tmp_path / "wild", 10.0, 0.25, plans=("tp2",))
    ref = fit_profiles(folder)[2].probe
    recs = {r.plan.name: r for r in load_steps(folder)}
    assert drift(recs["tp2"], ref) == Drift(compute=DRIFT_RANGE[1], latency=DRIFT_RANGE[0])
    assert drift(recs["dp2-ddp"], ref) == Drift()  # no probes around this plan
    assert drift(recs["tp2"], {}) == Drift()  # no reference


def test_cli_check_prints_the_drift_and_drift_none_predicts_as_fitted(tmp_path: Path) -> None:
    folder = _with_probes(tmp_path / "cli", 1.25, 1.5)
    app = typer.Typer()
    register(app)
    on, off = tmp_path / "on.json", tmp_path / "off.json"
    res = CliRunner().invoke(app, ["calibrate", "check", str(folder), "--drift", "both", "--json", str(on)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # the console wraps the drift line
    assert "tp2 1.25/1.50" in text and "single 1.25/1.00" in text  # 1 rank has no all-reduce
    default = CliRunner().invoke(app, ["calibrate", "check", str(folder)])  # the default: rates only
    assert default.exit_code == 0 and "tp2 1.25/1.00" in " ".join(default.output.split()), default.output
    res = CliRunner().invoke(app, ["calibrate", "check", str(folder), "--drift", "none", "--json", str(off)])
    assert res.exit_code == 0, res.output
    rates = tmp_path / "rates.json"
    res = CliRunner().invoke(app, ["calibrate", "check", str(folder), "--drift", "compute", "--json", str(rates)])
    assert res.exit_code == 0, res.output
    only = {r["plan"]: r for r in json.loads(rates.read_text())["rows"]}
    assert only["tp2"]["drift_compute"] == pytest.approx(1.25) and only["tp2"]["drift_latency"] == 1.0
    # as a user runs it: the installed CLI's one error path (exit 2, one line, no traceback)
    bad = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "check", str(folder),
                          "--drift", "latency"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--drift 'latency': use one of ['both', 'compute', 'none']" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    rows_on = {r["plan"]: r for r in json.loads(on.read_text())["rows"]}
    rows_off = {r["plan"]: r for r in json.loads(off.read_text())["rows"]}
    assert rows_off["single"]["drift_compute"] == 1.0
    assert rows_on["single"]["predicted"] == pytest.approx(1.25 * rows_off["single"]["predicted"], rel=1e-9)
    assert all(r["drift_compute"] == 1.0 and r["drift_latency"] == 1.0 for r in rows_off.values())
    assert rows_on["tp2"]["drift_latency"] == pytest.approx(1.5) and rows_on["tp2"]["predicted"] > rows_off["tp2"]["predicted"]
    assert rows_off["tp2"]["predicted"] == pytest.approx(_predictions(RECORDED, with_drift=False)["tp2"], rel=1e-12)


def test_the_tp_call_microbenchmark_prices_every_blocking_call_by_its_wait_after_compute(tmp_path: Path) -> None:
    """``blocking_call_wait`` = after - back to back (4 - 3 ms), added once per call a rank blocks
    on (on CPU ranks every call: nothing overlaps). Calls on the critical path: tp2 4 L + 5 (2
    blocks x forward and backward per layer, the embedding's, the output layer's and the loss's 3),
    tp2-sp 8 L + 8 (2 gathers and 2 scatters per block, 2 at each end, the loss's 3, the norms'
    gradients), dp2-fsdp 3 L + 2 (a gather forward and backward and a scatter per block, the root's
    gather and scatter: ``microbench_comm.framework_calls``), dp2-ddp 2 (DDP's 1 MiB first bucket and one
    25 MiB bucket), pp2-gpipe 2 (the fill's activation and the drain's gradient: (m + pp - 1)
    passes + 2 (pp - 1) sends), pp2-1f1b between that and its 2 m sends a rank, single none."""
    folder = tmp_path / "tp"
    shutil.copytree(RECORDED, folder)
    path = folder / "micro_w2.json"
    micro = json.loads(path.read_text())
    micro["collectives"]["tp_call"] = {"size": float(1 << 20), "samples": 3.0, "b2b_s": 3e-3, "after_s": 4e-3,
                                       "overlap_s": 9e-3, "chunk_s": 6e-3}
    path.write_text(json.dumps(micro))
    before, after = fit_profiles(RECORDED), fit_profiles(folder)
    m = after[2].profile.machine
    assert (m["tp_call_bytes"], m["tp_call_b2b"], m["tp_call_after"], m["tp_call_overlap"]) == (
        float(1 << 20), 3e-3, 4e-3, 9e-3)
    assert "tp_call_b2b" not in before[2].profile.machine and "tp_call_b2b" not in after[1].profile.machine
    layers = json.loads((RECORDED / "meta.json").read_text())["model"]["num_layers"]
    calls = {"single": 0, "dp2-ddp": 2, "dp2-fsdp": 3 * layers + 2, "tp2": 4 * layers + 5, "tp2-sp": 8 * layers + 8,
             "pp2-gpipe": 2}
    old, new = _predictions(RECORDED, with_drift=False), _predictions(folder, with_drift=False)
    for plan, n in calls.items():
        assert new[plan] - old[plan] == pytest.approx(n * 1e-3, abs=1e-9), plan
    assert 2e-3 < new["pp2-1f1b"] - old["pp2-1f1b"] <= 2 * 4 * 1e-3  # 4 micro-batches
    assert after[2].profile.blocking_call_wait == pytest.approx(1e-3, rel=1e-12)
    assert before[2].profile.blocking_call_wait == 0.0 and after[1].profile.blocking_call_wait == 0.0
    # a per-call latency: the drift probe's latency factor moves it with the others
    assert drifted(after[2].profile, Drift(latency=1.5)).blocking_call_wait == pytest.approx(1.5e-3, rel=1e-12)
    micro["collectives"]["tp_call"]["after_s"] = 2e-3  # faster after compute than back to back: no wait
    path.write_text(json.dumps(micro))
    assert fit_profiles(folder)[2].profile.blocking_call_wait == 0.0
    micro["collectives"]["tp_call"]["overlap_s"] = -1.0
    path.write_text(json.dumps(micro))
    with pytest.raises(CalibrationError, match="overlap_s missing or negative"):
        fit_profiles(folder)


@pytest.mark.parametrize("fidelity", ["flow", "analytic"])
def test_the_blocking_call_wait_is_added_once_to_every_call_the_pricer_prices(fidelity: str) -> None:
    """Both tiers (the flow model and the search's closed forms) add ``blocking_call_wait`` once
    per collective and per pipeline send, nothing to a group of one rank."""
    plan = ParallelPlan(tp=2, pp=2, dp=2, micro_batch=1)
    cluster = get_cluster("a100", plan.world_size)
    base = default_profile("a100")
    waited = base.replace(blocking_call_wait=2.5e-3)

    def pricer(p: CalibrationProfile) -> CommPricer:
        return CommPricer(cluster, Placement(plan, cluster.gpus_per_node), p, fidelity)  # type: ignore[arg-type]  # fidelity: a parametrized str

    plain, slow = pricer(base), pricer(waited)
    for kind, axis in (("all_reduce", "tp"), ("all_gather", "dp"), ("reduce_scatter", "dp")):
        assert slow.time(kind, 2**20, axis) - plain.time(kind, 2**20, axis) == pytest.approx(2.5e-3, rel=1e-9)
    assert slow.p2p_time(2**20, 0) - plain.p2p_time(2**20, 0) == pytest.approx(2.5e-3, rel=1e-9)
    assert slow.time("all_reduce", 2**20, "cp") == 0.0  # cp = 1: nothing moves, nothing waits
