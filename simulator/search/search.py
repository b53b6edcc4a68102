"""Plan search: the engine's best plan for a model on N GPUs, proven by branch and bound.

Owns, over the valid plans of the search space (``search.candidates``: the enumeration and its
pruning by ``check_plan`` / ``plan.columns_valid``), the objectives (step time, $ per
token, peak memory, facility joules per token from ``step.energy``), the branch and bound over the optimistic bounds of ``search.bound`` (the
engine prices plans best bound first until no bound can beat the best engine score; memory is
the engine's own phase-1 check), the Pareto front of the priced plans (time, memory, energy), and how far the analytical
tier (``search.estimate``, which orders the first plans priced) is from the engine. It prints
nothing (the CLI does).
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Literal

import numpy as np

from clustersim.simulator.step import (
    J_PER_KWH,
    Result,
    energy_per_token,
    partition_memory,
    rental_price,
    simulate_step as simulate,
)
from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.simulator.plan import ParallelPlan, PlanColumns
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.search.candidates import valid_columns
from clustersim.simulator.search.energy_bound import EnergyBound
from clustersim.simulator.search.estimate import Estimate, Estimator
from clustersim.simulator.search.grid import column_bounds
from clustersim.topologies import Cluster
from clustersim.topologies.power import FacilitySpec
from clustersim.workloads import ModelSpec, TrainingSpec

Objective = Literal["time", "cost", "memory", "energy"]
OBJECTIVES: tuple[Objective, ...] = ("time", "cost", "memory", "energy")


@dataclass(frozen=True)
class Ranked:
    """One shortlisted plan with both tiers' verdicts."""

    plan: ParallelPlan
    estimate: Estimate | None
    """The analytical tier's estimate (None when it cannot price the plan)."""
    result: Result | None
    """The engine's result (None when the engine rejected it, e.g. out of memory)."""
    error: str = ""
    bound: float = 0.0
    """``StepBound``'s optimistic score of the plan (seconds, $/token or bytes by objective)."""
    memory: float | None = None
    """Peak bytes per device from phase 1 (None when it does not fit)."""
    energy: float | None = None
    """Facility joules per trained token of the engine's step (``step.energy``; PUE 1, the cluster's
    power preset); None without an engine result."""

    @property
    def disagreement(self) -> float:
        """(analytic - engine) / engine step time."""
        if self.result is None or self.estimate is None:
            return float("nan")
        return (self.estimate.step_time - self.result.step_time) / self.result.step_time


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


@dataclass(frozen=True)
class TokenPrice:
    """$ per trained token as a function of a plan's step time and energy: ``per_second`` x step time
    + ``per_joule`` x facility joules per token (PUE 1). Renting (a GPU-hour price) makes it a
    function of time alone; owning (electricity per kWh and capital amortised over a life) adds the
    energy term, so a slower plan that draws less power can cost less."""

    per_second: float
    """$ per token per second of step time: GPUs x $/GPU-hour / 3600 / tokens per step."""
    per_joule: float = 0.0
    """$ per joule (PUE 1): price per kWh x PUE / 3.6e6."""
    basis: str = "rental"
    """``rental`` ($/GPU-hour, energy included) or ``owner`` (kWh + amortised capital)."""

    def of(self, step_time: float, joules_per_token: float | None) -> float:
        """$ per token of a step of ``step_time`` seconds drawing ``joules_per_token``."""
        return step_time * self.per_second + (joules_per_token or 0.0) * self.per_joule


def price_per_token(cluster: Cluster, training: TrainingSpec, facility: FacilitySpec | None = None) -> TokenPrice:
    """The $/token price of a plan on ``cluster``: the facility's or cluster's GPU-hour price when one
    is set (rental), else the facility's electricity and amortised capital (owner), as
    ``step.energy.money`` prices a step."""
    facility = facility or FacilitySpec()
    gpu_s = cluster.num_gpus / 3600.0 / training.tokens_per_step  # GPU-hours per token per second of step
    rental = rental_price(facility, cluster.cost_per_gpu_hour)
    if rental > 0:
        return TokenPrice(per_second=gpu_s * rental)
    if facility.price_per_kwh > 0 or facility.capex_per_gpu > 0:
        return TokenPrice(per_second=gpu_s * facility.capex_per_gpu_hour,
                          per_joule=facility.price_per_kwh * facility.pue / J_PER_KWH, basis="owner")
    raise ValueError(f"--objective cost ranks by $/token and needs a price: cluster.cost_per_gpu_hour is "
                     f"{cluster.cost_per_gpu_hour} for {cluster.name}; set it, e.g. --set cluster.cost_per_gpu_hour=2.5, "
                     f"or price ownership with --price-per-kwh and --capex-per-gpu")


def _score(objective: Objective, r: Ranked, price: TokenPrice) -> tuple[float, float]:
    """What ``objective`` minimises, then the step time: (seconds | $ per token | bytes | J per token, seconds)."""
    assert r.result is not None
    match objective:
        case "cost":
            return price.of(r.result.step_time, r.energy), r.result.step_time
        case "memory":
            return r.result.peak_memory, r.result.step_time
        case "energy":
            assert r.energy is not None
            return r.energy, r.result.step_time
    return r.result.step_time, r.result.step_time


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


def _bound_order(columns: PlanColumns, score: np.ndarray, bounds: dict[ParallelPlan, float]) -> Iterator[ParallelPlan]:
    """The plans of ``columns`` by (score, ``describe()``), as ``sorted`` orders them, each built
    (and its score put in ``bounds``) only when the caller reaches it: a run of equal scores is
    built at once and ordered by its labels (stable, so equal labels keep the grid's order)."""
    order = np.argsort(score, kind="stable")
    ranked = score[order]
    starts = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]])).tolist() + [len(order)]
    for a, z in itertools.pairwise(starts):
        run = [columns.plan(i) for i in order[a:z].tolist()]
        value = float(ranked[a])
        for plan in sorted(run, key=ParallelPlan.describe):
            bounds.setdefault(plan, value)
            yield plan


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


def _analytic_best(est: Estimator, plans: list[ParallelPlan], n: int) -> list[ParallelPlan]:
    """The ``n`` plans the analytical tier ranks fastest among those it says fit."""
    fits = [(e.step_time, p.describe(), p) for p in plans if (e := _safe_estimate(est, p)) is not None and e.fits]
    return [p for _, _, p in sorted(fits, key=lambda t: t[:2])[:n]]


@dataclass
class _BranchAndBound:
    """The engine pricing of one search: the incumbent, what was priced, what it cost."""

    model: ModelSpec
    training: TrainingSpec
    cluster: Cluster
    profile: CalibrationProfile
    objective: Objective
    token_price: TokenPrice
    estimator: Estimator
    bounds: dict[ParallelPlan, float]
    step_bound: StepBound
    priced: dict[ParallelPlan, Ranked] = field(default_factory=dict)
    best: float = math.inf
    engine_calls: int = 0
    memory_rejected: int = 0
    fitting: int = 0
    seconds: float = 0.0
    speculative: int = 0

    def price(self, plan: ParallelPlan) -> None:
        """Memory check, then (for time and cost) the engine; updates the incumbent."""
        if plan in self.priced:
            return
        error = self._states_overflow(plan)
        if error:
            self._reject(plan, error)
            return
        t0 = time.perf_counter()
        r = _engine(self.model, self.training, self.cluster, self.profile, plan, _safe_estimate(self.estimator, plan),
                    self.bounds[plan], engine=self.objective != "memory")
        self.seconds += time.perf_counter() - t0
        self._record(r)

    def _states_overflow(self, plan: ParallelPlan) -> str:
        """Why phase 1 would reject ``plan`` from its states alone ("" when they fit)."""
        static = self.step_bound.static_memory(plan)
        if static <= self.cluster.accelerator.hbm_capacity:
            return ""
        return (f"weights, grads and optimizer state need {static / 2**30:.1f} GiB "
                f"> {self.cluster.accelerator.hbm_capacity / 2**30:.1f} GiB")

    def _reject(self, plan: ParallelPlan, error: str) -> None:
        self.priced[plan] = Ranked(plan=plan, estimate=None, result=None, bound=self.bounds[plan], error=error)
        self.memory_rejected += 1

    def _record(self, r: Ranked) -> None:
        """Adds a verdict of phase 1 (and the engine) and updates the incumbent."""
        self.priced[r.plan] = r
        if r.memory is None:
            self.memory_rejected += 1
            return
        self.fitting += 1
        if r.result is None and self.objective != "memory":
            return
        self.engine_calls += self.objective != "memory"
        score = r.memory if self.objective == "memory" else _score(self.objective, r, self.token_price)[0]
        self.best = min(self.best, score)

    def run_parallel(self, ordered: Iterable[ParallelPlan], pool: ProcessPoolExecutor, workers: int) -> None:
        """``run`` with the engine on ``pool``: the engine runs of the next ``workers`` plans the
        serial loop could reach run at once; the verdicts are then taken in bound order under the
        serial stopping rule, so what is priced and recorded is what ``run`` prices and records."""
        queue = iter(ordered)
        while True:
            batch: list[tuple[ParallelPlan, str]] = []  # (plan, why its states overflow or "")
            for plan in queue:
                if self.bounds[plan] >= self.best:
                    break
                if plan in self.priced:
                    continue
                batch.append((plan, self._states_overflow(plan)))
                if sum(not e for _, e in batch) == workers:
                    break
            if not batch:
                return
            t0 = time.perf_counter()
            futures = {p: pool.submit(_engine_task, p, _safe_estimate(self.estimator, p), self.bounds[p])
                       for p, e in batch if not e}
            verdicts = {p: f.result() for p, f in futures.items()}
            self.seconds += time.perf_counter() - t0
            for i, (plan, error) in enumerate(batch):
                if self.bounds[plan] >= self.best:  # the serial loop stops here: drop the rest
                    self.speculative += sum(1 for p, e in batch[i:] if not e)
                    return
                if error:
                    self._reject(plan, error)
                else:
                    self._record(verdicts[plan])

    def run(self, ordered: Iterable[ParallelPlan]) -> None:
        """Price best bound first until no bound can beat the incumbent."""
        for plan in ordered:
            if self.bounds[plan] >= self.best:
                break
            self.price(plan)
        if self.objective == "memory":  # ties at the least memory: the engine decides by time
            for plan, r in self.priced.items():
                if r.memory is not None and r.memory <= self.best * (1 + 1e-12):
                    self.priced[plan] = _engine(self.model, self.training, self.cluster, self.profile, plan,
                                                _safe_estimate(self.estimator, plan), self.bounds[plan], engine=True)
                    self.engine_calls += 1

    def ranked(self) -> list[Ranked]:
        done = [r for r in self.priced.values() if r.result is not None]
        done.sort(key=lambda r: (*_score(self.objective, r, self.token_price), r.plan.describe()))
        return done


def pareto_front(ranked: list[Ranked]) -> tuple[Ranked, ...]:
    """The engine-priced plans no other priced plan beats on step time, peak memory and energy
    per token at once, fastest first. It is also the front with $/token as a fourth axis: every
    price (``TokenPrice``) is a non-negative sum of time and energy, so a plan beaten on both is
    beaten on cost too."""
    done = sorted(((r, _objectives(r)) for r in ranked if r.result is not None), key=lambda pair: pair[1])
    front: list[tuple[Ranked, tuple[float, float, float]]] = []
    for r, v in done:  # ties (plans alike on all three) keep the first in rank order
        if not any(_dominates(o, v) for _, o in done) and all(v != f for _, f in front):
            front.append((r, v))
    return tuple(r for r, _ in front)


def _objectives(r: Ranked) -> tuple[float, float, float]:
    """(step time, peak memory, energy per token) of an engine-priced plan."""
    assert r.result is not None
    return r.result.step_time, r.result.peak_memory, r.energy if r.energy is not None else math.inf


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """``a`` is no worse than ``b`` everywhere and better somewhere."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def _safe_estimate(est: Estimator, plan: ParallelPlan) -> Estimate | None:
    try:
        return est.estimate(plan)
    except ValueError:
        return None  # e.g. a workload shape rule (MoE with tp needs sp) the plan check does not cover


def _engine(model: ModelSpec, training: TrainingSpec, cluster: Cluster, prof: CalibrationProfile, plan: ParallelPlan,
            e: Estimate | None, bound: float, *, engine: bool) -> Ranked:
    """The plan's memory (phase 1) and, when ``engine``, its engine result; errors as text."""
    try:
        memory = max(m.total for m in partition_memory(model, training, plan, cluster))
    except ClusterSimError as exc:
        return Ranked(plan=plan, estimate=e, result=None, error=str(exc), bound=bound)
    if not engine:
        return Ranked(plan=plan, estimate=e, result=None, bound=bound, memory=memory)
    try:
        result = simulate(model, training, cluster, plan, profile=prof)
        return Ranked(plan=plan, estimate=e, result=result, bound=bound, memory=memory,
                      energy=energy_per_token(result, cluster))
    except ClusterSimError as exc:
        return Ranked(plan=plan, estimate=e, result=None, error=str(exc), bound=bound, memory=memory)


_Scenario = tuple[ModelSpec, TrainingSpec, Cluster, CalibrationProfile]
_WORKER: dict[str, _Scenario] = {}
"""An engine worker process's scenario, set once by ``_worker_init`` (empty in the driver)."""


def _worker_init(model: ModelSpec, training: TrainingSpec, cluster: Cluster, prof: CalibrationProfile) -> None:
    _WORKER["scenario"] = (model, training, cluster, prof)


def _engine_task(plan: ParallelPlan, e: Estimate | None, bound: float) -> Ranked:
    """One engine verdict on a worker (``_engine`` on the worker's scenario)."""
    return _engine(*_WORKER["scenario"], plan, e, bound, engine=True)


def _engine_pool(workers: int, model: ModelSpec, training: TrainingSpec, cluster: Cluster,
                 prof: CalibrationProfile) -> ProcessPoolExecutor:
    """``workers`` local processes holding the scenario. Forked where the platform can (nothing
    to import again, no scenario to send); the caller must not hold other threads' locks (the
    CLI's progress bar refreshes without a thread)."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=min(workers, os.cpu_count() or 1) if method == "spawn" else workers,
                               mp_context=multiprocessing.get_context(method), initializer=_worker_init,
                               initargs=(model, training, cluster, prof))
