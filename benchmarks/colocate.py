"""Two jobs on one cluster (``clustersim colocate``): slowdown by placement and fabric, and its cost.

    .venv/bin/python benchmarks/colocate.py [--gpus 256] [--model llama3-8b] [--seqs-per-gpu 1]
    .venv/bin/python benchmarks/colocate.py --large

``--large``: two llama3-405b jobs of 8,192 H100 (tp8 pp16 dp64, GBS 1,024 x 8,192, full recompute)
interleaved on the rail-optimised 16,384-GPU cluster: the call's wall time and peak memory.

Two copies of one data-parallel job (ZeRO-1, full recompute, ``--seqs-per-gpu`` sequences of 2,048
tokens per GPU per step: gradient traffic is a large part of the step) side by side on DGX H100 servers: packed (each job's servers together) and interleaved (one server of
each in turn), on the rail-optimised non-blocking fabric and on a top-of-rack fat tree with 4:1
oversubscribed leaf uplinks (four servers per leaf). Prints each case's step alone and shared, the
slowdown (and its upper end, the others' bursts aligned with the job's own), the fixed point's iterations and the wall time of the whole ``colocate`` call (two
flows runs alone plus two per iteration). Not part of the test run.
"""

from __future__ import annotations

import argparse
import resource
import time

from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.step import Job, colocate_jobs
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

FABRICS = {
    "rail-optimised, non-blocking": {},
    "top-of-rack, 4:1 uplinks": {"rail_optimized": False, "hosts_per_leaf": 32, "oversubscription": 4.0},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=256, help="GPUs per job")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--seqs-per-gpu", type=int, default=1)
    ap.add_argument("--large", action="store_true", help="two 405b jobs of 8,192 H100 instead")
    args = ap.parse_args()
    if args.large:
        large()
        return
    model = get_model(args.model)
    plan = ParallelPlan(tp=1, pp=1, dp=args.gpus, zero=1, recompute="full")
    training = TrainingSpec(seq_len=2048, global_batch_size=args.seqs_per_gpu * args.gpus, precision="bf16")
    jobs = [Job(name=n, model=model, training=training, plan=plan) for n in ("a", "b")]
    print(f"two jobs of {args.gpus} GPUs each: {model.name}, {plan.describe()}, GBS {training.global_batch_size}")
    print(f"{'fabric':32} {'placement':12} {'alone s':>9} {'shared s':>9} {'slowdown':>9} {'aligned':>9} {'iters':>5} {'wall s':>7}")
    for label, fabric in FABRICS.items():
        cluster = get_cluster("dgx-h100", 2 * args.gpus, **fabric)  # type: ignore[arg-type]
        for placement in ("packed", "interleaved"):
            t0 = time.perf_counter()
            out = colocate_jobs(jobs, cluster, placement)  # type: ignore[arg-type]
            wall = time.perf_counter() - t0
            a = out.jobs[0]
            print(f"{label:32} {placement:12} {a.alone.step_time:9.4f} {a.shared.step_time:9.4f} "
                  f"{a.slowdown * 100:+8.2f}% {a.slowdown_aligned * 100:+8.2f}% {out.iterations:5d} {wall:7.2f}")


def large() -> None:
    plan = ParallelPlan(tp=8, pp=16, dp=64, sp=True, zero=1, recompute="full", micro_batch=1)
    job = Job(name="405b", model=get_model("llama3-405b"), plan=plan,
              training=TrainingSpec(seq_len=8192, global_batch_size=1024, precision="bf16"))
    cluster = get_cluster("dgx-h100", 16384)
    t0 = time.perf_counter()
    out = colocate_jobs([job, job], cluster, "interleaved")
    wall = time.perf_counter() - t0
    a = out.jobs[0]
    print(f"two llama3-405b jobs of 8,192 H100 interleaved: alone {a.alone.step_time:.4f} s, shared "
          f"{a.slowdown * 100:+.2f}%, aligned {a.slowdown_aligned * 100:+.2f}%, {out.iterations} iterations; "
          f"{wall:.2f} s, peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
