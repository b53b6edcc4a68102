"""Benchmark: one step of llama3-405b on 64 .. 16,384 H100 in symmetric mode (wall time, RSS).

Issue target: 16,384 GPUs (tp 8, pp 16, dp 128, 1F1B, global batch 2,048 x 8,192) in < 1 s and
< 1 GB RSS. Run: python benchmarks/bench_engine.py
"""

from __future__ import annotations

import resource
import time

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


def main() -> None:
    model = get_model("llama3-405b")
    training = TrainingSpec(seq_len=8192, global_batch_size=2048, precision="bf16")
    print(f"{'gpus':>6} {'build_s':>8} {'simulate_s':>10} {'step_s':>8} {'mfu':>6} {'rss_mb':>7}")
    for gpus in (128, 512, 2048, 8192, 16384):
        dp = gpus // (8 * 16)
        plan = ParallelPlan(tp=8, pp=16, dp=dp, sp=True, zero=1, micro_batch=1, schedule="1f1b", recompute="full")
        t0 = time.perf_counter()
        cluster = get_cluster("dgx-h100", gpus)
        t1 = time.perf_counter()
        result = simulate(model, training, cluster, plan)
        t2 = time.perf_counter()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{gpus:>6} {t1 - t0:>8.3f} {t2 - t1:>10.3f} {result.step_time:>8.2f} {result.mfu:>6.3f} {rss:>7.0f}")


if __name__ == "__main__":
    main()
