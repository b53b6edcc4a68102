"""Closed-form collective times: the fast tier used by plan search and as a cross-check.

Owns the alpha-beta formulas of NCCL's algorithms on a two-level (NVLink domain + scale-out)
cluster: ring within a domain, hierarchical across domains, pairwise all-to-all. It reads only the
cluster's summary figures (NVLink and NIC bandwidth per GPU, domain size, oversubscription), never
the graph; the flow-level model in ``clustersim.simulator.network.collectives`` is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.simulator.network.nccl_tuning import best_protocol
from clustersim.simulator.profile import CalibrationProfile
from clustersim.topologies import Cluster

NVLINK_HOP_LATENCY = 1.0e-6  # s per ring step inside an NVLink domain (NCCL LL/Simple, measured order)
NETWORK_HOP_LATENCY = 4.0e-6  # s per ring step across the fabric (NIC + 2-3 switch hops)
# The two constants are the ``collective_latency = "path"`` figures (uncited orders of magnitude);
# ``"nccl"`` replaces them for all-reduce, reduce-scatter, all-gather and broadcast by NCCL's own
# tuning model (``network.nccl_tuning``, cited there).


@dataclass(frozen=True)
class GroupShape:
    """How a process group lies on the cluster."""

    size: int
    """Ranks in the group."""
    per_domain: int
    """Ranks of the group inside one NVLink domain."""

    @property
    def domains(self) -> int:
        """NVLink domains the group spans."""
        return self.size // self.per_domain


def _bandwidths(cluster: Cluster, profile: CalibrationProfile) -> tuple[float, float]:
    nvlink = cluster.accelerator.nvlink_bandwidth * profile.link_eff("nvlink")
    given = cluster.params.get("oversubscription", 1.0)
    oversub = float(given) if isinstance(given, (int, float)) and given else 1.0
    nic = cluster.nic_bandwidth * profile.link_eff("nic") / oversub
    return (nvlink if nvlink > 0 else nic), nic


def collective_time(kind: str, size: float, shape: GroupShape, cluster: Cluster, profile: CalibrationProfile) -> float:
    """Seconds for one collective of ``size`` bytes (nccl-tests convention) on a group."""
    n = shape.size
    if n <= 1 or size <= 0:
        return 0.0
    b_in, b_out = _bandwidths(cluster, profile)
    k, d = shape.per_domain, shape.domains
    overhead = profile.collective_overhead
    if profile.collective_latency == "nccl" and kind in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        return overhead + _nccl_ring(kind, size, shape, b_in, b_out)
    match kind:
        case "all_reduce":
            return overhead + _rs_ag(size, k, d, b_in, b_out) * 2.0
        case "reduce_scatter" | "all_gather":
            return overhead + _rs_ag(size, k, d, b_in, b_out)
        case "all_to_all":
            return overhead + _all_to_all(size, n, k, b_in, b_out)
        case "broadcast":
            return overhead + size / (b_in if d == 1 else b_out) + (n - 1) * NVLINK_HOP_LATENCY
        case "send_recv":
            bw, lat = (b_in, NVLINK_HOP_LATENCY) if d == 1 else (b_out, NETWORK_HOP_LATENCY)
            return profile.p2p_overhead + size / bw + lat
    raise ValueError(f"unknown collective kind {kind!r}")


def _rs_ag(size: float, k: int, d: int, b_in: float, b_out: float) -> float:
    """One reduce-scatter (or all-gather) of ``size`` bytes: intra ring then inter ring.

    Hierarchical: (k-1)/k * S / B_nvlink inside the domain, then (d-1)/d * (S/k) / B_nic across
    domains, each GPU driving its own NIC (rail-optimised); latency one hop per ring step.
    """
    intra = (k - 1) / k * size / b_in + (k - 1) * NVLINK_HOP_LATENCY if k > 1 else 0.0
    inter = (d - 1) / d * (size / k) / b_out + (d - 1) * NETWORK_HOP_LATENCY if d > 1 else 0.0
    return intra + inter


def _all_to_all(size: float, n: int, k: int, b_in: float, b_out: float) -> float:
    """Pairwise all-to-all: each rank sends S/n to every peer; NVLink and NIC parts run together."""
    intra = (k - 1) / n * size / b_in
    inter = (n - k) / n * size / b_out
    latency = (k - 1) * NVLINK_HOP_LATENCY + (n - k) * NETWORK_HOP_LATENCY / max(k, 1)
    return max(intra, inter) + latency


def _nccl_ring(kind: str, size: float, shape: GroupShape, b_in: float, b_out: float) -> float:
    """Ring ``kind`` with NCCL's latency model and protocol pick: the bandwidth part as the
    hierarchical formulas above give it with no latency, then the protocol's latency and factor."""
    k, d = shape.per_domain, shape.domains
    match kind:
        case "all_reduce":
            simple = 2.0 * _rs_ag_bytes(size, k, d, b_in, b_out)
        case "broadcast":
            simple = size / (b_in if d == 1 else b_out)
        case _:
            simple = _rs_ag_bytes(size, k, d, b_in, b_out)
    bus = size * (2.0 if kind == "all_reduce" else 1.0) * (shape.size - 1) / shape.size
    _, lat, bw_time = best_protocol(kind, "ring", shape.size, d, simple, bus)
    return lat + bw_time


def _rs_ag_bytes(size: float, k: int, d: int, b_in: float, b_out: float) -> float:
    """The bandwidth part of ``_rs_ag`` (no latency)."""
    intra = (k - 1) / k * size / b_in if k > 1 else 0.0
    inter = (d - 1) / d * (size / k) / b_out if d > 1 else 0.0
    return intra + inter
