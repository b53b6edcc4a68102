"""One round of the fabric's per-hop ECMP as (switch x destination) matrices, where it applies.

``Fabric.propagate`` pushes traffic one hop per round: each state (switch u holding traffic for
switch b) splits its mass evenly over u's out-edges on shortest paths to b, and the states that
reach the same (head, b) merge. Expanded state by state, a leaf-to-leaf all-to-all on a 16,384-GPU
fabric makes 2 M (state, uplink) rows in its first round. Owns ``spread``: the same round when
every far state's switch sends over *all* its out-edges (leaf uplinks, where every spine is one
hop closer to every other leaf), done per switch as a row over all destinations: one mass row per
sending switch, one cumulative sum per row for the edge loads, one per head for the merged states.

Bit for bit the round the state-by-state expansion makes (``network.routing``): every sum runs
in the same order (states by key, the direct-edge states first; ``np.cumsum`` adds strictly left
to right as ``np.bincount`` does, and the zeros of absent states change no sum). ``spread``
returns None (the caller expands state by state) when the round does not qualify: keys not
ascending, a far state with an out-edge off every shortest path, parallel fabric edges, or rows
too empty to pay. It owns no tables (``FabricCsr`` is what the fabric lends it) and no latency
model beyond the fabric's own per-edge latencies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPREAD_FILL: int = 8
"""A round is spread by rows when its far states fill at least 1/SPREAD_FILL of the rows'
(switch, destination) cells (a few states are cheaper to expand one by one)."""


@dataclass(frozen=True, kw_only=True)
class FabricCsr:
    """The fabric switch tables a round reads (fabric switch indices, edges sorted by tail)."""

    dist: np.ndarray
    """(f, f) hop counts between fabric switches."""
    ptr: np.ndarray
    """(f + 1,) CSR offsets: switch u's out-edges are ``edge[ptr[u]:ptr[u + 1]]``."""
    edge: np.ndarray
    """Edge ids of the fabric edges, sorted by tail."""
    head: np.ndarray
    """Fabric index of each fabric edge's head, same order."""
    edge_mat: np.ndarray
    """(f, f) edge id of the (tail, head) edge, -1 = none."""
    latency: np.ndarray
    """Per-hop latency (s) of every edge, by edge id."""
    simple: bool
    """No two fabric edges join the same (tail, head)."""


@dataclass(frozen=True, kw_only=True)
class Spread:
    """A round done by rows: what its latency pass needs."""

    keys: np.ndarray
    """The round's states (tail * f + destination), ascending."""
    rows: np.ndarray
    """Sending switches of the far states (hop count > 1), ascending."""
    row_of: np.ndarray
    """Per state: its row in ``rows`` (-1: not a far state)."""
    near: np.ndarray
    """State indices one hop from their destination (they take the direct edge)."""
    near_edge: np.ndarray
    """The direct edge of each of ``near``."""
    next_keys: np.ndarray
    """States of the next round (ascending)."""
    next_mass: np.ndarray
    """Their merged traffic."""


def spread(csr: FabricCsr, keys: np.ndarray, mass: np.ndarray, loads: np.ndarray) -> Spread | None:
    """The round of ``keys`` (with ``mass``) done by rows, its edge loads added to ``loads``; None
    (``loads`` untouched) when the round does not qualify (module docstring)."""
    f = len(csr.dist)
    if not csr.simple or len(keys) == 0 or not bool((keys[1:] > keys[:-1]).all()):
        return None
    tail, dest = np.divmod(keys, f)
    hops = csr.dist[tail, dest]
    far = np.flatnonzero(hops > 1)
    if not len(far):
        return None
    new_row = np.concatenate([[True], tail[far[1:]] != tail[far[:-1]]])  # keys ascending: tails in order
    rows = tail[far[new_row]]
    deg = csr.ptr[rows + 1] - csr.ptr[rows]
    if len(far) * SPREAD_FILL < len(rows) * f or not bool((deg > 0).all()):
        return None
    row_of = np.full(len(keys), -1, dtype=np.int64)
    row_of[far] = np.cumsum(new_row) - 1
    if not bool(_all_closer(csr, rows, deg)[row_of[far], dest[far]].all()):
        return None
    share = np.zeros((len(rows), f))
    share[row_of[far], dest[far]] = mass[far] * (1.0 / deg)[row_of[far]]  # per out-edge: mass / degree
    near = np.flatnonzero(hops == 1)
    near_edge = csr.edge_mat[tail[near], dest[near]]
    _add_loads(csr, rows, deg, share, near, near_edge, mass, tail, loads)
    is_far = np.zeros((len(rows), f), dtype=bool)
    is_far[row_of[far], dest[far]] = True
    next_keys, next_mass = _merge(csr, rows, deg, share, is_far)
    return Spread(keys=keys, rows=rows, row_of=row_of, near=near, near_edge=near_edge,
                  next_keys=next_keys, next_mass=next_mass)


def _out_edges(csr: FabricCsr, rows: np.ndarray, deg: np.ndarray) -> np.ndarray:
    """Positions (into ``csr.edge``) of the out-edges of ``rows``, row by row in CSR order."""
    first: np.ndarray = np.repeat(csr.ptr[rows], deg) - np.repeat(np.cumsum(deg) - deg, deg)
    return first + np.arange(int(deg.sum()))


def _all_closer(csr: FabricCsr, rows: np.ndarray, deg: np.ndarray) -> np.ndarray:
    """(rows, f): every out-edge of the row's switch leads one hop closer to that destination."""
    ok = np.ones((len(rows), len(csr.dist)), dtype=bool)
    for j in range(int(deg.max())):
        sel = np.flatnonzero(deg > j)
        ok[sel] &= csr.dist[csr.head[csr.ptr[rows[sel]] + j]] == csr.dist[rows[sel]] - 1
    return ok


def _add_loads(csr: FabricCsr, rows: np.ndarray, deg: np.ndarray, share: np.ndarray, near: np.ndarray,
               near_edge: np.ndarray, mass: np.ndarray, tail: np.ndarray, loads: np.ndarray) -> None:
    """Each out-edge of a row carries the row's shares summed over destinations in key order; a
    direct-edge state's mass comes first on its edge (the expansion lists those states first)."""
    per_row = np.cumsum(share, axis=1)[:, -1]
    edges = csr.edge[_out_edges(csr, rows, deg)]
    value = np.repeat(per_row, deg)
    row = np.searchsorted(rows, tail[near]).clip(max=max(len(rows) - 1, 0))
    in_rows = rows[row] == tail[near]
    if in_rows.any():
        at = np.full(len(loads), -1, dtype=np.int64)
        at[edges] = np.arange(len(edges))
        first = np.column_stack([mass[near[in_rows]], share[row[in_rows]]])
        value[at[near_edge[in_rows]]] = np.cumsum(first, axis=1)[:, -1]
    loads[edges] += value
    loads[near_edge[~in_rows]] += mass[near[~in_rows]]


def _merge(csr: FabricCsr, rows: np.ndarray, deg: np.ndarray, share: np.ndarray,
           is_far: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """States of the next round and their traffic: (head, destination) sums the shares of the rows
    with an edge to that head, in ascending row order (the keys' order), head = destination dropped."""
    f = len(csr.dist)
    heads = csr.head[_out_edges(csr, rows, deg)]
    tail_row = np.repeat(np.arange(len(rows)), deg)
    order = np.argsort(heads, kind="stable")  # by head, rows ascending within a head
    heads, tail_row = heads[order], tail_row[order]
    uniq, start, count = np.unique(heads, return_index=True, return_counts=True)
    rank = np.arange(len(heads)) - np.repeat(start, count)
    slot = np.repeat(np.arange(len(uniq)), count)
    total = np.zeros((len(uniq), f))
    reached = np.zeros((len(uniq), f), dtype=bool)
    for k in range(int(count.max())):  # k-th row into each head: one add per head and destination
        sel = np.flatnonzero(rank == k)
        total[slot[sel]] += share[tail_row[sel]]
        reached[slot[sel]] |= is_far[tail_row[sel]]
    reached[np.arange(len(uniq)), uniq] = False  # arrived: no further hop
    keys = (uniq[:, None] * f + np.arange(f)[None, :])[reached]
    return keys, total[reached]


def latency(csr: FabricCsr, rnd: Spread, known: np.ndarray) -> np.ndarray:
    """Expected latency of each of ``rnd.keys`` to its destination, given ``known`` ((f, f)
    latencies of the next round's states, zero on the diagonal): per far state the out-edges in
    CSR order, each 1/degree * (edge latency + the head's latency); a direct-edge state its edge's."""
    f = len(csr.dist)
    deg = csr.ptr[rnd.rows + 1] - csr.ptr[rnd.rows]
    frac = 1.0 / deg
    per = np.zeros((len(rnd.rows), f))
    for j in range(int(deg.max(initial=0))):
        sel = np.flatnonzero(deg > j)
        at = csr.ptr[rnd.rows[sel]] + j
        per[sel] += frac[sel, None] * (csr.latency[csr.edge[at]][:, None] + known[csr.head[at]])
    out = np.zeros(len(rnd.keys))
    far = rnd.row_of >= 0
    out[far] = per[rnd.row_of[far], rnd.keys[far] % f]
    out[rnd.near] = csr.latency[rnd.near_edge]
    return out
