"""Bounded work: estimate what a command is about to do and refuse above a stated limit.

Owns the work limits (devices in one cluster graph, engine events of one step, Monte Carlo
draws of a long run) and the estimates they are compared with. Each limit is far above what a
normal run needs (a 16,384-GPU cluster, a few thousand micro-batches, a 30-day run x 100
repetitions) and well below what would take the machine for minutes or exhaust its memory. The
CLI's ``--force`` lifts them (the hard ranges of the scenario schema stay). It does not run
anything itself.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from clustersim.simulator.errors import ScenarioError

if TYPE_CHECKING:  # annotations only: `collective` reads GPU_LIMIT without loading the plan room (~0.1 s)
    from clustersim.simulator.plan import ParallelPlan
    from clustersim.workloads import ModelSpec, TrainingSpec

GPU_LIMIT = 32768
"""Devices above which building the cluster graph needs --force (16,384 GPUs build in ~4 s)."""
EVENT_LIMIT = 200_000
"""Engine events of one step above which simulate needs --force (measured: ~5,000 events/s with
flows on a loaded 2-core machine, so ~40 s; a 1,024-sequence Llama 3 70B step has ~4,100)."""
DRAW_LIMIT = 50_000_000
"""Failure events a long-run sweep may simulate (failures per run x runs x intervals) before
goodput needs --force; a 30-day run on 16,384 H100 at the Llama 3 rate, 100 runs x 18
intervals, is ~420,000."""


class WorkLimitError(ScenarioError):
    """The work a command would do exceeds a stated limit; --force runs it anyway."""

    stage = "limits"


def check_work(what: str, amount: float, limit: float, fix: str, force: bool) -> None:
    """Raise WorkLimitError when ``amount`` exceeds ``limit`` and ``force`` is not set."""
    if force or amount <= limit:
        return
    raise WorkLimitError(f"{what} = {amount:,.0f} exceeds the limit of {limit:,.0f}; {fix}, or pass --force")


def check_gpus(num_gpus: int, force: bool) -> None:
    """The cluster graph grows with the GPU count (nodes, links, paths)."""
    check_work("cluster.num_gpus", num_gpus, GPU_LIMIT, "simulate fewer GPUs", force)


def step_events(*, microbatches: int, stages: int, chunks: int, buckets: int, replicas: int) -> int:
    """Engine events of one step: a forward and a backward per micro-batch per model chunk per
    stage, plus one gradient-bucket reduction per bucket per stage, times the simulated replicas
    (1 in symmetric mode, dp in full mode)."""
    return (2 * microbatches * chunks + buckets) * stages * replicas


def check_step(*, microbatches: int, stages: int, chunks: int, buckets: int, replicas: int, force: bool) -> None:
    """Refuse a step whose event count exceeds EVENT_LIMIT."""
    events = step_events(microbatches=microbatches, stages=stages, chunks=chunks, buckets=buckets, replicas=replicas)
    check_work("engine events per step", events, EVENT_LIMIT,
               "use a smaller global_batch_size, a larger plan.micro_batch or plan.bucket_size, or mode symmetric", force)


def long_run_draws(*, days: float, system_mtbf_s: float, repetitions: int, intervals: int) -> float:
    """Expected failure events a checkpoint-interval sweep simulates: failures per run
    (days / MTBF) times runs (repetitions) times intervals tried."""
    if not system_mtbf_s > 0:
        return math.inf
    return days * 86400.0 / system_mtbf_s * repetitions * intervals


def check_long_run(*, days: float, system_mtbf_s: float, repetitions: int, intervals: int, force: bool) -> None:
    """Refuse a long-run sweep whose expected failure draws exceed DRAW_LIMIT."""
    draws = long_run_draws(days=days, system_mtbf_s=system_mtbf_s, repetitions=repetitions, intervals=intervals)
    check_work("expected failure events of the goodput sweep (--days / MTBF x --repetitions x intervals)", draws,
               DRAW_LIMIT, "use fewer --days or --repetitions, or a longer --mtbf-hours", force)


def check_scenario_step(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, mode: str, force: bool) -> None:
    """Estimate the engine events of one step of this plan and refuse above EVENT_LIMIT."""
    microbatches = max(1, training.global_batch_size // max(1, plan.dp * plan.micro_batch))
    grad_bytes = model.num_params() / max(1, plan.pp * plan.tp) * plan.grad_dtype_bytes
    buckets = math.ceil(grad_bytes / plan.bucket_size)
    check_step(microbatches=microbatches, stages=plan.pp, chunks=plan.vpp, buckets=buckets,
               replicas=plan.dp if mode == "full" else 1, force=force)
