"""Energy, GPU-hours, money and emissions of a step, a trained token and a run with failures.

Owns the power timeline of a simulated step (``unit_power``: piecewise-constant watts per engine
unit from the engine's intervals and ``topologies.power``), its integral (``step_energy`` ->
``StepEnergy``), the price of a step and a token (``token_costs`` -> ``TokenCosts``) and the totals
of a training run of N tokens with the goodput model's lost work, stalls and restarts
(``run_energy`` -> ``RunEnergy``, with 95% confidence intervals over the failure histories).
``energy_per_token(result, cluster)`` is the one-number entry point for search objectives and
``energy_row(result, cluster)`` the flat columns for sweep rows and hardware tables. It does not
simulate a step (``step.simulate``) nor failures (``longrun.goodput``).

Definitions (SI: J, W, s; kWh only in names that say so):
- a unit (replica, stage) stands for ``num_gpus / units`` devices; at each instant its devices
  draw ``PowerSpec.watts(level)``, level = the highest of its active streams' activities (compute
  stream: compute -> dense, optimizer -> memory, exposed_tp/cp/ep/dp -> comm, bubble, exposed_pp
  and gaps -> wait; dp and p2p streams -> comm), clipped at ``power_limit_w``.
- GPU energy = integral of that power over [0, step_time], times devices per unit, summed.
- node energy = GPUs x ``node_w_per_gpu`` x step time; fabric = switch ports x W/port x step time.
- facility energy = PUE x (GPU + node + fabric). Per token: divided by tokens per step.
- money: GPU-hours x price per GPU-hour where one is set, else facility kWh x price per kWh +
  GPU-hours x capex / (life x 8760 h). Emissions: facility kWh x grid intensity.
- a run: per failure history, training time (useful + lost work) costs the step's power, a
  checkpoint stall the waiting power, detection/restart/spare wait the idle power (GPUs at
  ``idle_w``, nodes and fabric on); spare nodes idle all the time. Per useful token = run energy /
  tokens that survived; a run of N tokens = N x that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from clustersim.simulator.longrun.checkpoint import CheckpointSpec, checkpoint_cost
from clustersim.simulator.longrun.failures import FailureSpec, system_mtbf
from clustersim.simulator.longrun.goodput import (CAUSES, Z95, LongRunResult, LongRunSpec, simulate_long_run,
                                                  young_interval)
from clustersim.simulator.step.engine import Interval
from clustersim.simulator.step.result import Result
from clustersim.topologies import Cluster
from clustersim.topologies.power import ACTIVITIES, FacilitySpec, PowerSpec, power_spec

J_PER_KWH = 3.6e6
SCALE_OUT_SWITCHES: frozenset[str] = frozenset({"leaf", "spine", "core", "router"})
"""Switch kinds outside the node (NVSwitches are inside the DGX system power)."""

_COMPUTE_STREAM_ACTIVITY: Mapping[str, str] = {
    "compute": "dense", "optimizer": "memory", "exposed_tp": "comm", "exposed_cp": "comm",
    "exposed_ep": "comm", "exposed_dp": "comm", "exposed_pp": "wait", "bubble": "wait",
}

Segment = tuple[float, float, float]
"""(start s, end s, watts per device)."""


def activity(stream: str, category: str) -> str:
    """The activity of an interval (see the module docstring)."""
    if stream == "compute":
        return _COMPUTE_STREAM_ACTIVITY.get(category, "wait")
    return "comm"


def unit_activity(intervals: Iterable[Interval], step_time: float, power: PowerSpec) -> list[tuple[float, float, str]]:
    """(start, end, activity) covering [0, step_time]: at each instant the most power-hungry
    activity among the unit's active streams; ``wait`` where nothing runs (an event sweep)."""
    events: list[tuple[float, int, str]] = []
    for iv in intervals:
        lo, hi = max(iv.start, 0.0), min(iv.end, step_time)
        if hi > lo:
            act = activity(iv.stream, iv.category)
            events += [(lo, 1, act), (hi, -1, act)]
    events.sort(key=lambda e: e[0])
    rank = {a: (power.levels[a], -i) for i, a in enumerate(ACTIVITIES)}  # ties: dense > memory > comm > wait
    active = dict.fromkeys(ACTIVITIES, 0)
    out: list[tuple[float, float, str]] = []
    t, i = 0.0, 0
    while t < step_time:
        while i < len(events) and events[i][0] <= t:
            active[events[i][2]] += events[i][1]
            i += 1
        nxt = min(events[i][0], step_time) if i < len(events) else step_time
        out.append((t, nxt, max((a for a, n in active.items() if n > 0), key=rank.__getitem__, default="wait")))
        t = nxt
    return out


def unit_power(intervals: Iterable[Interval], step_time: float, power: PowerSpec,
               limit_w: float | None = None) -> list[Segment]:
    """Piecewise-constant watts per device of one unit over [0, step_time]."""
    return [(a, b, power.watts(power.levels[act], limit_w)) for a, b, act in unit_activity(intervals, step_time, power)]


def integrate(segments: Iterable[Segment]) -> float:
    """Joules of a piecewise-constant power trace."""
    return sum((b - a) * w for a, b, w in segments)


def units_of(intervals: Iterable[Interval]) -> dict[tuple[int, int], list[Interval]]:
    """The engine's intervals grouped by unit (replica, stage)."""
    out: dict[tuple[int, int], list[Interval]] = {}
    for iv in intervals:
        out.setdefault((iv.replica, iv.stage), []).append(iv)
    return out


def switch_ports(cluster: Cluster) -> int:
    """Ports of the scale-out switches (each directed edge out of a switch is one port); read from
    the cluster's columns, so a preset cluster builds no networkx graph for it."""
    w = cluster.columns()
    switch = np.array([d.get("kind") in SCALE_OUT_SWITCHES for _, d in w.nodes], dtype=bool)
    return int(np.count_nonzero(switch[w.src])) if len(w.src) else 0


@dataclass(frozen=True, kw_only=True)
class StepEnergy:
    """Energy of one optimizer step of the whole cluster (joules)."""

    step_time: float
    tokens_per_step: int
    num_gpus: int
    gpu_j: float
    """All accelerators' board energy."""
    node_j: float
    """Non-GPU node energy (CPUs, NICs, NVSwitches, fans)."""
    fabric_j: float
    """Scale-out switch energy."""
    pue: float
    by_activity_j: Mapping[str, float]
    """GPU energy by activity (sums to ``gpu_j``)."""
    idle_cluster_w: float
    """Cluster IT power with every GPU idle (nodes and fabric on): the restart power."""
    wait_cluster_w: float
    """Cluster IT power with every GPU waiting at full clocks: the checkpoint-stall power."""

    @property
    def it_j(self) -> float:
        return self.gpu_j + self.node_j + self.fabric_j

    @property
    def facility_j(self) -> float:
        return self.pue * self.it_j

    @property
    def j_per_token(self) -> float:
        """Facility joules per trained token (no failures)."""
        return self.facility_j / self.tokens_per_step

    @property
    def gpu_hours(self) -> float:
        return self.num_gpus * self.step_time / 3600.0

    @property
    def mean_gpu_w(self) -> float:
        """Average board power per GPU over the step."""
        return self.gpu_j / (self.num_gpus * self.step_time)

    def to_dict(self) -> dict[str, object]:
        return {"step_energy_j": self.facility_j, "it_energy_j": self.it_j, "gpu_energy_j": self.gpu_j,
                "node_energy_j": self.node_j, "fabric_energy_j": self.fabric_j, "pue": self.pue,
                "energy_per_token_j": self.j_per_token,
                "kwh_per_million_tokens": self.j_per_token * 1e6 / J_PER_KWH,
                "mean_gpu_power_w": self.mean_gpu_w, "gpu_energy_by_activity_j": dict(self.by_activity_j),
                "gpu_hours_per_step": self.gpu_hours}


def _by_activity(units: Mapping[tuple[int, int], list[Interval]], step_time: float, power: PowerSpec,
                 limit: float | None, per_unit: float) -> dict[str, float]:
    """GPU joules split by the activity that set each segment's power."""
    out = dict.fromkeys(ACTIVITIES, 0.0)
    for ivs in units.values():
        for a, b, act in unit_activity(ivs, step_time, power):
            out[act] += (b - a) * power.watts(power.levels[act], limit) * per_unit
    return out


def step_energy(result: Result, cluster: Cluster, power: PowerSpec | None = None,
                facility: FacilitySpec | None = None) -> StepEnergy:
    """Integrate the power model over the step's timeline (``result.intervals``)."""
    power = power or power_spec(cluster.accelerator)
    facility = facility or FacilitySpec()
    limit = cluster.accelerator.power_limit_w
    units = units_of(result.intervals)
    if not units:
        raise ValueError("step_energy needs the engine's intervals; pass a Result from simulate()")
    per_unit = result.num_gpus / len(units)
    gpu_j = sum(integrate(unit_power(ivs, result.step_time, power, limit)) for ivs in units.values()) * per_unit
    fabric_w = switch_ports(cluster) * facility.switch_w_per_port
    node_w = result.num_gpus * power.node_w_per_gpu
    return StepEnergy(
        step_time=result.step_time, tokens_per_step=result.tokens_per_step, num_gpus=result.num_gpus,
        gpu_j=gpu_j, node_j=node_w * result.step_time, fabric_j=fabric_w * result.step_time, pue=facility.pue,
        by_activity_j=_by_activity(units, result.step_time, power, limit, per_unit),
        idle_cluster_w=result.num_gpus * power.idle_w + node_w + fabric_w,
        wait_cluster_w=result.num_gpus * power.watts(power.levels["wait"], limit) + node_w + fabric_w)


def energy_per_token(result: Result, cluster: Cluster, power: PowerSpec | None = None,
                     facility: FacilitySpec | None = None) -> float:
    """Facility joules per trained token of one step (the search objective ``energy``)."""
    return step_energy(result, cluster, power, facility).j_per_token


@dataclass(frozen=True, kw_only=True)
class TokenCosts:
    """Energy, GPU-hours, money and emissions of one step and of one trained token."""

    energy_kwh_per_step: float
    gpu_hours_per_step: float
    money_per_step: float
    kg_co2_per_step: float
    tokens_per_step: int

    def per_token(self, name: str) -> float:
        """``name`` in energy_kwh, gpu_hours, money, kg_co2: per trained token."""
        return float(getattr(self, f"{name}_per_step")) / self.tokens_per_step

    def to_dict(self) -> dict[str, float]:
        names = ("energy_kwh", "gpu_hours", "money", "kg_co2")
        return {**{f"{n}_per_step": float(getattr(self, f"{n}_per_step")) for n in names},
                **{f"{n}_per_million_tokens": self.per_token(n) * 1e6 for n in names}}


def money(kwh: float, gpu_hours: float, facility: FacilitySpec, cluster_price: float) -> float:
    """Rental (GPU-hours x price) where a GPU-hour price is known, else energy + amortised capex."""
    price = facility.price_per_gpu_hour if facility.price_per_gpu_hour is not None else cluster_price
    if price > 0:
        return gpu_hours * price
    return kwh * facility.price_per_kwh + gpu_hours * facility.capex_per_gpu_hour


def token_costs(step: StepEnergy, facility: FacilitySpec, cluster_price: float = 0.0) -> TokenCosts:
    """The price of one step and one token (no failures)."""
    kwh = step.facility_j / J_PER_KWH
    return TokenCosts(energy_kwh_per_step=kwh, gpu_hours_per_step=step.gpu_hours,
                      money_per_step=money(kwh, step.gpu_hours, facility, cluster_price),
                      kg_co2_per_step=kwh * facility.grid_kg_per_kwh, tokens_per_step=step.tokens_per_step)


def energy_row(result: Result, cluster: Cluster, power: PowerSpec | None = None,
               facility: FacilitySpec | None = None) -> dict[str, float]:
    """Flat columns (units in the names) for sweep rows, hardware tables and search objectives;
    money at the cluster's own GPU-hour price unless ``facility`` sets a price."""
    facility = facility or FacilitySpec()
    step = step_energy(result, cluster, power, facility)
    costs = token_costs(step, facility, cluster.cost_per_gpu_hour)
    return {"energy_j_per_token": step.j_per_token, "kwh_per_million_tokens": costs.per_token("energy_kwh") * 1e6,
            "mean_gpu_power_w": step.mean_gpu_w, "gpu_hours_per_million_tokens": costs.per_token("gpu_hours") * 1e6,
            "cost_per_million_tokens": costs.per_token("money") * 1e6,
            "kg_co2_per_million_tokens": costs.per_token("kg_co2") * 1e6}


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
