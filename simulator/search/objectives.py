"""What a plan search minimises: the objectives, a priced plan's verdicts, $ per token, the Pareto front.

Owns the objectives (``OBJECTIVES``: step time, $ per token, peak memory, facility joules per
token), ``Ranked`` (one plan with the analytical tier's estimate, the engine's result and its
bound), the price of a token (``TokenPrice``, ``price_per_token``: rental or owner, as
``step.energy.money`` prices a step) and the Pareto front of the priced plans (time, memory,
energy). It prices no plan and orders none (``search.branch_bound``, ``search.search``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.search.estimate import Estimate
from clustersim.simulator.step import J_PER_KWH, Result, rental_price
from clustersim.topologies import Cluster
from clustersim.topologies.power import FacilitySpec
from clustersim.workloads import TrainingSpec

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
