"""ECMP hash collisions: flows pinned to one uplink each, the busiest uplink gating a collective step.

Applies when the profile says the fabric hashes (``CalibrationProfile.ecmp_routing = "hash"``);
with ``adaptive`` (the default) ``hashed_loads`` returns the ideal loads unchanged.

Owns the balls-into-bins closed form (``expected_max_load``: m flows hashed uniformly onto k
uplinks, the expected number on the busiest one) and its application to the link loads of one
collective step (``hashed_loads``). The routing tables split every flow ideally over its
equal-cost next hops (``clustersim.simulator.network.routing``: spraying / adaptive routing); with
per-flow ECMP hashing (RoCE, InfiniBand without adaptive routing) each flow takes one uplink, so
the uplink that draws the most flows runs them at port / (flows on it) instead of sharing the
leaf's whole uplink capacity. It does not route (``routing``) nor price (``collectives``).

Model, at the edge tier of a switched fabric (the switch where a GPU's NIC meets the fabric):
- the balls of leaf u are the flows of the step that leave u for another leaf, one per (flow,
  NIC) pair (NCCL opens one connection per peer and NIC; ``NCCL_IB_QPS_PER_CONNECTION`` = 1 by
  default), hashed independently and uniformly onto u's k physical uplinks;
- k = the leaf's uplink bandwidth / its NIC line rate (ports at the NIC's speed, as in the DGX
  SuperPOD reference design: 400 Gb/s NDR down and up), so a logical aggregated uplink of the
  graph stands for several ports;
- the busiest port carries E[max load](m, k) flows, each of the mean bytes per flow, at the
  NIC's capacity: a leaf out-edge's load becomes max(its ideal load, E[max] x bytes per flow x
  its capacity / NIC capacity), so one flow per port is exactly a NIC-rate flow (no slowdown);
- the same for the flows entering leaf v from the spines (the spine a flow crosses is its hash).
Higher tiers (spine -> core) keep the ideal split; the all-to-all's dense path is not hashed.
Bytes reported per link (utilisation) stay the ideal ones; the hashed loads price the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import log
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the routing tables are passed in; this module only reads them
    from clustersim.simulator.network.routing import Fabric


@lru_cache(maxsize=8192)
def expected_max_load(m: int, k: int) -> float:
    """E[largest number of balls in one bin] when ``m`` balls fall uniformly into ``k`` bins.

    Exact: P(max <= x) by a recursion over bins (bin j takes Binomial(balls left, 1/(bins left))
    balls, at most x), E[max] = sum over x >= 0 of P(max > x). O(k m^2) per call, memoised.
    """
    if m < 0 or k < 1:
        raise ValueError(f"balls m = {m} must be >= 0 and bins k = {k} >= 1")
    if m == 0 or k == 1:
        return float(m)
    total = 0.0
    for x in range(m):
        p = _prob_all_at_most(m, k, x)
        total += 1.0 - p
        if p > 1.0 - 1e-15:
            break
    return total


def _prob_all_at_most(m: int, k: int, x: int) -> float:
    """P(no bin holds more than ``x`` of ``m`` balls in ``k`` bins)."""
    if x * k < m:
        return 0.0
    r = np.arange(m + 1)
    lf = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, m + 1)))])  # log r!
    prob = np.zeros(m + 1)  # prob[r]: P(r balls left and every bin so far held <= x)
    prob[m] = 1.0
    for left in range(k, 1, -1):  # this bin takes Binomial(r, 1/left) of the r balls left
        q = 1.0 / left
        nxt = np.zeros(m + 1)
        for j in range(min(x, m) + 1):
            n = r[j:]
            pmf = np.exp(lf[n] - lf[j] - lf[n - j] + j * log(q) + (n - j) * np.log1p(-q))
            nxt[: m + 1 - j] += prob[j:] * pmf  # r balls -> r - j left
        prob = nxt
    return float(prob[: x + 1].sum())  # the last bin takes all that is left


def hashed_loads(fabric: Fabric, src: np.ndarray, dst: np.ndarray, loads: np.ndarray) -> np.ndarray:
    """``loads`` (bytes per edge of one step's flows ``src[i] -> dst[i]``, ideal split) with the
    edge-tier uplinks and downlinks raised to the busiest hashed port's load (module docstring)."""
    if not fabric.ecmp_hashing or len(src) == 0:
        return loads
    tiers = edge_tiers(fabric)
    if tiers is None:
        return loads
    out = loads.copy()
    up_sw, down_sw = fabric.egress.switch[src], fabric.ingress.switch[dst]
    for sw, other, out_edges in ((up_sw, down_sw, True), (down_sw, up_sw, False)):
        leaves = sw[sw >= 0]
        flow = np.repeat(np.arange(len(src)), sw.shape[1])[(sw >= 0).ravel()]
        crosses = ~(other[flow] == leaves[:, None]).any(axis=1)  # the flow leaves (enters) the leaf
        balls = np.bincount(leaves[crosses], minlength=len(fabric.nodes))
        for u in np.flatnonzero(balls):
            edges = tiers.up[u] if out_edges else tiers.down[u]
            if len(edges) == 0:
                continue
            m, k = int(balls[u]), tiers.ports_up[u] if out_edges else tiers.ports_down[u]
            per_flow = float(loads[edges].sum()) / m
            busiest = expected_max_load(m, k) * per_flow / tiers.nic_capacity[u]  # seconds on the busiest port
            out[edges] = np.maximum(loads[edges], busiest * fabric.capacity[edges])
    return out


@dataclass(frozen=True, kw_only=True)
class EdgeTiers:
    """Per node (indexed by node id; empty for nodes that are not edge-tier switches)."""

    up: list[np.ndarray]
    """Fabric out-edges (to other switches) of each edge-tier switch."""
    down: list[np.ndarray]
    """Fabric in-edges (from other switches)."""
    ports_up: np.ndarray
    """Physical uplink ports: round(uplink bandwidth / NIC line rate), >= 1."""
    ports_down: np.ndarray
    """Physical downlink ports from the spines, likewise."""
    nic_capacity: np.ndarray
    """Capacity (bytes/s) of the NIC links into the switch (their median)."""


def edge_tiers(fabric: Fabric) -> EdgeTiers | None:
    """The edge-tier switches of ``fabric`` (where NICs meet the fabric), memoised on it; None when
    the graph has no such switch with uplinks (one NVLink domain, direct networks)."""
    key = ("ecmp-edge-tiers",)
    if key not in fabric.memo:
        fabric.memo[key] = _edge_tiers(fabric)
    tiers = fabric.memo[key]
    assert tiers is None or isinstance(tiers, EdgeTiers)
    return tiers


def _edge_tiers(fabric: Fabric) -> EdgeTiers | None:
    n = len(fabric.nodes)
    sw = fabric.fabric_index >= 0
    edge_sw = np.unique(np.concatenate([fabric.egress.switch.ravel(), fabric.ingress.switch.ravel()]), return_index=True)[0]  # return_index: not the path that imports numpy.ma
    edge_sw = edge_sw[edge_sw >= 0]
    if not len(edge_sw):
        return None
    src, dst = fabric.src_of, fabric.dst_of
    inter = sw[src] & sw[dst]
    up: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n
    down: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n
    ports_up, ports_down, nic = np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64), np.ones(n)
    for u in edge_sw.tolist():
        feed = np.flatnonzero((dst == u) & ~sw[src])
        if not len(feed):
            continue
        line = float(np.median(fabric.bandwidth[feed]))
        nic[u] = float(np.median(fabric.capacity[feed]))
        up[u] = np.flatnonzero(inter & (src == u))
        down[u] = np.flatnonzero(inter & (dst == u))
        ports_up[u] = max(1, round(float(fabric.bandwidth[up[u]].sum()) / line))
        ports_down[u] = max(1, round(float(fabric.bandwidth[down[u]].sum()) / line))
    return EdgeTiers(up=up, down=down, ports_up=ports_up, ports_down=ports_down, nic_capacity=nic)
