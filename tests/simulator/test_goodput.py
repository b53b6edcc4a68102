"""Long-run goodput: closed forms without failures, renewal-reward with failures, Young/Daly."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from clustersim.simulator.longrun.checkpoint import CheckpointSpec, LongRunError, checkpoint_cost
from clustersim.simulator.longrun.failures import FailureSpec
from clustersim.simulator.longrun.goodput import (CAUSES, LongRunSpec, daly_interval, simulate_long_run, sweep_intervals,
                               young_interval)
from clustersim.simulator.cli.goodput import register

DAY = 86400.0
GB = 1e9
# Llama 3 405B on 16,384 H100 (The Llama 3 Herd of Models, sec. 3.3.2 / Table 4): TP8 PP16 DP128,
# 16M tokens per step (2048 x 8192), 400 TFLOP/s per GPU. Step time stated as an input from those
# figures: tokens * (6 * 405e9 + 12 * 126 * 16384 * 8192) / (16384 * 400e12) = 6.74 s.
LLAMA_STEP = 2048 * 8192 * (6 * 405e9 + 12 * 126 * 16384 * 8192) / (16384 * 400e12)
# bf16 weights + fp32 master weights + two fp32 Adam moments = 14 bytes per parameter, sharded
LLAMA_STATE_PER_GPU = 405e9 * 14 / 16384
# Tectonic: 2 TB/s sustained (Llama 3 paper, sec. 3.3.1); per-node write share is our assumption
LLAMA_CKPT = CheckpointSpec(write_bandwidth_per_node=25 * GB, storage_bandwidth=2e12)
# 419 unexpected interruptions in 54 days (Llama 3 paper, sec. 3.3.4); detection and restart
# times are our assumptions (the paper does not publish them)
LLAMA_FAILURES = FailureSpec(system_mtbf=54 * DAY / 419, detection_time=120.0, restart_time=600.0)


def _llama(days: float = 30.0, reps: int = 100, interval: float = 250.0) -> LongRunSpec:
    return LongRunSpec(days=days, step_time=LLAMA_STEP, tokens_per_step=2048 * 8192, num_gpus=16384,
                       gpus_per_node=8, state_bytes_per_device=LLAMA_STATE_PER_GPU,
                       checkpoint_interval=interval, cost_per_gpu_hour=2.0, repetitions=reps)


def _renewal_goodput(result, failures: FailureSpec) -> float:
    """Renewal-reward goodput for Poisson failures: each uptime ~ Exp(M) saves tau per completed
    cycle (E = tau / (e^{L/M} - 1)); a recovery of length R restarted by failures lasts
    M (e^{R/M} - 1) on average."""
    m, tau = result.system_mtbf, result.checkpoint_interval
    period = tau + result.cost.blocking_time
    recovery = failures.detection_time + failures.restart_time + result.cost.restore_time
    return tau / math.expm1(period / m) / (m + m * math.expm1(recovery / m))


def test_no_failures_goodput_is_one_minus_checkpoint_overhead() -> None:
    spec = _llama(days=10, reps=3)
    result = simulate_long_run(spec, LLAMA_CKPT, FailureSpec(), np.random.default_rng(0))
    tau, stall = result.checkpoint_interval, result.cost.blocking_time
    cycles = math.floor(spec.horizon / (tau + stall))
    exact = (cycles * tau + min(spec.horizon - cycles * (tau + stall), tau)) / spec.horizon
    assert result.goodput_mean == pytest.approx(exact, rel=1e-12)
    assert result.goodput_mean == pytest.approx(1 - stall / (tau + stall), abs=tau / spec.horizon)
    assert result.goodput_ci95[0] == pytest.approx(result.goodput_ci95[1])


def test_async_no_failures_pays_only_the_snapshot() -> None:
    ckpt = replace(LLAMA_CKPT, asynchronous=True, snapshot_bandwidth=50 * GB)
    result = simulate_long_run(_llama(days=10, reps=2), ckpt, FailureSpec(), np.random.default_rng(0))
    stall = LLAMA_STATE_PER_GPU / (50 * GB)
    tau = result.checkpoint_interval
    assert result.goodput_mean == pytest.approx(1 - stall / (tau + stall), abs=1e-3)


def test_llama3_goodput_has_a_confidence_interval_and_matches_renewal_theory() -> None:
    result = simulate_long_run(_llama(), LLAMA_CKPT, LLAMA_FAILURES, np.random.default_rng(2024))
    low, high = result.goodput_ci95
    assert low < result.goodput_mean < high and high - low < 0.01
    assert result.goodput_p5 <= result.goodput_p50 <= result.goodput_p95
    assert result.goodput_mean == pytest.approx(_renewal_goodput(result, LLAMA_FAILURES),
                                                abs=2 * (high - low))
    # 30 days at one interruption per 3.09 h: 233 failures per history on average
    assert result.failures_mean == pytest.approx(30 * 419 / 54, abs=4 * math.sqrt(233 / 100))
    # the paper reports > 90% effective training time; our assumed restart times agree with it
    assert result.goodput_mean > 0.90
    assert result.cost_mean == pytest.approx(16384 * 30 * 24 * 2.0)


def test_time_is_conserved_in_every_history() -> None:
    failures = replace(LLAMA_FAILURES, spare_nodes=1, repair_time=6 * 3600.0, reschedule_time=300.0)
    result = simulate_long_run(_llama(days=5, reps=10), LLAMA_CKPT, failures, np.random.default_rng(1))
    for record in result.records:
        total = record.useful_time + sum(record.lost_time[c] for c in CAUSES)
        assert total == pytest.approx(5 * DAY, rel=1e-9)
        assert all(record.lost_time[c] >= 0 for c in CAUSES)


def test_seeded_runs_are_identical() -> None:
    first = simulate_long_run(_llama(days=5, reps=5), LLAMA_CKPT, LLAMA_FAILURES, np.random.default_rng(9))
    again = simulate_long_run(_llama(days=5, reps=5), LLAMA_CKPT, LLAMA_FAILURES, np.random.default_rng(9))
    assert first.to_dict() == again.to_dict() and first.records == again.records


def test_spares_never_hurt_and_shortage_shows_as_waiting() -> None:
    base = replace(LLAMA_FAILURES, repair_time=12 * 3600.0, reschedule_time=300.0)
    results = [simulate_long_run(_llama(days=5, reps=10), LLAMA_CKPT, replace(base, spare_nodes=s),
                                 np.random.default_rng(4)) for s in (0, 2, 16)]
    goodputs = [r.goodput_mean for r in results]
    assert goodputs[0] <= goodputs[1] <= goodputs[2]
    assert results[0].lost_hours["spare_wait"] > 0 and results[2].lost_hours["spare_wait"] == 0


def test_goodput_falls_as_failures_rise() -> None:
    means = [simulate_long_run(_llama(days=10, reps=20), LLAMA_CKPT,
                               replace(LLAMA_FAILURES, system_mtbf=hours * 3600.0),
                               np.random.default_rng(3)).goodput_mean for hours in (12.0, 3.0, 0.75)]
    assert means[0] > means[1] > means[2]


def test_failures_during_long_recoveries_match_renewal_theory() -> None:
    # recovery of half an MTBF: many recoveries are hit again and restart from scratch
    failures = FailureSpec(system_mtbf=4 * 3600.0, detection_time=600.0, restart_time=6600.0)
    result = simulate_long_run(_llama(days=60, reps=60, interval=600.0), LLAMA_CKPT, failures,
                               np.random.default_rng(12))
    half = (result.goodput_ci95[1] - result.goodput_ci95[0]) / 2
    assert result.goodput_mean == pytest.approx(_renewal_goodput(result, failures), abs=3 * half + 2e-3)


def test_weibull_shape_one_is_exponential() -> None:
    exp = replace(LLAMA_FAILURES, system_mtbf=math.inf, mtbf_gpu=16384 * 54 * DAY / 419)
    means = [simulate_long_run(_llama(days=20, reps=40), LLAMA_CKPT, replace(exp, distribution=d),
                               np.random.default_rng(6)) for d in ("exponential", "weibull")]
    width = sum(r.goodput_ci95[1] - r.goodput_ci95[0] for r in means)
    assert means[0].goodput_mean == pytest.approx(means[1].goodput_mean, abs=width)


def test_ample_spares_make_repair_time_irrelevant() -> None:
    quick = replace(LLAMA_FAILURES, reschedule_time=300.0)
    slow_repair = replace(quick, repair_time=3 * DAY, spare_nodes=10_000)
    runs = [simulate_long_run(_llama(days=5, reps=5), LLAMA_CKPT, f, np.random.default_rng(8))
            for f in (quick, slow_repair)]
    assert runs[0].goodput_mean == pytest.approx(runs[1].goodput_mean, rel=1e-9)
    assert runs[1].lost_hours["spare_wait"] == 0.0


def test_async_checkpoints_beat_sync_when_the_snapshot_is_cheap() -> None:
    sync = simulate_long_run(_llama(days=10, reps=20), LLAMA_CKPT, LLAMA_FAILURES, np.random.default_rng(3))
    asynchronous = simulate_long_run(_llama(days=10, reps=20), replace(LLAMA_CKPT, asynchronous=True),
                                     LLAMA_FAILURES, np.random.default_rng(3))
    assert asynchronous.cost.blocking_time < sync.cost.blocking_time
    # first order: the stall saved per cycle, over the share of wall time spent training
    tau, stall = sync.checkpoint_interval, sync.cost.blocking_time
    training_share = sync.goodput_mean * (tau + stall) / tau
    gain = (stall - asynchronous.cost.blocking_time) / (tau + stall) * training_share
    assert asynchronous.goodput_mean - sync.goodput_mean == pytest.approx(gain, rel=0.25)


def test_young_daly_optimum_lies_in_the_simulated_band() -> None:
    sweep = sweep_intervals(_llama(days=15, reps=30), LLAMA_CKPT, LLAMA_FAILURES, np.random.default_rng(5))
    assert sweep.band[0] <= sweep.best.checkpoint_interval <= sweep.band[1]
    assert sweep.band[0] <= sweep.young <= sweep.band[1]
    assert sweep.band[0] <= sweep.daly <= sweep.band[1]
    # the band's ends are significantly worse than the best (or the grid's ends)
    for edge in sweep.band:
        index = sweep.intervals.index(edge)
        assert sweep.goodput_mean[index] < sweep.best.goodput_ci95[0] or index in (0, len(sweep.intervals) - 1)
    assert max(sweep.goodput_mean) == sweep.best.goodput_mean
    # the curve falls away from the optimum on both sides
    assert sweep.goodput_mean[0] < sweep.best.goodput_mean > sweep.goodput_mean[-1]


def test_young_and_daly_closed_forms() -> None:
    assert young_interval(2.0, 10000.0) == pytest.approx(200.0)
    # Daly (2006): sqrt(2dM)(1 + sqrt(d/2M)/3 + (d/2M)/9) - d; d = 50, M = 10000 -> d/2M = 1/400
    assert daly_interval(50.0, 10000.0) == pytest.approx(1000 * (1 + 1 / 60 + 1 / 3600) - 50)
    assert daly_interval(300.0, 100.0) == 100.0  # d >= 2M: checkpoint once per MTBF
    assert daly_interval(1e-3, 1e7) / young_interval(1e-3, 1e7) == pytest.approx(1.0, abs=1e-4)


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(LongRunError, match="checkpoint_interval"):
        simulate_long_run(_llama(interval=0.0), LLAMA_CKPT, LLAMA_FAILURES, np.random.default_rng(0))
    with pytest.raises(LongRunError, match="repetitions"):
        simulate_long_run(_llama(reps=1), LLAMA_CKPT, LLAMA_FAILURES, np.random.default_rng(0))
    assert checkpoint_cost(LLAMA_CKPT, state_bytes_per_device=LLAMA_STATE_PER_GPU, num_gpus=16384,
                           gpus_per_node=8).blocking_time == pytest.approx(405e9 * 14 / 2e12)


# --- the `clustersim goodput` command -------------------------------------------------------

LLAMA3_SCENARIO = """\
# Llama 3 405B pre-training layout (Llama 3 paper, Table 4): 16,384 H100, TP8 PP16 DP128, 2048 x 8192
name: llama3-405b-h100-16k
model: llama3-405b
training: {seq_len: 8192, global_batch_size: 2048, precision: bf16}
cluster: {preset: dgx-h100, num_gpus: 16384}
plan: {tp: 8, pp: 16, dp: 128, micro_batch: 1, schedule: interleaved, vpp: 2, sp: true, zero: 1,
       recompute: full}
seed: 0
"""


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.callback()(lambda: None)
    register(app)
    return app


def test_cli_llama3_gives_a_goodput_interval_plot_and_json(tmp_path) -> None:
    scenario = tmp_path / "llama3.yaml"
    scenario.write_text(LLAMA3_SCENARIO)
    out_json, out_png = tmp_path / "goodput.json", tmp_path / "goodput.png"
    result = CliRunner().invoke(_app(), ["goodput", str(scenario), "--days", "3", "--repetitions", "8",
                                         "--mtbf-hours", str(54 * 24 / 419), "--json", str(out_json),
                                         "--plot", str(out_png)])
    assert result.exit_code == 0, result.output
    assert "goodput mean" in result.output and "Young / Daly" in result.output
    doc = json.loads(out_json.read_text())
    low, high = doc["result"]["goodput_ci95"]
    assert 0 < low <= doc["result"]["goodput_mean"] <= high < 1
    # 405e9 params x (2/128 replicated bf16 weights + 12 bytes fp32 master+Adam, ZeRO-1 sharded)
    # per 16,384 GPUs: a little over 405e9 * 14 / 16384 because the first/last stages hold more
    assert doc["state_bytes_per_device"] == pytest.approx(405e9 * 14 / 16384, rel=0.15)
    band = doc["sweep"]["band_s"]
    assert band[0] <= doc["sweep"]["young_s"] <= band[1]
    assert out_png.read_bytes()[:4] == b"\x89PNG"


def test_cli_bad_interval_is_one_line_and_exit_2(tmp_path) -> None:
    scenario = tmp_path / "llama3.yaml"
    scenario.write_text(LLAMA3_SCENARIO)
    result = CliRunner().invoke(_app(), ["goodput", str(scenario), "--checkpoint-interval", "soon"])
    assert result.exit_code == 2
    assert "checkpoint-interval" in result.output and "Traceback" not in result.output
