"""Energy, GPU-hours, money and emissions of one simulated step and of a trained token.

Owns the power timeline of a simulated step (``unit_power``: piecewise-constant watts per engine
unit from the engine's intervals and ``topologies.power``), its integral (``step_energy`` ->
``StepEnergy``), the price of a step and a token (``token_costs`` -> ``TokenCosts``),
``energy_per_token(result, cluster)`` and ``cost_per_token`` (the search objectives ``energy`` and
``cost``) and ``energy_row(result, cluster)`` (the flat columns of sweep rows and hardware tables).
It lives in ``step/`` so that search, sweep and longrun all read one definition. It does not
simulate a step (``step.simulate``) nor a run with failures (``longrun.energy``).

Definitions (SI: J, W, s; kWh only in names that say so):
- a unit (replica, stage) stands for ``num_gpus / units`` devices; at each instant its devices
  draw ``PowerSpec.watts(level)``, level = the highest of its active streams' levels (compute
  stream: compute -> its stage's mix of dense and memory-bound kernels, optimizer -> memory,
  exposed_tp/cp/ep/dp -> comm, bubble, exposed_pp and gaps -> wait; dp and p2p streams -> comm),
  clipped at ``power_limit_w``.
- a compute interval's level: the engine logs a whole pass as one interval; its stage's compute
  seconds by part (``Result.stage_compute_breakdowns``, ``step.compute.COMPUTE_PARTS``) say how
  much of it is memory-bound element-wise work (``memory``), launch overhead between kernels
  (``wait``: the SMs idle at full clocks) and GEMM/attention/recompute (``dense``); the interval
  draws the time-weighted mean of those levels, so the stage's energy is the same as if each
  kernel were its own interval. Without the split (a hand-built Result) compute is dense.
- GPU energy = integral of that power over [0, step_time], times devices per unit, summed.
- node energy = GPUs x ``node_w_per_gpu`` x step time; fabric = switch ports x W/port x step time.
- facility energy = PUE x (GPU + node + fabric). Per token: divided by tokens per step.
- money: GPU-hours x price per GPU-hour where one is set, else facility kWh x price per kWh +
  GPU-hours x capex / (life x 8760 h). Emissions: facility kWh x grid intensity.
"""


from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

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
    "exposed_offload": "wait",  # the SMs idle while the copy engines move activations over the host link
}
_PART_ACTIVITY: Mapping[str, str] = {"elementwise": "memory", "overhead": "wait"}
"""A compute part's activity when it is not dense (``step.compute.COMPUTE_PARTS``): memory-bound
element-wise kernels draw the memory level; launch overhead between kernels the waiting level."""
DENSE: Mapping[str, float] = {"dense": 1.0}
"""The kernel mix of a compute interval whose stage has no compute split: all dense."""

Segment = tuple[float, float, float]
"""(start s, end s, watts per device)."""
Mix = Mapping[str, float]
"""Time shares of a stage's compute by activity (they sum to 1)."""


def activity(stream: str, category: str) -> str:
    """The activity of an interval (see the module docstring); ``dense`` for a compute interval
    stands for its stage's kernel mix (``compute_mix``)."""
    if stream == "compute":
        return _COMPUTE_STREAM_ACTIVITY.get(category, "wait")
    if stream.startswith("nic-"):  # a NIC's rate samples (flows): the stream that moves the bytes counts
        return "wait"
    return "comm"


def compute_mix(parts: Mapping[str, float]) -> dict[str, float]:
    """Time shares by activity of a stage's compute seconds by part: element-wise -> memory,
    launch overhead -> wait, the rest (GEMMs, attention, recompute) -> dense."""
    total = sum(parts.values())
    if not total > 0:
        return dict(DENSE)
    out = dict.fromkeys(("dense", "memory", "wait"), 0.0)
    for part, secs in parts.items():
        out[_PART_ACTIVITY.get(part, "dense")] += secs / total
    return out


def activity_watts(power: PowerSpec, limit_w: float | None = None, mix: Mix = DENSE) -> dict[str, float]:
    """Watts per device of each activity; ``dense`` (a compute interval) is the time-weighted mean
    of its kernel mix, each kernel kind clipped at the cap on its own."""
    watts = {a: power.watts(power.levels[a], limit_w) for a in ACTIVITIES}
    return {**watts, "dense": sum(share * watts[a] for a, share in mix.items())}


def unit_activity(intervals: Iterable[Interval], step_time: float, power: PowerSpec,
                  watts: Mapping[str, float] | None = None) -> list[tuple[float, float, str]]:
    """(start, end, activity) covering [0, step_time]: at each instant the most power-hungry
    activity (by ``watts``, default all-dense levels) among the unit's active streams; ``wait``
    where nothing runs (an event sweep)."""
    watts = watts or activity_watts(power)
    events: list[tuple[float, int, str]] = []
    for iv in intervals:
        lo, hi = max(iv.start, 0.0), min(iv.end, step_time)
        if hi > lo:
            act = activity(iv.stream, iv.category)
            events += [(lo, 1, act), (hi, -1, act)]
    events.sort(key=lambda e: e[0])
    rank = {a: (watts[a], -i) for i, a in enumerate(ACTIVITIES)}  # ties: dense > memory > comm > wait
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
               limit_w: float | None = None, mix: Mix = DENSE) -> list[Segment]:
    """Piecewise-constant watts per device of one unit over [0, step_time]."""
    watts = activity_watts(power, limit_w, mix)
    return [(a, b, watts[act]) for a, b, act in unit_activity(intervals, step_time, power, watts)]


def integrate(segments: Iterable[Segment]) -> float:
    """Joules of a piecewise-constant power trace."""
    return sum((b - a) * w for a, b, w in segments)


def units_of(intervals: Iterable[Interval]) -> dict[tuple[int, int], list[Interval]]:
    """The engine's intervals grouped by unit (replica, stage)."""
    out: dict[tuple[int, int], list[Interval]] = {}
    for iv in intervals:
        out.setdefault((iv.replica, iv.stage), []).append(iv)
    return out


def stage_mixes(result: Result) -> dict[int, dict[str, float]]:
    """Each stage's kernel mix from ``result.stage_compute_breakdowns`` (empty: every stage dense)."""
    return {s: compute_mix(parts) for s, parts in enumerate(result.stage_compute_breakdowns)}


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


def _unit_joules(ivs: list[Interval], step_time: float, power: PowerSpec, limit: float | None,
                 mix: Mix) -> dict[str, float]:
    """One device of a unit: joules by activity, a compute segment split by its kernel mix."""
    plain = {a: power.watts(power.levels[a], limit) for a in ACTIVITIES}
    watts = activity_watts(power, limit, mix)
    out = dict.fromkeys(ACTIVITIES, 0.0)
    for a, b, act in unit_activity(ivs, step_time, power, watts):
        if act == "dense":
            for kind, share in mix.items():
                out[kind] += (b - a) * share * plain[kind]
        else:
            out[act] += (b - a) * plain[act]
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
    mixes = stage_mixes(result)
    by_activity = dict.fromkeys(ACTIVITIES, 0.0)
    for (_, stage), ivs in units.items():
        for act, joules in _unit_joules(ivs, result.step_time, power, limit, mixes.get(stage, DENSE)).items():
            by_activity[act] += joules * per_unit
    fabric_w = switch_ports(cluster) * facility.switch_w_per_port
    node_w = result.num_gpus * power.node_w_per_gpu
    return StepEnergy(
        step_time=result.step_time, tokens_per_step=result.tokens_per_step, num_gpus=result.num_gpus,
        gpu_j=sum(by_activity.values()), node_j=node_w * result.step_time, fabric_j=fabric_w * result.step_time,
        pue=facility.pue, by_activity_j=by_activity,
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


def rental_price(facility: FacilitySpec, cluster_price: float) -> float:
    """The GPU-hour price a run is rented at: the facility's if set, else the cluster's; 0 = owned
    (priced by energy and amortised capital instead)."""
    return facility.price_per_gpu_hour if facility.price_per_gpu_hour is not None else cluster_price


def money(kwh: float, gpu_hours: float, facility: FacilitySpec, cluster_price: float) -> float:
    """Rental (GPU-hours x price) where a GPU-hour price is known, else energy + amortised capex."""
    price = rental_price(facility, cluster_price)
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


def floor_w(cluster: Cluster, power: PowerSpec | None = None, facility: FacilitySpec | None = None) -> float:
    """The least facility power the cluster draws while a step runs: every GPU at its lowest
    activity level (clipped at the cap), nodes and fabric on. ``step_time x floor_w`` never
    exceeds ``step_energy(...).facility_j`` (the bound of the search objective ``energy``)."""
    power = power or power_spec(cluster.accelerator)
    facility = facility or FacilitySpec()
    limit = cluster.accelerator.power_limit_w
    gpu_w = min(power.watts(power.levels[a], limit) for a in ACTIVITIES)
    it_w = cluster.num_gpus * (gpu_w + power.node_w_per_gpu) + switch_ports(cluster) * facility.switch_w_per_port
    return facility.pue * it_w
