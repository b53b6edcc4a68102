"""All-to-all of whole groups on a fabric's routing tables, without n^2 flows.

Owns ``all_to_all``: every rank of every group sends the same bytes to every other rank of its
group; it returns the link loads of all groups, those of the first group and the longest path
latency of its flows. The traffic between fabric switches is built from sums per (group, domain)
and per switch (an outer product of exit and entry sums minus the same-domain pairs), so a group
of 16,384 ranks costs what a ring does; that (switch, switch) traffic is then pushed over the
fabric by ``Fabric.propagate`` (per-hop ECMP). It reads the routing tables through
``AllToAllFabric`` (what ``network.routing.Fabric`` provides) and builds none of them; it knows
no collective algorithm (``network.algorithms``) nor any time (``network.collectives``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class ChainTable(Protocol):
    """Per-GPU NIC-chain tables (``routing._Egress``): the edges of a GPU's chain and where its
    traffic meets the fabric."""

    @property
    def edges(self) -> np.ndarray: ...
    @property
    def edge_frac(self) -> np.ndarray: ...
    @property
    def switch(self) -> np.ndarray: ...
    @property
    def switch_frac(self) -> np.ndarray: ...


class AllToAllFabric(Protocol):
    """The routing tables ``all_to_all`` reads (``network.routing.Fabric``)."""

    num_edges: int
    nodes: list[str]
    num_gpus: int
    local_switch: np.ndarray
    local_up: np.ndarray
    local_down: np.ndarray
    latency: np.ndarray
    fabric_index: np.ndarray
    memo: dict[tuple[object, ...], object]

    @property
    def egress(self) -> ChainTable: ...
    @property
    def ingress(self) -> ChainTable: ...
    @property
    def hops(self) -> np.ndarray: ...

    def chain_loads(self, tab: ChainTable, g: np.ndarray, w: np.ndarray, loads: np.ndarray) -> np.ndarray: ...

    def propagate(self, u: np.ndarray, b: np.ndarray, mass: np.ndarray, loads: np.ndarray) -> np.ndarray: ...


def all_to_all(fabric: AllToAllFabric, groups: np.ndarray, weight: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Every group's all-to-all at once (each rank sends ``weight`` to every other rank of its
    group): link loads of all groups, those of the first group, and the longest path latency of
    the first group's flows. None when a cross-domain pair would need the per-pair fallback router
    (GPUs wired straight to each other)."""
    rep = _dense_loads(fabric, groups[:1], weight, latency=True)
    if rep is None:
        return None
    every = rep if len(groups) == 1 else _dense_loads(fabric, groups, weight, latency=False)
    if every is None:
        return None
    return every[0], rep[0], rep[1]


def _dense_loads(fabric: AllToAllFabric, groups: np.ndarray, w: float, latency: bool) -> tuple[np.ndarray, float] | None:
    """Loads of all-to-all in ``groups`` (and, with ``latency``, the longest flow latency)."""
    g, n = groups.shape
    flat = groups.ravel()
    dom = np.where(fabric.local_switch[flat] >= 0, fabric.local_switch[flat], -1 - flat)  # no local switch: own domain
    key = np.repeat(np.arange(g), n) * (len(fabric.nodes) + fabric.num_gpus + 1) + dom + fabric.num_gpus
    order = np.argsort(key, kind="stable")
    members, keys = flat[order], key[order]
    _, start, size = np.unique(keys, return_index=True, return_counts=True)
    per = np.repeat(size, size)  # size of each member's (group, domain) block
    cross = n - per  # peers in other domains: routed over the fabric
    fabric_gpus = members[cross > 0]
    egress, ingress = fabric.egress, fabric.ingress
    if len(fabric_gpus) and ((egress.switch[fabric_gpus, 0] < 0).any() or (ingress.switch[fabric_gpus, 0] < 0).any()):
        return None
    loads = np.zeros(fabric.num_edges)
    local = fabric.local_switch[members] >= 0
    loads += np.bincount(fabric.local_up[members[local]], weights=w * (per[local] - 1), minlength=len(loads))
    loads += np.bincount(fabric.local_down[members[local]], weights=w * (per[local] - 1), minlength=len(loads))
    routed = cross > 0
    out_lat = np.zeros(len(members))
    in_lat = np.zeros(len(members))
    if routed.any():
        out_lat[routed] = fabric.chain_loads(egress, members[routed], w * cross[routed], loads)
        in_lat[routed] = fabric.chain_loads(ingress, members[routed], w * cross[routed], loads)
    src, dst = _block_pairs(members, start, size)
    pair_lat = _dense_fabric(fabric, groups, (src, dst), w, loads)
    if not latency:
        return loads, 0.0
    local_pairs = (src != dst) & (fabric.local_switch[src] >= 0)
    lat = float((fabric.latency[fabric.local_up[src[local_pairs]]]
                 + fabric.latency[fabric.local_down[dst[local_pairs]]]).max(initial=0.0))
    if routed.any():
        lat = max(lat, _cross_latency(fabric, members, keys, routed, out_lat, in_lat, pair_lat))
    return loads, lat


def _block_pairs(members: np.ndarray, start: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (self pairs included) inside each block of ``members``."""
    per = np.repeat(size, size)
    first = np.repeat(start, size)
    src = np.repeat(members, per)
    offs = np.arange(len(src)) - np.repeat(np.cumsum(per) - per, per)
    return src, members[np.repeat(first, per) + offs]


def _switch_pairs(fabric: AllToAllFabric, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For flows src[i] -> dst[i]: flat (exit switch * f + entry switch) index and fraction of
    every (exit, entry) combination, fabric switch indices."""
    f = len(fabric.hops)
    egress, ingress = fabric.egress, fabric.ingress
    idx, frac = [], []
    for i in range(egress.switch.shape[1]):
        for j in range(ingress.switch.shape[1]):
            a, b = egress.switch[src, i], ingress.switch[dst, j]
            ok = (a >= 0) & (b >= 0)
            idx.append(fabric.fabric_index[a[ok]] * f + fabric.fabric_index[b[ok]])
            frac.append(egress.switch_frac[src[ok], i] * ingress.switch_frac[dst[ok], j])
    return np.concatenate(idx), np.concatenate(frac)


def _switch_sums(fabric: AllToAllFabric, tab: ChainTable, groups: np.ndarray) -> np.ndarray:
    """(groups, f): each group's total fraction through every fabric switch."""
    f = len(fabric.hops)
    g, n = groups.shape
    row = np.repeat(np.arange(g), n)
    flat = groups.ravel()
    out = np.zeros(g * f)
    for i in range(tab.switch.shape[1]):
        sw = tab.switch[flat, i]
        ok = sw >= 0
        out += np.bincount(row[ok] * f + fabric.fabric_index[sw[ok]], weights=tab.switch_frac[flat[ok], i], minlength=g * f)
    return out.reshape(g, f)


def _dense_fabric(fabric: AllToAllFabric, groups: np.ndarray, same: tuple[np.ndarray, np.ndarray], w: float,
                  loads: np.ndarray) -> np.ndarray:
    """Fabric loads of every cross-domain pair: w * (all pairs of each group - same-domain pairs),
    summed per (exit switch, entry switch); returns the (f, f) matrix of pair latencies."""
    f = len(fabric.hops)
    if f == 0:
        return np.zeros((0, 0))
    traffic = (_switch_sums(fabric, fabric.egress, groups).T @ _switch_sums(fabric, fabric.ingress, groups)).ravel()
    idx, frac = _switch_pairs(fabric, *same)
    traffic = (traffic - np.bincount(idx, weights=frac, minlength=f * f)).reshape(f, f) * w
    traffic[traffic < w * 1e-9] = 0.0  # same-domain pairs cancelled up to rounding
    np.fill_diagonal(traffic, 0.0)  # exit = entry switch: straight down, no fabric edge
    a, b = np.nonzero(traffic)
    pair_lat = np.zeros((f, f))
    if len(a):
        pair_lat[a, b] = fabric.propagate(a, b, traffic[a, b], loads)
    return pair_lat


def _cross_latency(fabric: AllToAllFabric, members: np.ndarray, keys: np.ndarray, routed: np.ndarray,
                   out_lat: np.ndarray, in_lat: np.ndarray, pair_lat: np.ndarray) -> float:
    """Longest expected latency over cross-domain pairs of one group, by classes of GPUs with the
    same exit (entry) switches, fractions and chain latency."""
    gpus, keys, out_lat, in_lat = members[routed], keys[routed], out_lat[routed], in_lat[routed]
    sides = []
    for tab, chain in ((fabric.egress, out_lat), (fabric.ingress, in_lat)):
        sig = np.column_stack([tab.switch[gpus], tab.switch_frac[gpus], chain])
        classes, inv = np.unique(sig, axis=0, return_inverse=True)
        inv = inv.ravel()
        k = tab.switch.shape[1]
        lo = np.full(len(classes), np.iinfo(np.int64).max)
        hi = np.full(len(classes), np.iinfo(np.int64).min)
        np.minimum.at(lo, inv, keys)
        np.maximum.at(hi, inv, keys)
        sw = classes[:, :k].astype(np.int64)
        sides.append((np.where(sw >= 0, fabric.fabric_index[np.where(sw >= 0, sw, 0)], -1), classes[:, k:2 * k],
                      classes[:, 2 * k], np.where(lo == hi, lo, -1)))
    (sa, fa, la, ka), (sb, fb, lb, kb) = sides
    mid = np.zeros((len(la), len(lb)))
    for i in range(sa.shape[1]):
        for j in range(sb.shape[1]):
            ok = (sa[:, i, None] >= 0) & (sb[None, :, j] >= 0)
            mid += np.where(ok, fa[:, i, None] * fb[None, :, j] * pair_lat[sa[:, i, None].clip(0), sb[None, :, j].clip(0)], 0.0)
    total = la[:, None] + lb[None, :] + mid
    only_same = (ka[:, None] >= 0) & (ka[:, None] == kb[None, :])  # both classes inside one domain
    return float(np.where(only_same, -np.inf, total).max(initial=0.0))
