"""Energy, GPU-hours, money and emissions of a training run of N useful tokens, with failures.

Owns the totals of a run (``run_energy`` -> ``RunEnergy``, each a mean with its 95% confidence
interval over the goodput model's failure histories: lost work, checkpoint stalls, restarts,
spares) and ``price_run`` (goodput at Young's interval, then the run). One step's energy and a
token's price are ``clustersim.simulator.step.energy``'s (search and sweep read them there). It
does not simulate a step (``step.simulate``) nor failures (``longrun.goodput``).

A run: per failure history, training time (useful + lost work) costs the step's power, a
checkpoint stall the waiting power, detection/restart/spare wait the idle power (GPUs at
``idle_w``, nodes and fabric on); spare nodes idle all the time. Per useful token = run energy /
tokens that survived; a run of N tokens = N x that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from clustersim.simulator.longrun.checkpoint import CheckpointSpec, checkpoint_cost
from clustersim.simulator.longrun.failures import FailureSpec, system_mtbf
from clustersim.simulator.longrun.goodput import (CAUSES, Z95, LongRunResult, LongRunSpec, simulate_long_run,
                                                  young_interval)
from clustersim.simulator.step import J_PER_KWH, Result, StepEnergy, money, step_energy
from clustersim.topologies import Cluster
from clustersim.topologies.power import FacilitySpec, PowerSpec, power_spec


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A mean over failure histories with its 95% confidence interval."""

    mean: float
    ci95: tuple[float, float]

    @classmethod
    def of(cls, values: np.ndarray) -> "Estimate":
        half = Z95 * values.std(ddof=1) / math.sqrt(values.size) if values.size > 1 else 0.0
        return cls(mean=float(values.mean()), ci95=(float(values.mean() - half), float(values.mean() + half)))

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "ci95": list(self.ci95)}


@dataclass(frozen=True, kw_only=True)
class RunEnergy:
    """A training run of ``tokens`` useful tokens with failures: totals and per useful token."""

    tokens: float
    energy_kwh: Estimate
    """Facility energy (PUE x (GPUs + nodes + fabric))."""
    gpu_energy_kwh: Estimate
    """Accelerator board energy alone (the quantity GPU-hours x TDP accounts estimate)."""
    gpu_hours: Estimate
    money: Estimate
    kg_co2: Estimate
    energy_kwh_per_million_tokens: Estimate

    def to_dict(self) -> dict[str, object]:
        return {"tokens": self.tokens, **{k: getattr(self, k).to_dict() for k in
                ("energy_kwh", "gpu_energy_kwh", "gpu_hours", "money", "kg_co2", "energy_kwh_per_million_tokens")}}


def _history_joules(step: StepEnergy, spec: LongRunSpec, useful: float, lost: Mapping[str, float],
                    spare_gpus: int, power: PowerSpec, limit: float | None) -> tuple[float, float]:
    """(facility joules, GPU board joules) of one history over the horizon."""
    training = useful + lost["lost_work"]
    stalled = lost["checkpoint"]
    idle = sum(lost[c] for c in CAUSES if c not in ("lost_work", "checkpoint"))
    steps = training / step.step_time
    gpu = (steps * step.gpu_j + step.num_gpus * (stalled * power.watts(power.levels["wait"], limit) + idle * power.idle_w)
           + spare_gpus * power.idle_w * spec.horizon)
    it = (steps * step.it_j + stalled * step.wait_cluster_w + idle * step.idle_cluster_w
          + spare_gpus * (power.idle_w + power.node_w_per_gpu) * spec.horizon)
    return step.pue * it, gpu


def run_energy(step: StepEnergy, spec: LongRunSpec, longrun: LongRunResult, tokens: float,
               facility: FacilitySpec, power: PowerSpec, spare_gpus: int = 0,
               cluster_price: float = 0.0, limit_w: float | None = None) -> RunEnergy:
    """Totals for ``tokens`` useful tokens, scaled from each simulated history's cost per useful token."""
    if not tokens > 0:
        raise ValueError(f"run tokens = {tokens} must be > 0")
    kwh, gpu_kwh, hours = [], [], []
    for rec in longrun.records:
        made = rec.useful_time / spec.step_time * spec.tokens_per_step
        if made <= 0:
            raise ValueError("a simulated history trained no useful token; lengthen --days or raise the MTBF")
        facility_j, gpu_j = _history_joules(step, spec, rec.useful_time, rec.lost_time, spare_gpus, power, limit_w)
        kwh.append(facility_j / J_PER_KWH * tokens / made)
        gpu_kwh.append(gpu_j / J_PER_KWH * tokens / made)
        hours.append((spec.num_gpus + spare_gpus) * spec.horizon / 3600.0 * tokens / made)
    e, h = np.array(kwh), np.array(hours)
    cash = np.array([money(a, b, facility, cluster_price) for a, b in zip(e, h)])
    return RunEnergy(tokens=tokens, energy_kwh=Estimate.of(e), gpu_energy_kwh=Estimate.of(np.array(gpu_kwh)),
                     gpu_hours=Estimate.of(h), money=Estimate.of(cash),
                     kg_co2=Estimate.of(e * facility.grid_kg_per_kwh),
                     energy_kwh_per_million_tokens=Estimate.of(e / tokens * 1e6))


def price_run(result: Result, cluster: Cluster, tokens: float, checkpoint: CheckpointSpec, failures: FailureSpec,
              rng: np.random.Generator, *, days: float = 30.0, repetitions: int = 20,
              facility: FacilitySpec | None = None, power: PowerSpec | None = None) -> tuple[LongRunResult, RunEnergy]:
    """Goodput of the job over ``days`` at Young's checkpoint interval, and a run of ``tokens`` useful tokens."""
    facility, power = facility or FacilitySpec(), power or power_spec(cluster.accelerator)
    cost = checkpoint_cost(checkpoint, state_bytes_per_device=result.checkpoint_bytes_per_device,
                           num_gpus=result.num_gpus, gpus_per_node=cluster.gpus_per_node)
    mtbf = system_mtbf(failures, result.num_gpus, cluster.gpus_per_node)
    interval = young_interval(cost.blocking_time, mtbf) if math.isfinite(mtbf) and cost.blocking_time > 0 else days * 86400.0
    spec = LongRunSpec(days=days, step_time=result.step_time, tokens_per_step=result.tokens_per_step,
                       num_gpus=result.num_gpus, gpus_per_node=cluster.gpus_per_node,
                       state_bytes_per_device=result.checkpoint_bytes_per_device,
                       checkpoint_interval=max(interval, result.step_time),
                       cost_per_gpu_hour=cluster.cost_per_gpu_hour, repetitions=repetitions)
    longrun = simulate_long_run(spec, checkpoint, failures, rng)
    run = run_energy(step_energy(result, cluster, power, facility), spec, longrun, tokens, facility, power,
                     spare_gpus=failures.spare_nodes * cluster.gpus_per_node, cluster_price=cluster.cost_per_gpu_hour,
                     limit_w=cluster.accelerator.power_limit_w)
    return longrun, run
