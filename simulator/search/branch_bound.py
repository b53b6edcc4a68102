"""The branch and bound of a plan search: pricing plans best bound first until no bound can win.

Owns the order plans are priced in (``_bound_order``: by optimistic bound, then label), the
analytical tier's seeds (``_analytic_best``), the incumbent and what was priced (``_BranchAndBound``:
the memory check of phase 1 from the states alone, then the engine; serial, or on a pool of
processes with the serial stopping rule, so both give the same report), each objective's score of
a priced plan (``_score``) and the engine's verdict on one plan (``_engine``) and its worker
processes (``_engine_pool``). It enumerates and bounds nothing (``search.candidates``,
``search.grid``) and reports nothing (``search.search``).
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.plan import ParallelPlan, PlanColumns
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.search.estimate import Estimate, Estimator
from clustersim.simulator.search.objectives import Objective, Ranked, TokenPrice
from clustersim.simulator.step import energy_per_token, partition_memory, simulate_step as simulate
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec, TrainingSpec

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
