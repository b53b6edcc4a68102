"""The PyTorch validation backend run for real: 2 gloo ranks on loopback plus a 1-rank baseline.

One module-scoped measurement of the CI GPT (2 layers, h=128, seq 64) under the six 2-rank plans
(DDP, FSDP2, TP, TP+SP, PP GPipe, PP 1F1B) and the 1-rank baseline feeds every test; then the
launcher's failure paths. Budget: under 120 s on 2 shared cores.

Nothing here depends on how fast the host is or how loaded: the live run is checked for what
load cannot change (losses, structure, the protocol's own bounds, physical upper bounds that a
slower machine only moves further from). How close the predictions come is checked on recorded
measurements with their provenance (``test_torch_recorded.py``) and measured live by
``benchmarks/torch_backend_check.sh``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from clustersim.simulator.calibration.fit import fit_profiles  # noqa: E402
from clustersim.simulator.calibration.torch_backend.check import check  # noqa: E402
from clustersim.simulator.calibration.torch_backend.launch import LaunchError, launch  # noqa: E402
from clustersim.simulator.calibration.torch_backend.measure import TINY_GPT, load_steps, measure, standard_plans  # noqa: E402
from clustersim.simulator.calibration.torch_backend.specs import StepRecord, TimingRecipe  # noqa: E402

pytestmark = pytest.mark.timeout(400)  # at load 14-23 the measurement took over 240 s
TIMING = TimingRecipe(warmup=2, warmup_max=4, repeats=2, repeats_max=3, budget_s=10.0, step_passes=2)
"""2-3 interleaved passes, each with one pass of the microbenchmarks (as many as the 2 passes before)."""
PLANS = standard_plans(1) + standard_plans(2)


def launch_passes(records: dict[str, StepRecord], world: int) -> int:
    """Interleaved passes the launch of ``world`` ranks ran (its plans all ran the same passes)."""
    return len({k for r in records.values() if r.world_size == world for k in r.pass_index})


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("measured")
    # the default placement: one pass of the microbenchmarks inside every interleaved pass
    measure(out, TINY_GPT, PLANS, TIMING, timeout=300, collective_sizes=(4096, 1 << 16, 1 << 22), sweep=False)
    return out


@pytest.fixture(scope="module")
def records(folder: Path) -> dict[str, StepRecord]:
    return {r.plan.name: r for r in load_steps(folder)}


def test_every_plan_ran_on_its_ranks(folder: Path, records: dict[str, StepRecord]) -> None:
    assert set(records) == {p.name for p in PLANS}
    for r in records.values():
        assert r.world_size == r.plan.world_size and r.backend == "gloo"
        assert TIMING.repeats <= len(r.step_times) <= TIMING.repeats_max and all(t > 0 for t in r.step_times)
        assert TIMING.warmup <= r.warmup_steps <= TIMING.warmup_max
        assert 0 <= r.contention <= 1 and r.best <= r.ci[0] <= r.median <= r.ci[1]
        # the cores split over the ranks: 1 rank takes every core, 2 ranks share them
        assert r.threads_per_rank == max(1, len(os.sched_getaffinity(0)) // r.world_size)
    # the 2-rank plans were timed in interleaved passes, all alike: the same passes, in order
    two = [r for r in records.values() if r.world_size == 2]
    assert all(list(r.pass_index) == sorted(r.pass_index) for r in two)
    assert len({r.pass_index for r in two}) == 1 and len(set(two[0].pass_index)) >= TIMING.step_passes
    # one plan on one rank is interleaved with the microbenchmarks' blocks
    assert list(records["single"].pass_index) == sorted(records["single"].pass_index)
    assert len(set(records["single"].pass_index)) >= TIMING.step_passes
    assert json.loads((folder / "meta.json").read_text())["micro_placement"] == "interleaved"
    assert {p.name for p in folder.iterdir()} >= {"meta.json", "steps.json", "micro_w1.json", "micro_w2.json"}


def test_parallel_plans_train_exactly_like_the_single_rank_baseline(records: dict[str, StepRecord]) -> None:
    # Same init (seeded by parameter name) and data: DDP, FSDP2, TP, TP+SP and both pipeline
    # schedules must reproduce the baseline's loss before and after one Adam step, which only
    # holds if torch's sharding, gradient reduction and micro-batch scaling are applied right.
    base = records["single"].warmup_losses
    assert len(base) == 2
    # closed form: N(0, 0.02) weights give near-zero logits, so the first loss is ~ln(vocab)
    assert base[0] == pytest.approx(math.log(TINY_GPT.vocab_size), rel=0.02)
    assert base[1] < base[0]
    for name, r in records.items():
        assert r.warmup_losses == pytest.approx(base, rel=1e-4), name


def test_microbenchmarks_are_physical(folder: Path) -> None:
    micro = json.loads((folder / "micro_w2.json").read_text())
    rates = [g["flops"] / g["time_s"] for g in micro["compute"]["gemm"]]
    # one fp32 core: at most 2 FMA pipes x 16 lanes x 2 FLOP x ~5 GHz = 320 GFLOP/s (AVX-512)
    assert all(0 < r < 320e9 for r in rates)
    assert {e["kind"] for e in micro["collectives"]["entries"]} >= {"all_reduce", "all_gather", "send_recv"}
    assert all(e["time_s"] > 0 for e in micro["collectives"]["entries"])
    assert {f["variant"] for f in micro["collectives"]["framework"]} == {"ddp", "fsdp", "tp", "tp-sp"}
    assert all(f["per_call_s"] >= 0 for f in micro["collectives"]["framework"])
    # the sync-skew microbenchmark: every rank's chunk and chunk + all-reduce, every iteration
    skew = micro["collectives"]["skew"]
    chunks, totals = skew["chunk_s"], skew["total_s"]
    assert len(chunks) == len(totals) == 2 and all(len(c) == skew["iterations"] for c in chunks)
    assert all(0 < c <= t for cs, ts in zip(chunks, totals) for c, t in zip(cs, ts))
    # the TP-call situations at the TP plans' message (TINY_GPT: 8 sequences x 64 tokens x 128 x 4 bytes)
    tp = micro["collectives"]["tp_call"]
    assert tp["size"] == 8 * 64 * 128 * 4 and all(len(v) == tp["samples"] for v in tp["times_s"].values())
    assert tp["b2b_s"] > 0 and tp["chunk_s"] > 2 * 2 * 1024 * 512 * 256 / 640e9
    assert tp["after_s"] >= 0 and tp["overlap_s"] >= 0


def test_the_drift_probe_samples_the_microbenchmarks_and_every_timed_step(
        folder: Path, records: dict[str, StepRecord]) -> None:
    # 0.27 GFLOP per probe chunk: on <= 2 fp32 cores at most 2 x 320 GFLOP/s (AVX-512)
    floor = 2.0 * 256 ** 3 * 8 / 640e9
    for world in (1, 2):
        micro = json.loads((folder / f"micro_w{world}.json").read_text())
        probe = micro["compute"]["probe"]
        # one GEMM sample per GEMM shape and pass, taken between them
        assert len(probe["samples"]) == len(micro["compute"]["gemm"]) // 3 * len(micro["compute"]["passes"])
        assert probe["gemm_s"] > floor
        if world == 2:  # one latency sample after each collective of the sweep
            sweep = micro["collectives"]
            assert len(sweep["probe"]["samples"]) == len(sweep["entries"]) * len(sweep["passes"])
            assert sweep["probe"]["allreduce_s"] > 0
    for rec in records.values():
        assert len(rec.probes) == len(rec.step_times)  # one sample after each timed step
        assert all(p["gemm_s"] > floor for p in rec.probes)
        assert all((p["allreduce_s"] > 0) == (rec.world_size > 1) for p in rec.probes)
    rows = check(list(records.values()), {n: r.profile for n, r in fit_profiles(folder).items()},
                 references={n: r.probe for n, r in fit_profiles(folder).items()})
    assert all(0.5 <= r.drift_compute <= 2.0 and 0.5 <= r.drift_latency <= 2.0 for r in rows)
    assert all(r.drift_latency == 1.0 for r in rows if r.world_size == 1)


def test_fit_on_the_real_measurements(folder: Path) -> None:
    reports = fit_profiles(folder)
    two = reports[2].profile
    assert two.machine["peak_flops"] > 0 and two.machine["link_bandwidth"] > 0
    assert all(0 < e <= 1 for _, e in two.gemm_efficiency)
    assert two.collective_overhead > 0 and two.p2p_overhead > 0
    assert set(two.collective_laws) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
    assert set(two.framework_overhead) == {"ddp", "fsdp", "tp", "tp-sp"} and two.pipeline_fill_bytes == 0
    assert 0 <= two.sync_jitter_cv <= 0.15 and two.machine["sync_skew"] >= 0 and two.machine["sync_wait"] >= 0
    assert reports[1].profile.sync_jitter_cv == 0 and "sync_skew" not in reports[1].profile.machine
    cores = len(os.sched_getaffinity(0))
    assert reports[1].profile.machine["threads_per_rank"] == cores and two.machine["threads_per_rank"] == max(1, cores // 2)


def test_the_compute_microbenchmarks_ran_in_passes_and_their_fits_bound_the_predictions(
        folder: Path, records: dict[str, StepRecord]) -> None:
    # every launch ran one pass of the same entries in each of its interleaved step passes; the
    # fitted entries are their medians, and each plan's prediction lies inside the range of the
    # passes' predictions
    from clustersim.simulator.calibration.torch_backend.check import check
    from clustersim.simulator.calibration.torch_backend.stats import median

    for world in (1, 2):
        compute = json.loads((folder / f"micro_w{world}.json").read_text())["compute"]
        assert len(compute["passes"]) == launch_passes(records, world) >= TIMING.step_passes
        for i, entry in enumerate(compute["gemm"]):
            times = [p["gemm"][i]["time_s"] for p in compute["passes"]]
            assert entry["time_s"] == pytest.approx(median(times))
            assert entry["flops"] == compute["passes"][0]["gemm"][i]["flops"]
    sweep = json.loads((folder / "micro_w2.json").read_text())["collectives"]
    assert len(sweep["passes"]) == launch_passes(records, 2)
    assert all(len(p["entries"]) == len(sweep["entries"]) for p in sweep["passes"])
    reports = fit_profiles(folder)
    assert all(len(r.passes) == launch_passes(records, n) for n, r in reports.items())
    rows = check(list(records.values()), {n: r.profile for n, r in reports.items()}, "median",
                 passes={n: r.passes for n, r in reports.items()})
    assert all(r.predicted_low is not None and r.predicted_high is not None for r in rows)
    assert all(r.predicted_low <= r.predicted <= r.predicted_high for r in rows)  # type: ignore[operator]


def test_the_default_records_hot_and_cold_operands_in_the_same_passes(
        folder: Path, records: dict[str, StepRecord]) -> None:
    # ``--micro-operands both`` (the default): every GEMM, attention and memory entry twice, hot
    # and cycled through the launch's working set, in every pass; either fits a profile
    from clustersim.simulator.calibration.torch_backend.measure import micro_working_set

    meta = json.loads((folder / "meta.json").read_text())
    assert meta["micro_operands"] == "both"
    for world in (1, 2):
        compute = json.loads((folder / f"micro_w{world}.json").read_text())["compute"]
        plans = [p for p in PLANS if p.world_size == world]
        assert compute["micro_operands"] == "both" and compute["working_set_bytes"] == micro_working_set(TINY_GPT, plans)
        assert meta["working_set_bytes"][str(world)] == compute["working_set_bytes"]
        for key in ("gemm", "attention", "memory"):
            hot, cold = compute[key], compute[f"{key}_cold"]
            strip = ("time_s", "fwd_s", "bwd_s", "bandwidth")
            assert [{k: v for k, v in e.items() if k not in strip} for e in cold] == \
                   [{k: v for k, v in e.items() if k not in strip} for e in hot]  # the same shapes, in order
            assert all(len(p[f"{key}_cold"]) == len(cold) for p in compute["passes"])
        # each rank's threads get cpu_count // world cores (1 rank: all of them), each at most 320 GFLOP/s
        cores = max(1, (os.cpu_count() or 1) // world)
        assert all(0 < g["flops"] / g["time_s"] < 320e9 * cores for g in compute["gemm_cold"])
    cold = fit_profiles(folder, operands="cold")
    rows = check(list(records.values()), {n: r.profile for n, r in cold.items()})
    assert all(math.isfinite(r.predicted) and r.predicted > 0 for r in rows)


def test_check_predicts_every_measured_plan(folder: Path, records: dict[str, StepRecord]) -> None:
    # only that every plan is predicted, finitely and deterministically: how close is load-
    # dependent and checked on recorded measurements (test_torch_recorded.py)
    check = pytest.importorskip("clustersim.simulator.calibration.torch_backend.check")
    profiles = {n: r.profile for n, r in fit_profiles(folder).items()}
    rows = check.check(list(records.values()), profiles, "median")
    assert [r.plan for r in rows] == [r.plan.name for r in records.values()]
    assert all(math.isfinite(r.predicted) and r.predicted > 0 for r in rows)
    assert [r.predicted for r in check.check(list(records.values()), profiles, "median")] == [r.predicted for r in rows]


def test_a_failing_rank_ends_the_launch_with_one_line() -> None:
    with pytest.raises(LaunchError, match="unknown task kind") as info:
        # the ranks import torch and rendezvous before they fail: at load 14 that took over 60 s
        launch([{"kind": "nonsense"}], 2, timeout=200)
    assert "\n" not in str(info.value)


def test_a_hung_launch_is_killed_at_its_timeout() -> None:
    with pytest.raises(LaunchError, match="past timeout"):
        launch([{"kind": "compute"}], 2, timeout=0.3)


def test_cli_fit_and_check_on_the_measurements(folder: Path, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from clustersim.simulator.cli.calibrate import register
    from clustersim.simulator.profile import load_profile

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `calibrate` a sub-command
    runner = CliRunner()
    fitted = runner.invoke(app, ["calibrate", "fit", str(folder), "--out", str(tmp_path / "p.yaml")])
    assert fitted.exit_code == 0, fitted.output
    assert load_profile(tmp_path / "p.yaml").machine["ranks"] == 2.0
    pytest.importorskip("clustersim.simulator.calibration.torch_backend.check")
    checked = runner.invoke(app, ["calibrate", "check", str(folder), "--json", str(tmp_path / "c.json")])
    assert checked.exit_code == 0, checked.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert {r["plan"] for r in doc["rows"]} == {p.name for p in PLANS}
    assert "median |error|" in checked.output


def test_cli_measure_runs_the_baseline(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from clustersim.simulator.cli.calibrate import register

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)
    out = tmp_path / "m"
    res = CliRunner().invoke(app, ["calibrate", "measure", "--out", str(out), "--model", "tiny", "--ranks", "1",
                                   "--warmup", "2", "--repeats", "2", "--timeout", "220", "--quick",
                                   "--micro-passes", "1", "--micro-placement", "first", "--micro-operands", "hot"])
    assert res.exit_code == 0, res.output
    assert [r.plan.name for r in load_steps(out)] == ["single"]
    # the options reached the ranks: the old placement, one pass before the plan's one block
    assert len(json.loads((out / "micro_w1.json").read_text())["compute"]["passes"]) == 1
    assert load_steps(out)[0].pass_index == () and json.loads((out / "meta.json").read_text())["micro_placement"] == "first"
    compute = json.loads((out / "micro_w1.json").read_text())["compute"]
    assert json.loads((out / "meta.json").read_text())["micro_operands"] == compute["micro_operands"] == "hot"
    assert "gemm_cold" not in compute and compute["gemm"]  # hot only, as before the option
    assert "single" in res.output
