"""Benchmark: the flows over time (``fabric_sharing="flows"``) against the static pricing (wall, RSS).

llama3-405b, tp8 pp16, GBS 2,048 x 8,192, 1F1B, ZeRO-1, full recompute, symmetric, on 128 .. 16,384
H100 (the issue 14 target: 16,384 GPUs with flows under 1.5 s and 1 GB); and llama3-70b on 64 H100
(tp8 pp8, 2,048 micro-batches: the engine's steady-state extrapolation with flows). Every point
runs in a fresh process (simulate seconds, step time, seconds lost to sharing, peak RSS of the
child), static and flows side by side under the same load (printed first).

    .venv/bin/python benchmarks/bench_sharing.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import resource, sys, time
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model
model, gbs, seq, gpus, tp, pp, recompute, sharing = sys.argv[1:9]
gbs, seq, gpus, tp, pp = int(gbs), int(seq), int(gpus), int(tp), int(pp)
training = TrainingSpec(seq_len=seq, global_batch_size=gbs, precision="bf16")
plan = ParallelPlan(tp=tp, pp=pp, dp=gpus // (tp * pp), sp=True, zero=1, micro_batch=1, schedule="1f1b", recompute=recompute)
cluster = get_cluster("dgx-h100", gpus)
t0 = time.perf_counter()
result = simulate(get_model(model), training, cluster, plan, fabric_sharing=sharing)
t1 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
lost = sum(result.fabric.get("lost_to_sharing_s", {}).values()) * 1e3
print(f"{t1 - t0:10.3f} {result.step_time:12.6f} {lost:10.3f} {rss:7.0f}")
"""


def _point(*args: object) -> str:
    out = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else f"error: {out.stderr.strip().splitlines()[-1]}"


def main() -> None:
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    header = f"{'gpus':>6} {'sharing':7s} {'simulate_s':>10} {'step_s':>12} {'lost_ms':>10} {'rss_mb':>7}"
    print("llama3-405b, tp8 pp16, GBS 2048 x 8192, full recompute")
    print(header)
    for gpus in (128, 2048, 16384):
        for sharing in ("static", "flows"):
            print(f"{gpus:>6} {sharing:7s} {_point('llama3-405b', 2048, 8192, gpus, 8, 16, 'full', sharing)}", flush=True)
    print("llama3-70b, 64 H100, tp8 pp8 dp1, seq 2048, 2048 micro-batches, selective recompute")
    print(header)
    for sharing in ("static", "flows"):
        print(f"{64:>6} {sharing:7s} {_point('llama3-70b', 2048, 2048, 64, 8, 8, 'selective', sharing)}", flush=True)


if __name__ == "__main__":
    main()
