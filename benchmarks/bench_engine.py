"""Benchmark: one simulated step against micro-batches per pipeline and against GPUs (wall, RSS).

Part 1, micro-batches: llama3-70b on 64 H100 (tp8 pp8 dp1, 1F1B, seq 2,048, micro-batch 1) with
8 .. 8,192 micro-batches (GBS = micro-batches). Issue 18 target: 8,192 micro-batches under 1 s
and 300 MB, wall time flat from 8 to 8,192 within 2x (the engine simulates a few periods of the
steady state and extrapolates the rest, ``clustersim.simulator.step.steady``).
Part 2, GPUs: llama3-405b, tp8 pp16, GBS 2,048 x 8,192, 1F1B, symmetric, 128 .. 16,384 H100.

Every point runs in a fresh process (simulate seconds, cluster build seconds, peak RSS of the
child), for this tree and, with ``--old DIR``, for an older checkout (flat ``simulator/`` layout),
side by side under the same load (printed first).

    .venv/bin/python benchmarks/bench_engine.py [--old /tmp/old] [--old-max 8192]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import resource, sys, time
{imports}
model, gbs, seq, gpus, tp, pp, recompute = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
training = TrainingSpec(seq_len=seq, global_batch_size=gbs, precision="bf16")
plan = ParallelPlan(tp=tp, pp=pp, dp=gpus // (tp * pp), sp=True, zero=1, micro_batch=1, schedule="1f1b", recompute=recompute)
t0 = time.perf_counter()
cluster = get_cluster("dgx-h100", gpus)
t1 = time.perf_counter()
result = simulate(get_model(model), training, cluster, plan)
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{{t1 - t0:.3f}} {{t2 - t1:.3f}} {{result.step_time:.9g}} {{result.mfu:.4f}} {{rss:.0f}}")
"""
IMPORTS = {
    "new": ("from clustersim.simulator.step.simulate import simulate\nfrom clustersim.simulator.plan.plan import ParallelPlan\n"
            "from clustersim.topologies import get_cluster\nfrom clustersim.workloads import TrainingSpec, get_model"),
    "old": ("from simulator.api import simulate\nfrom simulator.plan import ParallelPlan\n"
            "from topologies import get_cluster\nfrom workloads import TrainingSpec, get_model"),
}


def _point(tree: str, old: Path | None, *args: object) -> str:
    env = dict(os.environ)
    if tree == "old":
        env["PYTHONPATH"] = str(old)
    code = CHILD.format(imports=IMPORTS[tree])
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, cwd=old if tree == "old" else ROOT,
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else f"error: {out.stderr.strip().splitlines()[-1]}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, default=None, help="older checkout to measure side by side")
    ap.add_argument("--old-max", type=int, default=8192, help="largest micro-batch count run on the old tree")
    args = ap.parse_args()
    trees = ["old", "new"] if args.old else ["new"]
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    print("llama3-70b, 64 H100, tp8 pp8 dp1, seq 2048: micro-batches per pipeline")
    print(f"{'mbs':>6} {'tree':4s} {'build_s':>8} {'simulate_s':>10} {'step_s':>12} {'mfu':>6} {'rss_mb':>7}")
    for m in (8, 64, 512, 2048, 8192):
        for tree in trees:
            if tree == "old" and m > args.old_max:
                continue
            print(f"{m:>6} {tree:4s} {_point(tree, args.old, 'llama3-70b', m, 2048, 64, 8, 8, 'selective')}", flush=True)
    print("llama3-405b, tp8 pp16, GBS 2048 x 8192: GPUs")
    print(f"{'gpus':>6} {'tree':4s} {'build_s':>8} {'simulate_s':>10} {'step_s':>12} {'mfu':>6} {'rss_mb':>7}")
    for gpus in (128, 2048, 16384):
        for tree in trees:
            print(f"{gpus:>6} {tree:4s} {_point(tree, args.old, 'llama3-405b', 2048, 8192, gpus, 8, 16, 'full')}", flush=True)


if __name__ == "__main__":
    main()
