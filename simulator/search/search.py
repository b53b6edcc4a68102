"""Plan search: every valid plan for a model on N GPUs, priced by two tiers.

Owns the enumeration of candidate plans (tp, pp, vpp, dp, cp, ep, ZeRO/FSDP, micro-batch,
recompute, schedule), pruning by divisibility and by the analytical tier's memory, ranking by
the analytical tier (``clustersim.simulator.search.estimate``), and re-pricing the shortlist with the SimPy engine
(``simulate``), reporting how far the tiers disagree. It prints nothing (the CLI does).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Literal

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.calibration.profile import CalibrationProfile, default_profile
from clustersim.simulator.plan.checks import check_plan
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.search.estimate import Estimate, Estimator
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.result import Result
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec, TrainingSpec

Objective = Literal["time", "cost"]


@dataclass(frozen=True)
class Ranked:
    """One shortlisted plan with both tiers' verdicts."""

    plan: ParallelPlan
    estimate: Estimate
    result: Result | None
    """The engine's result (None when the engine rejected it, e.g. out of memory)."""
    error: str = ""

    @property
    def disagreement(self) -> float:
        """(analytic - engine) / engine step time."""
        if self.result is None:
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
    """Valid plans that fit in memory per the analytical tier."""
    analytic_seconds: float


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers(limit: int) -> list[int]:
    return [2**i for i in range(0, 16) if 2**i <= limit]


def candidate_plans(model: ModelSpec, training: TrainingSpec, cluster: Cluster, max_micro_batch: int = 8) -> Iterator[ParallelPlan]:
    """Every plan of the search space, valid or not (the checks prune later)."""
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
            yield from _variants(model, tp, pp, cp, ep, dp, mb)


def _variants(model: ModelSpec, tp: int, pp: int, cp: int, ep: int, dp: int, mb: int) -> Iterator[ParallelPlan]:
    base = dict(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, micro_batch=mb, sp=tp > 1)
    schedules: list[tuple[str, int]] = [("1f1b", 1)] if pp > 1 else [("1f1b", 1)]
    if pp > 1:
        schedules += [("zb-h1", 1)] + [("interleaved", v) for v in (2, 3, 4, 5) if model.num_layers % (pp * v) == 0]
        schedules += [("dualpipe", 1)] if pp % 2 == 0 else []
    shardings = [dict(zero=0), dict(zero=1)] + ([dict(fsdp="full")] if pp == 1 and tp <= 8 else [])
    for (schedule, vpp), rc, sh in itertools.product(schedules, ("none", "selective", "full"), shardings):
        yield ParallelPlan(**base, schedule=schedule, vpp=vpp, recompute=rc, **sh)  # type: ignore[arg-type]


def plan_is_valid(model: ModelSpec, training: TrainingSpec, cluster: Cluster, plan: ParallelPlan) -> bool:
    """True when ``plan`` passes every rule of ``check_plan``."""
    try:
        check_plan(model, training, cluster, plan)
    except ValueError:
        return False
    return True


def _score(objective: Objective, cluster: Cluster) -> Callable[[float], float]:
    if objective == "cost":
        return lambda step: step * cluster.num_gpus * cluster.cost_per_gpu_hour / 3600.0
    return lambda step: step


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
) -> SearchReport:
    """Rank every valid plan; the best ``shortlist`` (default 3 x top) are re-priced by the engine."""
    prof = profile or default_profile(cluster.accelerator.name)
    est = Estimator(model, training, cluster, prof)
    t0 = time.perf_counter()
    candidates = valid = 0
    fitting: list[Estimate] = []
    for plan in candidate_plans(model, training, cluster):
        candidates += 1
        if progress and candidates % 500 == 0:
            progress(candidates)
        if not plan_is_valid(model, training, cluster, plan):
            continue
        valid += 1
        e = _safe_estimate(est, plan)
        if e is not None and e.fits:
            fitting.append(e)
    seconds = time.perf_counter() - t0
    fitting.sort(key=lambda e: (e.step_time, e.plan.describe()))
    ranked = [_engine(model, training, cluster, prof, e) for e in fitting[: shortlist or 3 * top]]
    score = _score(objective, cluster)
    ranked.sort(key=lambda r: (r.result is None, score(r.result.step_time) if r.result else 0.0, r.plan.describe()))
    return SearchReport(ranked=tuple(ranked[:top]), candidates=candidates, valid=valid, fitting=len(fitting),
                        analytic_seconds=seconds)


def _safe_estimate(est: Estimator, plan: ParallelPlan) -> Estimate | None:
    try:
        return est.estimate(plan)
    except ValueError:
        return None  # e.g. a workload shape rule (MoE with tp needs sp) the plan check does not cover


def _engine(model: ModelSpec, training: TrainingSpec, cluster: Cluster, prof: CalibrationProfile, e: Estimate) -> Ranked:
    try:
        return Ranked(plan=e.plan, estimate=e, result=simulate(model, training, cluster, e.plan, profile=prof))
    except ClusterSimError as exc:
        return Ranked(plan=e.plan, estimate=e, result=None, error=str(exc))
