"""Benchmark: 100 Monte Carlo long runs of 30 days (target: under 10 s), plus the interval sweep.

Scenario: Llama 3 405B on 16,384 H100 with the Llama 3 paper's interruption rate (419 unexpected
interruptions in 54 days, "The Llama 3 Herd of Models", sec. 3.3.4) and Tectonic's 2 TB/s
sustained write bandwidth (sec. 3.3.1). Run: ``python benchmarks/bench_goodput.py``.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from clustersim.simulator.longrun.checkpoint import CheckpointSpec
from clustersim.simulator.longrun.failures import FailureSpec
from clustersim.simulator.longrun.goodput import LongRunSpec, simulate_long_run, sweep_intervals
from clustersim.simulator.longrun.stragglers import StragglerSpec, SymmetricStep, step_time_distribution

DAY = 86400.0
TARGET_S = 10.0


def _spec() -> LongRunSpec:
    # 6.74 s per step: 16M tokens at 400 TFLOP/s per GPU (Llama 3 paper, Table 4)
    return LongRunSpec(days=30, step_time=6.74, tokens_per_step=2048 * 8192, num_gpus=16384,
                       gpus_per_node=8, state_bytes_per_device=405e9 * 14 / 16384,
                       checkpoint_interval=250.0, cost_per_gpu_hour=2.0, repetitions=100)


def _time(label: str, fn) -> float:
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    result = getattr(out, "best", out)
    print(f"{label:<48s} {elapsed:6.2f} s  goodput {result.goodput_mean:.4f}  "
          f"failures {result.failures_mean:6.1f}  interval {result.checkpoint_interval:6.0f} s")
    return elapsed


def main() -> int:
    ckpt = CheckpointSpec(write_bandwidth_per_node=25e9, storage_bandwidth=2e12)
    exp = FailureSpec(system_mtbf=54 * DAY / 419, detection_time=120.0, restart_time=600.0)
    # per-GPU Weibull (shape 0.8: infant mortality, every part new at t = 0, so the first 30
    # days see more failures than the long-run rate) with the same long-run system rate
    weib = replace(exp, system_mtbf=float("inf"), mtbf_gpu=16384 * 54 * DAY / 419,
                   distribution="weibull", weibull_shape=0.8, spare_nodes=16, repair_time=DAY / 4,
                   reschedule_time=300.0)
    spec = _spec()
    main_s = _time("100 x 30 days, exponential (system rate)", lambda: simulate_long_run(
        spec, ckpt, exp, np.random.default_rng(0)))
    _time("100 x 30 days, Weibull per GPU + spares", lambda: simulate_long_run(
        spec, ckpt, weib, np.random.default_rng(0)))
    _time("interval sweep: 17 intervals x 100 x 30 days", lambda: sweep_intervals(
        spec, ckpt, exp, np.random.default_rng(0)))
    start = time.perf_counter()
    dist = step_time_distribution(SymmetricStep(compute_time=6.0, comm_time=0.7, num_ranks=16384),
                                  StragglerSpec(jitter_cv=0.03, slow_device_fraction=1e-4, slow_device_factor=1.2),
                                  1000, np.random.default_rng(0))
    print(f"{'stragglers: 16,384 ranks x 1,000 steps':<48s} {time.perf_counter() - start:6.2f} s  "
          f"p50 {dist.p50:.3f} s  p99 {dist.p99:.3f} s  max {dist.max:.3f} s")
    print(f"target: 100 x 30 days < {TARGET_S} s -> {'PASS' if main_s < TARGET_S else 'FAIL'}")
    return 0 if main_s < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
