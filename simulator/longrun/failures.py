"""Failures of a training cluster over wall-clock time: rates, system MTBF and drawn timelines.

Owns ``FailureSpec`` (MTBF per GPU, node and link, or a cluster-level rate; exponential or
Weibull lifetimes; detection, restart and rescheduling times; spare nodes and repair time) and
``draw_failures``, which draws every failure of the whole system over a horizon as one sorted
timeline. It does not decide what a failure costs the job (``clustersim.simulator.longrun.goodput`` does).

Drawing is vectorised and never per step or per component in Python:
- exponential: the superposition of independent Poisson processes is one Poisson process whose
  rate is the sum of the rates (min of exponentials is exponential with the summed rate); its
  count over a horizon H is Poisson(rate * H) and, given the count, the times are i.i.d. uniform
  on [0, H]. The kind of each failure is drawn with probability rate_kind / rate.
- weibull: every component is a renewal process (replaced when it fails) with Weibull lifetimes
  of the given shape and mean = its MTBF, scale = MTBF / Gamma(1 + 1/shape); all components of a
  kind are drawn as one array, round after round, until every one has passed the horizon.
Randomness comes only from the ``numpy.random.Generator`` the caller passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from clustersim.simulator.longrun.checkpoint import LongRunError

KINDS: tuple[str, ...] = ("gpu", "node", "link", "system")
"""Failure kinds, in the order of ``FailureTimeline.kinds`` codes."""


@dataclass(frozen=True, kw_only=True)
class FailureSpec:
    """How often the cluster fails and what a failure costs in wall time (seconds)."""

    mtbf_gpu: float = math.inf
    """Mean time between failures of one GPU (s); inf = never."""
    mtbf_node: float = math.inf
    """Mean time between failures of one node's host parts (CPU, memory, PSU, NIC) (s)."""
    mtbf_link: float = math.inf
    """Mean time between failures of one scale-out link (cable, transceiver, switch port) (s)."""
    system_mtbf: float = math.inf
    """Cluster-level mean time between job interruptions (s), added to the component rates;
    use it for a published interruption count (e.g. 54 days / 419 for Llama 3 405B)."""
    links_per_gpu: float = 1.0
    """Scale-out links per GPU (1 for rail-optimised DGX-style nodes: one NIC per GPU)."""
    distribution: Literal["exponential", "weibull"] = "exponential"
    """Lifetime distribution of each component."""
    weibull_shape: float = 1.0
    """Weibull shape k (< 1 infant mortality, 1 = exponential, > 1 wear-out)."""
    detection_time: float = 0.0
    """Seconds from a failure until the job is known to have stopped (hang timeout, watchdog)."""
    restart_time: float = 0.0
    """Seconds to relaunch the job (process start, NCCL init, data loader), restore excluded."""
    reschedule_time: float = 0.0
    """Seconds to swap a failed node for a spare (drain, re-place ranks) when one is needed."""
    spare_nodes: int = 0
    """Healthy nodes kept idle to replace failed ones at once."""
    repair_time: float = 0.0
    """Seconds until a failed node is repaired and back in the pool; 0 = at once."""
    system_swap_fraction: float = 1.0
    """Share of cluster-level failures that take a node out (needs a spare); GPU and node
    failures always do, link failures never do."""


@dataclass(frozen=True, kw_only=True)
class FailureTimeline:
    """Every failure of one drawn history, sorted by time."""

    times: np.ndarray
    """Failure times (s from the start), ascending."""
    kinds: np.ndarray
    """Index into ``KINDS`` of each failure."""
    needs_swap: np.ndarray
    """True where the failure takes a node out of service."""
    horizon: float
    """Seconds of wall time covered."""


def _validate(spec: FailureSpec) -> None:
    for name in ("mtbf_gpu", "mtbf_node", "mtbf_link", "system_mtbf"):
        if not getattr(spec, name) > 0:
            raise LongRunError(f"FailureSpec.{name} must be > 0 seconds (inf = never), got {getattr(spec, name)}")
    for name in ("detection_time", "restart_time", "reschedule_time", "repair_time", "links_per_gpu"):
        if not (getattr(spec, name) >= 0 and math.isfinite(getattr(spec, name))):
            raise LongRunError(f"FailureSpec.{name} must be finite and >= 0, got {getattr(spec, name)}")
    if spec.weibull_shape <= 0:
        raise LongRunError(f"FailureSpec.weibull_shape must be > 0, got {spec.weibull_shape}")
    if spec.spare_nodes < 0:
        raise LongRunError(f"FailureSpec.spare_nodes must be >= 0, got {spec.spare_nodes}")
    if not 0.0 <= spec.system_swap_fraction <= 1.0:
        raise LongRunError(f"FailureSpec.system_swap_fraction must lie in [0, 1], got {spec.system_swap_fraction}")


def component_counts(spec: FailureSpec, num_gpus: int, gpus_per_node: int) -> dict[str, int]:
    """How many components of each kind can fail (the cluster-level process counts as one)."""
    return {"gpu": num_gpus, "node": num_gpus // gpus_per_node,
            "link": int(round(num_gpus * spec.links_per_gpu)), "system": 1}


def _mtbfs(spec: FailureSpec) -> dict[str, float]:
    return {"gpu": spec.mtbf_gpu, "node": spec.mtbf_node, "link": spec.mtbf_link, "system": spec.system_mtbf}


def kind_rates(spec: FailureSpec, num_gpus: int, gpus_per_node: int) -> dict[str, float]:
    """Failures per second of each kind for the whole job (count / MTBF; long-run renewal rate)."""
    _validate(spec)
    counts = component_counts(spec, num_gpus, gpus_per_node)
    return {kind: counts[kind] / mtbf for kind, mtbf in _mtbfs(spec).items()}


def system_mtbf(spec: FailureSpec, num_gpus: int, gpus_per_node: int) -> float:
    """Mean seconds between failures of the whole job: 1 / sum of rates (inf if none)."""
    total = sum(kind_rates(spec, num_gpus, gpus_per_node).values())
    return math.inf if total == 0 else 1.0 / total


def _weibull_renewals(count: int, mtbf: float, shape: float, horizon: float,
                      rng: np.random.Generator) -> np.ndarray:
    """Failure times before ``horizon`` of ``count`` renewal processes with Weibull lifetimes."""
    scale = mtbf / math.gamma(1.0 + 1.0 / shape)
    clock = np.zeros(count)
    found: list[np.ndarray] = []
    while clock.size:
        clock = clock + scale * rng.weibull(shape, size=clock.size)
        clock = clock[clock < horizon]
        found.append(clock)
    return np.concatenate(found) if found else np.empty(0)


def _draw_exponential(rates: np.ndarray, horizon: float,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    total = float(rates.sum())
    count = int(rng.poisson(total * horizon)) if total > 0 else 0
    times = np.sort(rng.uniform(0.0, horizon, size=count))
    kinds = rng.choice(len(rates), size=count, p=rates / total) if count else np.empty(0, dtype=int)
    return times, kinds


def _draw_weibull(spec: FailureSpec, counts: dict[str, int], horizon: float,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    times: list[np.ndarray] = []
    kinds: list[np.ndarray] = []
    for code, (kind, mtbf) in enumerate(_mtbfs(spec).items()):
        if math.isfinite(mtbf) and counts[kind]:
            drawn = _weibull_renewals(counts[kind], mtbf, spec.weibull_shape, horizon, rng)
            times.append(drawn)
            kinds.append(np.full(drawn.size, code))
    if not times:
        return np.empty(0), np.empty(0, dtype=int)
    all_times, all_kinds = np.concatenate(times), np.concatenate(kinds)
    order = np.argsort(all_times, kind="stable")
    return all_times[order], all_kinds[order]


def draw_failures(spec: FailureSpec, *, num_gpus: int, gpus_per_node: int, horizon: float,
                  rng: np.random.Generator) -> FailureTimeline:
    """Draw every failure of the job over ``horizon`` seconds as one sorted timeline."""
    if not (horizon > 0 and math.isfinite(horizon)):
        raise LongRunError(f"horizon must be a positive finite number of seconds, got {horizon}")
    rates = kind_rates(spec, num_gpus, gpus_per_node)
    if spec.distribution == "exponential":
        times, kinds = _draw_exponential(np.array([rates[k] for k in KINDS]), horizon, rng)
    elif spec.distribution == "weibull":
        counts = component_counts(spec, num_gpus, gpus_per_node)
        times, kinds = _draw_weibull(spec, counts, horizon, rng)
    else:
        raise LongRunError(f"FailureSpec.distribution must be 'exponential' or 'weibull', got {spec.distribution!r}")
    system = kinds == KINDS.index("system")
    swap = (kinds == KINDS.index("gpu")) | (kinds == KINDS.index("node"))
    swap = swap | (system & (rng.random(kinds.size) < spec.system_swap_fraction))
    return FailureTimeline(times=times, kinds=kinds, needs_swap=swap, horizon=horizon)
