"""Flow-level fluid model: max-min fair sharing of link capacity, with an event loop.

Owns ``Flow``/``FlowResult``, ``max_min_rates`` (progressive filling over a sparse flow x link
incidence, numpy only) and ``simulate_flows``, which recomputes the max-min fair rates whenever
a flow starts or ends. Routes come from ``clustersim.simulator.network.routing`` (per-hop ECMP on shortest paths,
see there); collectives are built on top in ``clustersim.simulator.network.collectives``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.routing import Fabric, fabric_for

if TYPE_CHECKING:  # annotations only
    import networkx as nx

__all__ = ["Fabric", "Flow", "FlowResult", "NetworkError", "fabric_for", "max_min_rates", "simulate_flows"]

_TINY: float = 1e-12
"""Relative tolerance of the progressive-filling saturation test."""


@dataclass(frozen=True, kw_only=True)
class Flow:
    """One transfer between two graph nodes (usually GPUs)."""

    src: str
    """Source node name, e.g. ``"gpu0"``."""
    dst: str
    """Destination node name."""
    size: float
    """Bytes to move."""
    start: float = 0.0
    """Time (s) at which the flow starts sending."""


@dataclass(frozen=True, kw_only=True)
class FlowResult:
    """What ``simulate_flows`` measured."""

    finish_times: tuple[float, ...]
    """Per flow (input order): time (s) its last byte arrives = transmission end + path latency."""
    link_bytes: Mapping[str, float]
    """Bytes carried per directed link ``"u->v"`` (links with traffic only)."""
    link_utilisation: Mapping[str, float]
    """Per directed link: bytes / (effective capacity * makespan), in [0, 1]."""
    makespan: float
    """Latest finish time (s)."""


class NetworkError(ValueError):
    """A flow names nodes the fabric cannot route between."""


def max_min_rates(
    flow_idx: np.ndarray, link_idx: np.ndarray, frac: np.ndarray, capacity: np.ndarray, active: np.ndarray
) -> np.ndarray:
    """Max-min fair rates (bytes/s) by progressive filling over a sparse flow x link incidence.

    Flow ``flow_idx[k]`` puts ``frac[k]`` of its rate on link ``link_idx[k]``. All unfrozen flows
    grow together until a link saturates; flows crossing it freeze; repeat. Active flows that
    cross no link get ``inf``; inactive flows get 0.
    """
    rates = np.zeros(len(active))
    free = active.copy()
    cap = capacity.astype(float)
    while free.any():
        coef = np.bincount(link_idx, weights=frac * free[flow_idx], minlength=len(capacity))
        used = coef > _TINY
        if not used.any():
            rates[free] = np.inf
            break
        inc = float(np.min(cap[used] / coef[used]))
        rates[free] += inc
        cap = cap - inc * coef
        saturated = used & (cap <= 1e-9 * capacity)
        hit = np.bincount(flow_idx, weights=saturated[link_idx] * 1.0, minlength=len(active)) > 0
        free &= ~hit
    return rates


def _incidence(fabric: Fabric, flows: Sequence[Flow]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """COO (flow, link, fraction) of every flow's route, and each flow's path latency."""
    fi, li, fr, lat = [], [], [], np.zeros(len(flows))
    for k, f in enumerate(flows):
        try:
            s, d = fabric.node_id[f.src], fabric.node_id[f.dst]
        except KeyError:
            raise NetworkError(f"flow {k}: node '{f.src}' or '{f.dst}' is not in the graph; use gpu<i> names") from None
        if fabric.kind[s] != "gpu" or fabric.kind[d] != "gpu":
            raise NetworkError(f"flow {k}: {f.src} -> {f.dst} must join two GPU nodes (kind 'gpu')")
        edges, frac, lat[k] = fabric.route(int(f.src[3:]), int(f.dst[3:]))
        fi.append(np.full(len(edges), k))
        li.append(edges)
        fr.append(frac)

    def cat(xs: list[np.ndarray], t: type) -> np.ndarray:
        return np.concatenate(xs).astype(t) if xs else np.zeros(0, dtype=t)

    return cat(fi, np.int64), cat(li, np.int64), cat(fr, float), lat


def simulate_flows(graph: nx.DiGraph, flows: Sequence[Flow], profile: CalibrationProfile | None = None) -> FlowResult:
    """Fluid simulation of ``flows``: max-min fair rates recomputed whenever a flow starts or ends."""
    fabric = fabric_for(graph, profile or CalibrationProfile())
    fi, li, fr, lat = _incidence(fabric, flows)
    size = np.array([f.size for f in flows], dtype=float)
    start = np.array([f.start for f in flows], dtype=float)
    tx_end = _event_loop(fi, li, fr, fabric.capacity, size, start)
    finish = tx_end + lat
    per_link = np.bincount(li, weights=fr * size[fi], minlength=fabric.num_edges)
    makespan = float(finish.max()) if len(flows) else 0.0
    used = np.flatnonzero(per_link > 0)
    return FlowResult(
        finish_times=tuple(float(x) for x in finish),
        link_bytes={fabric.edge_name(int(e)): float(per_link[e]) for e in used},
        link_utilisation={
            fabric.edge_name(int(e)): float(per_link[e] / (fabric.capacity[e] * makespan)) if makespan > 0 else 0.0
            for e in used
        },
        makespan=makespan,
    )


def _event_loop(fi: np.ndarray, li: np.ndarray, fr: np.ndarray, capacity: np.ndarray,
                size: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Transmission end time of each flow; events are flow starts and flow ends."""
    t, remaining = 0.0, size.copy()
    end = np.full(len(size), np.nan)
    done = size <= 0
    end[done] = start[done]
    while not done.all():
        active = (start <= t) & ~done
        pending = start[(start > t) & ~done]
        if not active.any():
            t = float(pending.min())
            continue
        rates = max_min_rates(fi, li, fr, capacity, active)
        with np.errstate(divide="ignore"):
            dt = float(np.min(remaining[active] / rates[active]))
        if len(pending):
            dt = min(dt, float(pending.min()) - t)
        remaining[active] -= np.where(np.isinf(rates[active]), remaining[active], rates[active] * dt)
        t += dt
        fin = active & (remaining <= 1e-9 * np.maximum(size, 1.0))
        end[fin], done = t, done | fin
    return end
