"""Power of accelerators, nodes and fabrics as cited data, and the power-cap clock relation.

Owns ``PowerSpec`` (one accelerator: idle and maximum board power, the power of each activity,
its node's non-GPU power per GPU), ``FacilitySpec`` (PUE, fabric switch power per port, prices,
grid intensity), the presets by accelerator name (``power_spec``), ``with_power_limit`` and
``clock_fraction`` (how far a power cap lowers the sustained clock). It does not integrate power
over a timeline nor price a run (``clustersim.simulator.step.energy`` and ``longrun.energy`` do)
and times nothing.

Model (SI units: watts, joules). A device doing activity ``a`` draws
``P(a) = idle_w + level[a] * (max_w - idle_w)``, clipped at its power limit; ``level`` is 1 for
dense (tensor-core bound) compute. Facts carry their source; every figure marked "assumption" has
no datasheet behind it and is a field to set or calibrate (``dataclasses.replace``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal, Mapping

from clustersim.topologies.accelerators import AcceleratorSpec
from clustersim.topologies.errors import TopologyError

Activity = Literal["dense", "memory", "comm", "wait"]
ACTIVITIES: tuple[str, ...] = ("dense", "memory", "comm", "wait")
"""What a device does at an instant of the step: tensor-core bound compute, HBM-bound kernels
(the optimizer, element-wise kernels inside a pass), moving bytes for a collective, waiting at full clocks (bubble, a peer, a sync)."""

DEFAULT_LEVELS: Mapping[str, float] = MappingProxyType({"dense": 1.0, "memory": 0.6, "comm": 0.45, "wait": 0.3})
"""Share of the dynamic range (max_w - idle_w) each activity draws. dense = 1: the published
training accounts charge a training GPU at its TDP (Llama 2 and Llama 3.1 model cards, BLOOM
carbon study, Luccioni et al. 2022: GPU-hours x 400 W). memory, comm and wait: assumption (no
datasheet gives them); fit them from measured power traces where you have them."""

IDLE_SHARE_OF_TDP = 0.1
"""Assumption: board power with nothing running = 10% of TDP (no datasheet states idle power)."""
NODE_LOAD_SHARE = 0.5
"""Assumption: a training node's non-GPU parts (CPUs, DIMMs, NICs, NVSwitches, fans, PSU losses)
draw half of the datasheet maximum that is not the GPUs'. Cross-check: BLOOM's study books
256,646 kWh of non-GPU ("idle") energy over 1,082,990 GPU-hours = 237 W per GPU on HPE A100
nodes; half of the DGX A100 figure below is 206 W."""
HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True, kw_only=True)
class PowerSpec:
    """The power of one accelerator and its share of its node (all watts)."""

    max_w: float
    """Board power at full dense load: the TDP."""
    idle_w: float
    """Board power with nothing running (also the static part of the cap relation)."""
    node_max_w_per_gpu: float
    """The node's datasheet maximum minus its GPUs' TDP, per GPU (CPUs, NICs, NVSwitches, fans)."""
    node_load: float = NODE_LOAD_SHARE
    """Share of ``node_max_w_per_gpu`` drawn while training (assumption, see NODE_LOAD_SHARE)."""
    levels: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_LEVELS), hash=False)
    """Share of (max_w - idle_w) per activity in ``ACTIVITIES``."""
    source: str = ""
    """Where the figures come from."""

    def __post_init__(self) -> None:
        if not 0 <= self.idle_w <= self.max_w:
            raise TopologyError(f"PowerSpec: idle_w = {self.idle_w} must be in [0, max_w = {self.max_w}]")
        if self.node_max_w_per_gpu < 0 or not 0 <= self.node_load <= 1:
            raise TopologyError(f"PowerSpec: node_max_w_per_gpu = {self.node_max_w_per_gpu} must be >= 0 and "
                                f"node_load = {self.node_load} in [0, 1]")
        bad = {k: v for k, v in self.levels.items() if k not in ACTIVITIES or not 0 <= v <= 1}
        if bad or set(self.levels) != set(ACTIVITIES):
            raise TopologyError(f"PowerSpec.levels must give each of {list(ACTIVITIES)} a share in [0, 1]; "
                                f"got {dict(self.levels)}")
        object.__setattr__(self, "levels", dict(self.levels))

    @property
    def node_w_per_gpu(self) -> float:
        """Non-GPU node power per GPU while training."""
        return self.node_max_w_per_gpu * self.node_load

    def watts(self, level: float, limit_w: float | None = None) -> float:
        """Board power at a share ``level`` of the dynamic range, clipped at ``limit_w``."""
        p = self.idle_w + level * (self.max_w - self.idle_w)
        return p if limit_w is None else min(p, limit_w)


def _dgx(max_w: float, system_max_w: float, gpus: int, source: str) -> PowerSpec:
    """A preset: TDP from the accelerator, node overhead = (system max - GPUs' TDP) / GPUs."""
    return PowerSpec(max_w=max_w, idle_w=IDLE_SHARE_OF_TDP * max_w,
                     node_max_w_per_gpu=(system_max_w - gpus * max_w) / gpus, source=source)


_PRESETS: Mapping[str, PowerSpec] = MappingProxyType({
    # NVIDIA DGX A100 datasheet / user guide: "6.5 kW max" for 8 x A100 SXM4 at 400 W (A100 datasheet)
    "A100 SXM4 40GB": _dgx(400.0, 6500.0, 8, "DGX A100 datasheet 6.5 kW max; A100 datasheet 400 W; idle: assumption"),
    "A100 SXM4 80GB": _dgx(400.0, 6500.0, 8, "DGX A100 datasheet 6.5 kW max; A100 datasheet 400 W; idle: assumption"),
    # NVIDIA DGX H100 datasheet: "System power usage ~10.2kW max" for 8 x H100 SXM at 700 W
    "H100 SXM 80GB": _dgx(700.0, 10200.0, 8, "DGX H100 datasheet ~10.2 kW max; H100 datasheet 700 W; idle: assumption"),
    # DGX H200 specification: 10.2 kW max for 8 x H200 SXM at 700 W
    "H200 SXM 141GB": _dgx(700.0, 10200.0, 8, "DGX H200 datasheet 10.2 kW max; H200 datasheet 700 W; idle: assumption"),
    # NVIDIA DGX B200 datasheet: "System power usage ~14.3kW max" for 8 x B200 at 1,000 W
    "B200 180GB": _dgx(1000.0, 14300.0, 8, "DGX B200 datasheet ~14.3 kW max; HGX B200 1,000 W; idle: assumption"),
})


def power_spec(accelerator: AcceleratorSpec) -> PowerSpec:
    """The preset of ``accelerator`` by name; others get TDP-scaled assumptions and no node overhead."""
    preset = _PRESETS.get(accelerator.name)
    if preset is not None:
        return preset
    tdp = accelerator.tdp_watts
    return PowerSpec(max_w=tdp, idle_w=IDLE_SHARE_OF_TDP * tdp, node_max_w_per_gpu=0.0,
                     source=f"{accelerator.source}: TDP {tdp:g} W; idle, levels: assumption; node overhead unknown (0)")


def power_presets() -> Mapping[str, PowerSpec]:
    """The cited presets by accelerator name (read-only)."""
    return _PRESETS


def with_power_limit(accelerator: AcceleratorSpec, limit_w: float | None) -> AcceleratorSpec:
    """``accelerator`` capped at ``limit_w`` watts (None lifts the cap); the limit must exceed idle power."""
    if limit_w is None:
        return replace(accelerator, power_limit_w=None)
    spec = power_spec(accelerator)
    if not spec.idle_w < limit_w <= accelerator.tdp_watts:
        raise TopologyError(f"power_limit_w = {limit_w} for {accelerator.name!r} must be in "
                            f"({spec.idle_w:g}, {accelerator.tdp_watts:g}] W (above idle power, at most the TDP)")
    return replace(accelerator, power_limit_w=float(limit_w))


def clock_fraction(accelerator: AcceleratorSpec, spec: PowerSpec | None = None) -> float:
    """Sustained clock under the power limit / clock at TDP, for dense (power-bound) compute.

    Physical assumption (CMOS dynamic power P_dyn ~ C f V^2 with V ~ f across the DVFS range, so
    P_dyn ~ f^3), with the idle power as the static part: limit = idle + (max - idle) (f/f0)^3, so
    f/f0 = ((limit - idle) / (max - idle))^(1/3), at most 1. A cap never raises the clock. HBM-bound
    work keeps its speed (the memory clock is not lowered). Measured check: capping V100s from
    250 W to 150 W lengthened BERT-scale training by 6.8% (Zhao et al. 2022, "Great Power, Great
    Responsibility", arXiv 2205.09646); the relation gives <= 24% for fully power-bound compute,
    an upper bound, as those jobs did not all draw their TDP.
    """
    limit = accelerator.power_limit_w
    if limit is None:
        return 1.0
    spec = spec or power_spec(accelerator)
    if limit >= spec.max_w:
        return 1.0
    return min(1.0, math.cbrt(max(limit - spec.idle_w, 0.0) / (spec.max_w - spec.idle_w)))  # rounding stays <= 1


@dataclass(frozen=True, kw_only=True)
class FacilitySpec:
    """The data centre around the cluster: cooling overhead, fabric power, prices, grid."""

    pue: float = 1.0
    """Power usage effectiveness: facility energy / IT energy (1.0 = IT energy only; set yours)."""
    switch_w_per_port: float = 0.0
    """Scale-out switch power per port (W); 0 = not counted. No cited whole-switch figure backs a
    default: the NVIDIA QM97xx (Quantum-2 NDR) user manual's stored text gives only the optics'
    budget, "Class 8 (17W) OSFP112 transceivers" per OSFP cage of 2 ports (docs.nvidia.com,
    QM97X0PUB, "Interfaces"), an upper bound for the transceivers alone (no ASIC, fans or PSU
    losses); set yours from your switch's datasheet."""
    price_per_gpu_hour: float | None = None
    """Rental price of a GPU-hour (energy included); None = the cluster's ``cost_per_gpu_hour``."""
    price_per_kwh: float = 0.0
    """Owner's electricity price per facility kWh (used when no GPU-hour price is set)."""
    capex_per_gpu: float = 0.0
    """Owner's capital cost per GPU including its share of node and fabric."""
    life_years: float = 4.0
    """Years over which ``capex_per_gpu`` is amortised (assumption, settable)."""
    grid_kg_per_kwh: float = 0.0
    """Grid carbon intensity, kg CO2eq per kWh (0 = not set)."""

    def __post_init__(self) -> None:
        if not (self.pue >= 1.0 and math.isfinite(self.pue)):
            raise TopologyError(f"FacilitySpec.pue = {self.pue} must be a finite number >= 1")
        for name in ("switch_w_per_port", "price_per_kwh", "capex_per_gpu", "grid_kg_per_kwh"):
            if not getattr(self, name) >= 0:
                raise TopologyError(f"FacilitySpec.{name} = {getattr(self, name)} must be >= 0")
        if self.price_per_gpu_hour is not None and not self.price_per_gpu_hour >= 0:
            raise TopologyError(f"FacilitySpec.price_per_gpu_hour = {self.price_per_gpu_hour} must be >= 0")
        if not self.life_years > 0:
            raise TopologyError(f"FacilitySpec.life_years = {self.life_years} must be > 0")

    @property
    def capex_per_gpu_hour(self) -> float:
        """Capital cost per GPU-hour, straight-line over ``life_years``."""
        return self.capex_per_gpu / (self.life_years * HOURS_PER_YEAR)
