"""Benchmark: one simulated step against micro-batches per pipeline and against GPUs (wall, RSS).

Part 1, micro-batches: llama3-70b on 64 H100 (tp8 pp8 dp1, 1F1B, seq 2,048, micro-batch 1) with
8 .. 8,192 micro-batches (GBS = micro-batches). Issue 18 target: 8,192 micro-batches under 1 s
and 300 MB, wall time flat from 8 to 8,192 within 2x (the engine simulates a few periods of the
steady state and extrapolates the rest, ``clustersim.simulator.step.steady``).
Part 2, GPUs: llama3-405b, tp8 pp16, GBS 2,048 x 8,192, 1F1B, symmetric, 128 .. 16,384 H100.

Every point runs in a fresh process, ``--repeats`` times alternating between this tree and, with
``--old DIR``, an older checkout of the same layout with its own ``.venv``, under the same load
(printed before and after). Per point: median cluster build and simulate seconds, wall and CPU
(``time.process_time``: less sensitive to the machine's other processes), step time, MFU and the
largest peak RSS; with ``--old``, the new/old ratio of the simulate medians. Both trees use a
bytecode cache (``PYTHONPYCACHEPREFIX`` per tree).

    .venv/bin/python benchmarks/bench_engine.py [--old /tmp/base] [--repeats 3] [--old-max 8192]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import resource, sys, time
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model
model, gbs, seq, gpus, tp, pp, recompute = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
training = TrainingSpec(seq_len=seq, global_batch_size=gbs, precision="bf16")
plan = ParallelPlan(tp=tp, pp=pp, dp=gpus // (tp * pp), sp=True, zero=1, micro_batch=1, schedule="1f1b", recompute=recompute)
spec = get_model(model)
w0, c0 = time.perf_counter(), time.process_time()
cluster = get_cluster("dgx-h100", gpus)
w1, c1 = time.perf_counter(), time.process_time()
result = simulate(spec, training, cluster, plan)
w2, c2 = time.perf_counter(), time.process_time()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(w1 - w0, c1 - c0, w2 - w1, c2 - c1, result.step_time, result.mfu, rss)
"""


def _point(python: str, cwd: Path, cache: Path, *args: object) -> list[float] | str:
    """(build wall, build CPU, simulate wall, simulate CPU, step s, MFU, peak RSS MB) of one fresh process."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    out = subprocess.run([python, "-c", CHILD, *map(str, args)], env=env, cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        return f"error: {out.stderr.strip().splitlines()[-1]}"
    return [float(x) for x in out.stdout.split()]


def _rows(trees: dict[str, tuple[str, Path]], cache: Path, repeats: int, label: str,
          args: tuple[object, ...]) -> dict[str, list[float]]:
    """Prints the medians of each tree at one point and returns them (empty when a run failed)."""
    got: dict[str, list[list[float]]] = {t: [] for t in trees}
    for _ in range(repeats):
        for t, (python, cwd) in trees.items():
            r = _point(python, cwd, cache / t, *args)
            if isinstance(r, str):
                print(f"{label} {t}: {r}")
                return {}
            got[t].append(r)
    med = {t: [statistics.median(col) for col in zip(*rs)] for t, rs in got.items()}
    for t, v in med.items():
        print(f"{label} {t:4s} build {v[0]:6.3f} s ({v[1]:5.3f} cpu)  simulate {v[2]:6.3f} s ({v[3]:5.3f} cpu)  "
              f"step {v[4]:.9g} s  MFU {v[5]:.4f}  {max(r[6] for r in got[t]):4.0f} MB", flush=True)
    if len(med) == 2:
        print(f"{label} new/old simulate wall {med['new'][2] / med['old'][2]:.2f}, cpu {med['new'][3] / med['old'][3]:.2f}")
    return med


def _flatness(times: dict[int, tuple[float, float]]) -> None:
    """Issue 18's figure: the simulate wall (and CPU) time of the most micro-batches over the fewest's."""
    if len(times) >= 2:
        lo, hi = min(times), max(times)
        walls = [w for w, _ in times.values()]
        print(f"new simulate wall {hi:,} / {lo:,} micro-batches: {times[hi][0] / times[lo][0]:.2f}, CPU "
              f"{times[hi][1] / times[lo][1]:.2f} (wall largest / smallest over all points {max(walls) / min(walls):.2f}; "
              f"issue 18: within 2)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, default=None, help="older checkout with its own .venv, measured side by side")
    ap.add_argument("--old-max", type=int, default=8192, help="largest micro-batch count run on the old tree")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    new = {"new": (sys.executable, ROOT)}
    old = {"old": (str(args.old / ".venv/bin/python"), args.old)} if args.old else {}
    print(f"load average (1, 5, 15 min) before: {os.getloadavg()}, {os.cpu_count()} CPUs; {args.repeats} runs per point")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        for t, (python, cwd) in {**old, **new}.items():  # fill the bytecode caches
            _point(python, cwd, cache / t, "llama3-70b", 8, 2048, 64, 8, 8, "selective")
        print("llama3-70b, 64 H100, tp8 pp8 dp1, seq 2048: micro-batches per pipeline")
        times: dict[int, tuple[float, float]] = {}
        for m in (8, 64, 512, 2048, 8192):
            trees = {**(old if m <= args.old_max else {}), **new}
            med = _rows(trees, cache, args.repeats, f"{m:>6} mb", ("llama3-70b", m, 2048, 64, 8, 8, "selective"))
            if "new" in med:
                times[m] = (med["new"][2], med["new"][3])
        _flatness(times)
        print("llama3-405b, tp8 pp16, GBS 2048 x 8192: GPUs")
        for gpus in (128, 2048, 16384):
            _rows({**old, **new}, cache, args.repeats, f"{gpus:>6} GPUs", ("llama3-405b", 2048, 8192, gpus, 8, 16, "full"))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
