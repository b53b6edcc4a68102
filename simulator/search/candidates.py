"""The search space of plans: every candidate (tp, pp, vpp, dp, cp, ep, ZeRO/FSDP, micro-batch,
recompute, schedule) one by one (``candidate_plans``) or as numpy columns (``candidate_columns``,
the same plans in the same order, no ``ParallelPlan`` built), and the valid ones (``valid_columns``
over ``plan.columns_valid``, ``plan_is_valid`` over ``check_plan``). The search (``search.search``)
prices them; this module only enumerates.
"""

from __future__ import annotations

import itertools
from typing import Iterator, TypedDict

from clustersim.simulator.plan import (
    FSDPS,
    RECOMPUTES,
    SCHEDULES,
    Fsdp,
    ParallelPlan,
    PlanColumns,
    Recompute,
    Schedule,
    check_plan,
    columns_valid,
    plan_columns,
)
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec, TrainingSpec


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers(limit: int) -> list[int]:
    return [2**i for i in range(0, 16) if 2**i <= limit]


def candidate_plans(model: ModelSpec, training: TrainingSpec, cluster: Cluster, max_micro_batch: int = 8) -> Iterator[ParallelPlan]:
    """Every plan of the search space, valid or not (the checks prune later)."""
    for tp, pp, cp, ep, dp, mb in _layouts(model, training, cluster, max_micro_batch):
        yield from _variants(model, tp, pp, cp, ep, dp, mb)


def _layouts(model: ModelSpec, training: TrainingSpec, cluster: Cluster,
             max_micro_batch: int) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(tp, pp, cp, ep, dp, micro-batch) of the search space in enumeration order; the plan variants
    (sp, vpp, recompute, ZeRO) of each come from ``_variants`` / ``_variant_codes``."""
    gpus = cluster.num_gpus
    tps = [t for t in _powers(min(cluster.nvlink_domain_size, 16)) if model.num_heads % t == 0 and gpus % t == 0]
    pps = [p for p in _divisors(gpus) if p <= model.num_layers and p <= 64]
    cps = [c for c in _powers(16) if training.seq_len % (2 * c) == 0 and training.seq_len // c >= 1024 or c == 1]
    eps = [e for e in _powers(model.num_experts or 1) if (model.num_experts or 1) % e == 0]
    for tp, pp, cp, ep in itertools.product(tps, pps, cps, eps):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        for mb in _powers(max_micro_batch):
            if training.global_batch_size % (dp * mb):
                continue
            yield tp, pp, cp, ep, dp, mb


def candidate_columns(model: ModelSpec, training: TrainingSpec, cluster: Cluster, max_micro_batch: int = 8) -> PlanColumns:
    """``candidate_plans`` as columns: the same plans in the same order, no ``ParallelPlan`` built."""
    rows: list[tuple[int, ...]] = []
    for tp, pp, cp, ep, dp, mb in _layouts(model, training, cluster, max_micro_batch):
        head = (tp, pp, dp, cp, ep)
        rows += [(*head, vpp, mb, tp > 1, s, r, z, f) for (s, vpp), r, (z, f) in _variant_codes(model, pp, tp)]
    return plan_columns(rows)


def _variant_codes(model: ModelSpec, pp: int, tp: int) -> Iterator[tuple[tuple[int, int], int, tuple[int, int]]]:
    """``_variants``' (schedule, vpp), recompute and (zero, fsdp) as codes, in its order."""
    schedules = [(SCHEDULES.index(s), v) for s, v in _schedules(model, pp)]
    shardings = [(0, 0), (1, 0)] + ([(0, FSDPS.index("full"))] if pp == 1 and tp <= 8 else [])
    return itertools.product(schedules, range(len(RECOMPUTES)), shardings)


def _schedules(model: ModelSpec, pp: int) -> list[tuple[Schedule, int]]:
    """The (schedule, vpp) pairs searched at ``pp`` stages."""
    schedules: list[tuple[Schedule, int]] = [("1f1b", 1)]
    if pp > 1:
        schedules.append(("zb-h1", 1))
        schedules += [("interleaved", v) for v in (2, 3, 4, 5) if model.num_layers % (pp * v) == 0]
        schedules += [("dualpipe", 1)] if pp % 2 == 0 else []
    return schedules


class _Sharding(TypedDict, total=False):
    """The sharding keywords of one ParallelPlan variant."""

    zero: int
    fsdp: Fsdp


def _variants(model: ModelSpec, tp: int, pp: int, cp: int, ep: int, dp: int, mb: int) -> Iterator[ParallelPlan]:
    schedules = _schedules(model, pp)
    shardings: list[_Sharding] = [{"zero": 0}, {"zero": 1}]
    if pp == 1 and tp <= 8:
        shardings.append({"fsdp": "full"})
    recomputes: tuple[Recompute, ...] = ("none", "selective", "full")
    for (schedule, vpp), rc, sh in itertools.product(schedules, recomputes, shardings):
        yield ParallelPlan(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, micro_batch=mb, sp=tp > 1,
                           schedule=schedule, vpp=vpp, recompute=rc, **sh)


def plan_is_valid(model: ModelSpec, training: TrainingSpec, cluster: Cluster, plan: ParallelPlan) -> bool:
    """True when ``plan`` passes every rule of ``check_plan``."""
    try:
        check_plan(model, training, cluster, plan)
    except ValueError:
        return False
    return True



def valid_columns(model: ModelSpec, training: TrainingSpec, cluster: Cluster) -> tuple[PlanColumns, int]:
    """The valid plans of the search space as columns (``candidate_columns`` where ``columns_valid``),
    in the grid's order, and how many candidates there were."""
    columns = candidate_columns(model, training, cluster)
    return columns.take(columns_valid(model, training, cluster, columns)), len(columns)
