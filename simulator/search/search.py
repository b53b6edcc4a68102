"""Plan search: the engine's best plan for a model on N GPUs, proven by branch and bound.

Owns, over the valid plans of the search space (``search.candidates``: the enumeration and its
pruning by ``check_plan`` / ``plan.columns_valid``), the objectives (step time, $ per
token, peak memory, facility joules per token from ``step.energy``), the branch and bound over the optimistic bounds of ``search.bound`` (the
engine prices plans best bound first until no bound can beat the best engine score; memory is
the engine's own phase-1 check), the Pareto front of the priced plans (time, memory, energy), and how far the analytical
tier (``search.estimate``, which orders the first plans priced) is from the engine. This module
is the search's entry point and report (``search``, ``SearchReport``); the objectives, the
priced plans' verdicts, the $/token price and the Pareto front are ``search.objectives``, the
pricing loop best bound first and its engine workers are ``search.branch_bound``. It prints
nothing (the CLI does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.search.branch_bound import _analytic_best, _bound_order, _BranchAndBound, _engine_pool
from clustersim.simulator.search.candidates import valid_columns
from clustersim.simulator.search.energy_bound import EnergyBound
from clustersim.simulator.search.estimate import Estimator
from clustersim.simulator.search.grid import column_bounds
from clustersim.simulator.search.objectives import Objective, Ranked, TokenPrice, pareto_front, price_per_token
from clustersim.topologies import Cluster
from clustersim.topologies.power import FacilitySpec
from clustersim.workloads import ModelSpec, TrainingSpec

@dataclass(frozen=True)
class SearchReport:
    """The outcome of a search."""

    ranked: tuple[Ranked, ...]
    candidates: int
    """Plans enumerated (before the memory and validity pruning)."""
    valid: int
    """Plans that divide the model and the cluster."""
    fitting: int
    """Plans whose memory was checked (phase 1) and fit."""
    analytic_seconds: float
    """Seconds to enumerate, check and estimate every plan."""
    objective: str = "time"
    bound_seconds: float = 0.0
    """Seconds to bound every valid plan."""
    engine_calls: int = 0
    """Engine simulations run (plans that fit, priced before the bound stopped the search)."""
    memory_rejected: int = 0
    """Plans priced whose memory (phase 1) did not fit."""
    engine_seconds: float = 0.0
    pruned: int = 0
    """Valid plans never priced: their bound could not beat the best engine score."""
    pareto: tuple[Ranked, ...] = ()
    """Engine-priced plans not beaten on step time, memory and energy per token at once."""
    workers: int = 1
    """Processes that ran the engine (1: this one)."""
    speculative: int = 0
    """Engine runs of a parallel search whose plan the serial order would not have priced (their
    results are dropped, so the report is the serial one)."""

    tier_cpu_seconds: float = 0.0
    """CPU seconds of this process in enumeration, checks and bounds (less sensitive to other load than wall)."""

    @property
    def plans_per_second(self) -> float:
        """Valid plans through the analytical tier (enumeration, checks and bounds) per wall second."""
        return self.valid / max(self.analytic_seconds + self.bound_seconds, 1e-9)

    @property
    def plans_per_cpu_second(self) -> float:
        """Valid plans through the analytical tier per CPU second."""
        return self.valid / max(self.tier_cpu_seconds, 1e-9)

    @property
    def best(self) -> Ranked | None:
        """The engine's best plan under the objective over the whole space (None: none fits)."""
        return self.ranked[0] if self.ranked else None


def search(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: Cluster,
    *,
    top: int = 5,
    objective: Objective = "time",
    profile: CalibrationProfile | None = None,
    shortlist: int | None = None,
    progress: Callable[[int], None] | None = None,
    facility: FacilitySpec | None = None,
    workers: int = 1,
) -> SearchReport:
    """The engine's best plan under ``objective``, proven by branch and bound.

    Every valid plan gets ``StepBound``'s optimistic bound (step time; static memory for
    ``objective="memory"``); the plans are priced best bound first (the memory check of phase 1,
    then the engine) until no unpriced plan's bound can beat the best engine score. With
    ``shortlist``, the analytical tier's ``shortlist`` fastest plans are priced first. The first
    ranked plan is the engine's best over the whole space; the rest are the best of those the
    engine priced, each with the analytical tier's estimate beside it. ``cost`` ranks by $/token
    (``price_per_token``: a GPU-hour price, or ``facility``'s kWh price and capital; its bound is
    the step-time bound's GPU-seconds plus ``EnergyBound``'s joules at those prices); ``energy`` by
    facility joules per token (PUE 1), bounded by ``search.energy_bound.EnergyBound``.

    The plan space is enumerated, checked and bounded as numpy columns (``valid_columns``,
    ``search.grid.column_bounds``: ``StepBound`` in array form); a ``ParallelPlan`` is built only
    for the plans the branch and bound reaches, in bound order (for every plan with ``shortlist``
    and for the energy and cost bounds, which price plan by plan). With ``workers > 1`` the engine
    runs on that many local processes, ``workers`` plans at a time in bound order; results are taken in that order and the serial stopping rule applied
    to them, so the report is the one ``workers=1`` gives (runs past the stop are dropped and
    counted in ``speculative``).
    """
    if workers < 1:
        raise ValueError(f"workers = {workers}: use 1 (this process) or more")
    price = price_per_token(cluster, training, facility) if objective == "cost" else TokenPrice(per_second=1.0)
    prof = profile or default_profile(cluster.accelerator.name)
    t0, cpu0 = time.perf_counter(), time.process_time()
    columns, candidates = valid_columns(model, training, cluster)
    if progress:
        progress(candidates)
    est = Estimator(model, training, cluster, prof)
    every = columns.plans() if shortlist or objective in ("energy", "cost") else None  # bounds that need each plan
    seeds = _analytic_best(est, every, shortlist) if shortlist and every else []
    t1 = time.perf_counter()
    sb = StepBound(model, training, cluster, prof)
    grid = column_bounds(sb, columns)
    if every is None:
        score = grid.static_memory if objective == "memory" else grid.step_time
    else:
        eb = EnergyBound(model, training, cluster, prof)
        score = np.array([_bound(objective, p, t, m, eb, price)
                          for p, t, m in zip(every, grid.step_time.tolist(), grid.static_memory.tolist())], dtype=float)
    t2, cpu2 = time.perf_counter(), time.process_time()
    bounds: dict[ParallelPlan, float] = {}
    if every is not None:
        bounds.update(zip(every, score.tolist()))
    bb = _BranchAndBound(model, training, cluster, prof, objective, price, est, bounds, sb)
    for plan in seeds:
        bb.price(plan)
    ordered = _bound_order(columns, score, bounds)
    if workers > 1 and objective != "memory":
        with _engine_pool(workers, model, training, cluster, prof) as pool:
            bb.run_parallel(ordered, pool, workers)
    else:
        bb.run(ordered)
    ranked = bb.ranked()
    return SearchReport(
        ranked=tuple(ranked[:top]), candidates=candidates, valid=len(columns), fitting=bb.fitting,
        analytic_seconds=t1 - t0, objective=objective, bound_seconds=t2 - t1,
        engine_calls=bb.engine_calls, memory_rejected=bb.memory_rejected, engine_seconds=bb.seconds,
        pruned=len(columns) - len(bb.priced), pareto=pareto_front(ranked),
        workers=workers if objective != "memory" else 1, speculative=bb.speculative, tier_cpu_seconds=cpu2 - cpu0,
    )


def _bound(objective: Objective, plan: ParallelPlan, step: float, static: float, eb: EnergyBound, price: TokenPrice) -> float:
    """The plan's optimistic score from its step-time and static-memory bounds (``StepBound``):
    static bytes (memory), J/token (energy), $/token (cost: both terms of the price at their
    bounds, each a lower bound), else seconds."""
    match objective:
        case "memory":
            return static
        case "energy":
            return eb.per_token(plan, step)
        case "cost":
            return price.of(step, eb.per_token(plan, step) if price.per_joule > 0 else None)
    return step
