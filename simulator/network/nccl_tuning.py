"""NCCL's own cost model of a collective: latency per algorithm and protocol, and the protocol pick.

Owns the constants of NCCL's tuner and the functions that read them: ``latency`` (seconds before
the bytes of one call move, per algorithm and protocol, from the ranks and nodes of the group),
``bandwidth_factor`` (a protocol's bus bandwidth relative to Simple) and ``best_protocol`` (the
protocol NCCL's tuner picks: the least ``latency + bytes / bandwidth``). It is used by the flow
pricer (``network.collectives``) and the closed-form tier (``network.analytic``) when a profile's
``collective_latency`` is ``"nccl"``; it does not price bandwidth itself (the fabric does) nor
choose the algorithm (the selector does, with these times).

Source of every constant: NVIDIA/nccl, ``src/graph/tuning.cc`` at commit
b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2 (``baseLat``, ``hwLat``, ``llMaxBws``, ``getNetOverhead``
and ``ncclTopoTuneModel``). The model, per (algorithm, protocol p), in microseconds:

- ring all-gather / reduce-scatter / all-reduce: ``baseLat[ring][p] + (nsteps - nInterSteps) *
  max(hwLat[intra][ring][p], netOverhead_p) + nInterSteps * hwLat[NET][ring][p]`` with nsteps =
  n-1 (2(n-1) for all-reduce) and nInterSteps = nodes-1 (2 nodes for all-reduce when nodes > 1);
  netOverhead = 1 us (x86 Intel host; 3x for Simple), 0 on one node;
- ring broadcast: ``baseLat + hwLat[hw][ring][p]`` (channels the same on every rank);
- tree all-reduce: ``baseLat[tree][p] + 2 ((n/nodes - 1) hwLat[intra][tree][p] + floor(log2 nodes)
  hwLat[NET][tree][p])``;
- NVLS (in-switch, Simple only): ``hwLat[NVLINK][NVLS]`` on one node; NVLS-tree across nodes
  ``hwLat[NVLINK][NVLSTree] + 2 floor(log2 nodes) hwLat[NET][NVLSTree]``.
Protocol bandwidth relative to Simple: ring LL 1/4 across nodes or for all-reduce (1/3 otherwise),
capped at ``llMaxBw`` bus GB/s; ring LL128 0.92 (0.7 with one GPU per node); tree LL 1/3.8, tree
LL128 7/9 on one node (120/128 across nodes). LL128 runs only over NVLink (NCCL enables it on
NVLink Volta/Ampere/Hopper). ``graphs[a]->latencyInter`` (0 unless the topology search sets it)
is taken as 0.
"""

from __future__ import annotations

import math
from typing import Literal

Protocol = Literal["LL", "LL128", "Simple"]
"""NCCL's protocols, in the order of its tables."""
PROTOCOLS: tuple[Protocol, ...] = ("LL", "LL128", "Simple")
US = 1e-6
"""Seconds per microsecond (NCCL's tables are in us)."""

BASE_LAT_US: dict[str, tuple[float, float, float]] = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4)}
"""``baseLat[algorithm]`` (LL, LL128, Simple), us; NVLS and NVLS-tree have 0."""
HW_LAT_US: dict[str, dict[str, tuple[float, float, float]]] = {
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 23.0), "nvls_tree": (0.0, 0.0, 23.0)},
    "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 14.0)},
}
"""``hwLat[hardware][algorithm]`` (LL, LL128, Simple), us per step."""
NET_OVERHEAD_US = 1.0
"""``getNetOverhead``: network post overhead per ring step on an x86 Intel host (AMD: 2.0)."""
LL_MAX_BUS_BW = {1: 87.7e9, 2: 39.0e9, 4: 20.4e9}
"""``llMaxBws`` (bytes/s of bus bandwidth) for LL: one node (Ampere/Hopper), two nodes and more
(Intel host rows ``N2``, ``N4``)."""


def ring_steps(kind: str, n: int, nodes: int) -> tuple[int, int]:
    """(nsteps, nInterSteps) of a ring collective of ``n`` ranks on ``nodes`` nodes."""
    if kind == "all_reduce":
        return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    if kind in ("all_gather", "reduce_scatter"):
        return n - 1, nodes - 1
    return n, nodes


def latency(kind: str, algorithm: str, protocol: Protocol, n: int, nodes: int, intra: str = "nvlink") -> float:
    """Seconds NCCL's model charges one call before its bytes (``algorithm`` one of ring, tree,
    in_switch; ``intra`` the link inside a node, ``nvlink`` or ``pci``)."""
    p = PROTOCOLS.index(protocol)
    hw_intra, net = HW_LAT_US[intra], HW_LAT_US["net"]
    match algorithm:
        case "ring" if kind == "broadcast":
            return (BASE_LAT_US["ring"][p] + (net if nodes > 1 else hw_intra)["ring"][p]) * US
        case "ring":
            nsteps, inter = ring_steps(kind, n, nodes)
            overhead = NET_OVERHEAD_US * (3.0 if protocol == "Simple" else 1.0) if nodes > 1 else 0.0
            intra_lat = max(hw_intra["ring"][p], overhead)
            return (BASE_LAT_US["ring"][p] + (nsteps - inter) * intra_lat + inter * net["ring"][p]) * US
        case "tree":
            per_node = n // max(nodes, 1)
            return (BASE_LAT_US["tree"][p] + 2 * ((per_node - 1) * hw_intra["tree"][p] + _log2i(nodes) * net["tree"][p])) * US
        case "in_switch" if nodes > 1:
            return (hw_intra["nvls_tree"][p] + 2 * _log2i(nodes) * net["nvls_tree"][p]) * US
        case "in_switch":
            return hw_intra["nvls"][p] * US
    raise ValueError(f"algorithm = '{algorithm}' has no NCCL latency model; use ring, tree or in_switch")


def _log2i(x: int) -> int:
    """floor(log2 x) for x >= 1 (NCCL's ``log2i``)."""
    return int(math.floor(math.log2(x))) if x >= 1 else 0


def protocols(algorithm: str, intra: str = "nvlink") -> tuple[Protocol, ...]:
    """Protocols NCCL may run ``algorithm`` with: NVLS only Simple; LL128 only over NVLink."""
    if algorithm == "in_switch":
        return ("Simple",)
    return PROTOCOLS if intra == "nvlink" else ("LL", "Simple")


def bandwidth_factor(kind: str, algorithm: str, protocol: Protocol, nodes: int, per_node: int) -> float:
    """A protocol's bus bandwidth as a fraction of Simple's (NCCL's "model refinements")."""
    if protocol == "Simple":
        return 1.0
    if algorithm == "tree":
        if protocol == "LL":
            return 1.0 / 3.8
        return 7.0 / 9.0 if nodes == 1 else 120.0 / 128.0
    if protocol == "LL":
        return 0.25 if (nodes > 1 or kind == "all_reduce") else 1.0 / 3.0
    return 0.7 if per_node < 2 else 0.92


def ll_bus_cap(nodes: int) -> float:
    """``llMaxBw``: the LL protocol's bus bandwidth ceiling (bytes/s) on ``nodes`` nodes."""
    return LL_MAX_BUS_BW[1 if nodes <= 1 else 2 if nodes == 2 else 4]


def best_protocol(kind: str, algorithm: str, n: int, nodes: int, simple_seconds: float, bus_bytes: float,
                  intra: str = "nvlink") -> tuple[Protocol, float, float]:
    """(protocol, latency s, bandwidth seconds) of the protocol NCCL's tuner picks: the least
    latency + bandwidth time, where Simple moves the bytes in ``simple_seconds`` and ``bus_bytes``
    (size times the bus factor) bound LL by its ceiling."""
    per_node = n // max(nodes, 1)
    best: tuple[Protocol, float, float] | None = None
    for proto in protocols(algorithm, intra):
        bw_time = simple_seconds / bandwidth_factor(kind, algorithm, proto, nodes, per_node)
        if proto == "LL":
            bw_time = max(bw_time, bus_bytes / ll_bus_cap(nodes))
        lat = latency(kind, algorithm, proto, n, nodes, intra)
        if best is None or lat + bw_time < best[1] + best[2]:
            best = (proto, lat, bw_time)
    assert best is not None, "every algorithm runs Simple"
    return best
