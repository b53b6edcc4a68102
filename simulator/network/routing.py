"""Routing tables of one cluster graph: which links a GPU -> GPU flow crosses, and how much.

Owns ``Fabric`` (capacities, latencies, per-GPU NIC chains, all-pairs hop counts between fabric
switches, and the vectorised link loads of many flows at once: the traffic of every (source
switch, destination switch) pair is pushed one hop per round along its equal-cost next hops;
``Fabric.all_to_all`` hands the all-to-all of whole groups to ``network.alltoall``, which works
from sums per (group, domain) and per switch instead of n^2 flows), ``fabric_for`` (its memo per graph and
profile) and ``fabric_of`` (per cluster: from the cluster's columns, ``topologies.graph.Wiring``,
so preset clusters never build a networkx graph). It does not share bandwidth over time
(``clustersim.simulator.network.flows``) nor know collectives (``clustersim.simulator.network.collectives``).

Routing model:
- Inside an NVLink domain (or a PCIe server) a flow goes GPU -> local switch -> GPU.
- Between domains a flow leaves through the source GPU's own NIC chain (NCCL's default: each GPU
  uses its nearest NIC, no PXN detour over NVLink), crosses the switch fabric (kinds leaf, spine,
  core, router) on hop-count shortest paths, and enters through the destination GPU's NIC.
- Equal-cost paths are split per hop: every switch divides a flow evenly over its next hops on
  shortest paths (ECMP with ideal spraying / adaptive routing). A flow keeps one rate; link ``l``
  carries the fraction ``a[f, l]`` of it. With ``profile.ecmp_routing = "hash"`` the pricing
  raises the edge-tier links to the busiest hashed port's load (``network.ecmp``).
- Graphs outside these shapes (GPUs wired straight to each other) fall back to the same per-hop
  ECMP on the whole graph, computed per pair (slow, for small graphs only).
Capacities are ``bandwidth * profile.link_eff(link_class)``; per-hop latency is the edge
``latency`` unless ``profile.link_latency`` names the link class.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network import alltoall, spread
from clustersim.topologies.graph import Wiring

if TYPE_CHECKING:  # the graph is built only for the per-pair fallback router
    import networkx as nx

FABRIC_KINDS: frozenset[str] = frozenset({"leaf", "spine", "core", "router"})
"""Node kinds of the scale-out switch fabric (routed on shortest paths with ECMP)."""
LOCAL_SWITCH_KINDS: frozenset[str] = frozenset({"nvswitch", "pcie"})
"""Node kinds that join the GPUs of one domain or server."""
_GPU, _LOCAL, _NIC, _FABRIC = 1, 2, 3, 4
_CODES: Mapping[str, int] = {"gpu": _GPU, "nvswitch": _LOCAL, "pcie": _LOCAL, "nic": _NIC,
                             **{k: _FABRIC for k in FABRIC_KINDS}}
"""Integer codes of node kinds for vectorised table building."""
_TINY: float = 1e-12
"""Loads below this are treated as zero when reading one route back."""
DENSE_STATES: int = 1 << 21
"""Largest (switch, destination) state space merged by counting rather than sorting (floats: 16 MiB)."""
DENSE_FILL: int = 64
"""Counting is used when the pairs pushed fill at least 1/DENSE_FILL of that state space (a few
pairs are cheaper to sort than an f x f count is to clear)."""


SPARSE: int = 8
"""``add_at`` sums over the indices it is given, not over every link, when they are fewer than
1 / SPARSE of the links (a stage's groups on a 16,384-GPU fabric touch a small part of it)."""


def add_at(out: np.ndarray, index: np.ndarray, weights: np.ndarray) -> None:
    """``out += np.bincount(index, weights, minlength=len(out))``, bit for bit (each bin sums its
    weights in input order either way), without a pass over all of ``out`` when ``index`` is short."""
    if len(index) * SPARSE >= len(out):
        out += np.bincount(index, weights=weights, minlength=len(out))
        return
    used, inv = np.unique(index, return_inverse=True)
    out[used] += np.bincount(inv.ravel(), weights=weights, minlength=len(used))


_Round = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""A round expanded state by state: its keys, (state, edge) rows, their fractions and heads."""


def _first_known(keys: np.ndarray, lat: np.ndarray, f: int) -> np.ndarray:
    """(f, f) table of the sorted ``keys`` (-1 first: none) -> ``lat``, a key's first entry where it
    repeats (what ``searchsorted`` finds), zero on the diagonal (head = destination: arrived)."""
    uniq, first = np.unique(keys, return_index=True)
    flat = np.zeros(f * f)
    flat[uniq[uniq >= 0]] = lat[first[uniq >= 0]]
    table = flat.reshape(f, f)
    np.fill_diagonal(table, 0.0)
    return table


@dataclass(frozen=True, kw_only=True)
class _Egress:
    """Padded per-GPU tables of the path GPU -> NIC(s) -> fabric switch(es) (or the reverse)."""

    edges: np.ndarray
    """(num_gpus, J) edge indices, -1 = padding."""
    edge_frac: np.ndarray
    """(num_gpus, J) fraction of the GPU's traffic on that edge."""
    switch: np.ndarray
    """(num_gpus, K) fabric switch node ids where the path meets the fabric, -1 = none."""
    switch_frac: np.ndarray
    """(num_gpus, K) fraction of the GPU's traffic through that switch."""


class Fabric:
    """Routing tables, capacities and latencies of one graph under one profile.

    Immutable from the outside; it memoises shortest-path DAGs per destination switch and
    fallback routes per pair in private dictionaries (a cache, not state: results never change).
    """

    def __init__(self, graph: nx.DiGraph | Wiring, profile: CalibrationProfile,
                 source: Callable[[], nx.DiGraph] | None = None) -> None:
        """Tables of ``graph``, given as a networkx graph or in columns (``Wiring``; then
        ``source`` builds the networkx graph if the per-pair fallback router ever needs it)."""
        self._graph: nx.DiGraph | None = None if isinstance(graph, Wiring) else graph
        self._source: Callable[[], nx.DiGraph] | None = None
        if isinstance(graph, Wiring):
            wiring, self._source = graph, source or graph.to_digraph
        else:
            wiring = Wiring.from_graph(graph)
        self.nodes: list[str] = [n for n, _ in wiring.nodes]
        self.node_id: dict[str, int] = {n: i for i, n in enumerate(self.nodes)}
        self.kind: list[str] = [d.get("kind", "") for _, d in wiring.nodes]
        self.reduces: np.ndarray = np.array([bool(d.get("in_network_reduction")) for _, d in wiring.nodes])
        """Per node: the switch reduces in-network (NVLS / SHARP)."""
        self.src_of = wiring.src
        self.dst_of = wiring.dst
        self.num_edges: int = len(wiring.src)
        self.link_class: np.ndarray = wiring.link_class
        self.bandwidth = wiring.bandwidth
        classes, inv = np.unique(wiring.link_class, return_inverse=True)
        eff = np.array([profile.link_eff(str(c)) for c in classes])[inv.ravel()]
        self.capacity: np.ndarray = self.bandwidth * eff
        self.ecmp_hashing: bool = profile.ecmp_routing == "hash"
        """Flows are pinned to one equal-cost uplink each (``network.ecmp`` prices the collisions)."""
        override = np.array([profile.link_latency.get(str(c), np.nan) for c in classes])[inv.ravel()]
        self.latency: np.ndarray = np.where(np.isnan(override), wiring.latency, override)
        self._code = np.array([_CODES.get(k, 0) for k in self.kind], dtype=np.int8)
        self.num_gpus: int = int(np.count_nonzero(self._code == _GPU))
        self.gpu_node = np.array([self.node_id[f"gpu{i}"] for i in range(self.num_gpus)], dtype=np.int64)
        self._gpu_of = np.full(len(self.nodes), -1, dtype=np.int64)
        self._gpu_of[self.gpu_node] = np.arange(self.num_gpus)
        self._local_tables()
        self.egress = self._walk_tables(out=True)
        self.ingress = self._walk_tables(out=False)
        self._dist: np.ndarray | None = None
        self._fabric_dist()
        self._fallback: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._edges: list[tuple[str, str]] | None = None
        self._edge_id: dict[tuple[str, str], int] | None = None
        self.memo: dict[tuple[object, ...], object] = {}
        """Size-independent results of callers (collective cost patterns), keyed by their inputs."""

    @property
    def graph(self) -> nx.DiGraph:
        """The networkx graph (built from the columns on first use)."""
        if self._graph is None:
            assert self._source is not None, "a Fabric holds a graph or a way to build it"
            self._graph = self._source()
        return self._graph

    @property
    def edges(self) -> list[tuple[str, str]]:
        """(tail, head) names per directed edge, in edge-id order (built on first use)."""
        if self._edges is None:
            self._edges = [(self.nodes[u], self.nodes[v]) for u, v in zip(self.src_of.tolist(), self.dst_of.tolist())]
        return self._edges

    @property
    def edge_id(self) -> dict[tuple[str, str], int]:
        """Edge id of each (tail, head) name pair (built on first use)."""
        if self._edge_id is None:
            self._edge_id = {e: i for i, e in enumerate(self.edges)}
        return self._edge_id

    def _local_tables(self) -> None:
        """Per GPU: its single local switch and the up/down edges (-1 when none or ambiguous)."""
        n = self.num_gpus
        self.local_switch = np.full(n, -1, dtype=np.int64)
        self.local_up = np.full(n, -1, dtype=np.int64)
        self.local_down = np.full(n, -1, dtype=np.int64)
        up = np.flatnonzero((self._code[self.src_of] == _GPU) & (self._code[self.dst_of] == _LOCAL))
        g = self._gpu_of[self.src_of[up]]
        single = np.bincount(g, minlength=n)[g] == 1
        up, g = up[single], g[single]
        self.local_up[g] = up
        self.local_switch[g] = self.dst_of[up]
        down = np.flatnonzero((self._code[self.src_of] == _LOCAL) & (self._code[self.dst_of] == _GPU))
        n = len(self.nodes)
        keys = self.src_of[down] * n + self.dst_of[down]
        order = np.argsort(keys, kind="stable")
        want = self.dst_of[up] * n + self.gpu_node[g]  # switch -> GPU, the reverse of each up edge
        self.local_down[g] = down[order[np.searchsorted(keys[order], want)]]

    def _walk_tables(self, out: bool) -> _Egress:
        """GPU -> NIC -> fabric switch chains (``out``) or their reverse, vectorised over GPUs."""
        near, far = (self.src_of, self.dst_of) if out else (self.dst_of, self.src_of)
        c_near, c_far = self._code[near], self._code[far]
        e1 = np.flatnonzero((c_near == _GPU) & ((c_far == _NIC) | (c_far == _FABRIC)))
        e2 = np.flatnonzero((c_near == _NIC) & (c_far == _FABRIC))
        g1 = self._gpu_of[near[e1]]
        f1 = 1.0 / np.bincount(g1, minlength=self.num_gpus)[g1]
        e2 = e2[np.argsort(near[e2], kind="stable")]
        ptr = np.searchsorted(near[e2], np.arange(len(self.nodes) + 1))
        count = np.where(c_far[e1] == _NIC, ptr[far[e1] + 1] - ptr[far[e1]], 0)
        rep = np.repeat(np.arange(len(e1)), count)
        offs = np.arange(len(rep)) - np.repeat(np.cumsum(count) - count, count)
        e2x = e2[ptr[far[e1]][rep] + offs]
        f2 = f1[rep] / count[rep]
        edges = np.concatenate([e1, e2x])
        gpus = np.concatenate([g1, g1[rep]])
        fracs = np.concatenate([f1, f2])
        to_fabric = self._code[far[edges]] == _FABRIC
        return _Egress(
            edges=self._pad(gpus, edges, -1), edge_frac=self._pad(gpus, fracs, 0.0),
            switch=self._pad(gpus[to_fabric], far[edges][to_fabric], -1),
            switch_frac=self._pad(gpus[to_fabric], fracs[to_fabric], 0.0),
        )

    def _pad(self, rows: np.ndarray, values: np.ndarray, fill: float) -> np.ndarray:
        """A (num_gpus, width) table holding ``values`` row by row (``fill`` elsewhere)."""
        order = np.argsort(rows, kind="stable")
        rows, values = rows[order], values[order]
        start = np.searchsorted(rows, np.arange(self.num_gpus))
        col = np.arange(len(rows)) - start[rows]
        width = int(col.max(initial=0)) + 1
        table = np.full((self.num_gpus, width), fill, dtype=np.int64 if isinstance(fill, int) else float)
        table[rows, col] = values
        return table

    def edge_name(self, e: int) -> str:
        """``"u->v"`` name of directed edge ``e`` (without building the list of every edge's names)."""
        return f"{self.nodes[int(self.src_of[e])]}->{self.nodes[int(self.dst_of[e])]}"

    def _fabric_dist(self) -> np.ndarray:
        """Hop distances between fabric switches (breadth-first from every switch at once, one
        frontier matrix per hop); rows/columns follow ``self.fabric_index``; unreachable = 10**6.
        Also builds the fabric edge lists sorted by tail (CSR) and the (tail, head) -> edge matrix."""
        if self._dist is None:
            ids = np.flatnonzero(self._code == _FABRIC).astype(np.int64)
            self.fabric_index = np.full(len(self.nodes), -1, dtype=np.int64)
            self.fabric_index[ids] = np.arange(len(ids))
            fe = np.flatnonzero((self.fabric_index[self.src_of] >= 0) & (self.fabric_index[self.dst_of] >= 0))
            self._fe = fe[np.argsort(self.fabric_index[self.src_of[fe]], kind="stable")]  # sorted by tail
            self._fe_src = self.fabric_index[self.src_of[self._fe]]
            self._fe_dst = self.fabric_index[self.dst_of[self._fe]]
            self._fe_ptr = np.searchsorted(self._fe_src, np.arange(len(ids) + 1))
            self._edge_mat = np.full((len(ids), len(ids)), -1, dtype=np.int64)
            self._edge_mat[self._fe_src, self._fe_dst] = self._fe
            self._dist = self._bfs_all(len(ids))
            pairs = np.sort(self._fe_src * len(ids) + self._fe_dst, kind="stable")  # not np.unique: it imports numpy.ma
            simple = not bool((pairs[1:] == pairs[:-1]).any())
            self._csr = spread.FabricCsr(dist=self._dist, ptr=self._fe_ptr, edge=self._fe, head=self._fe_dst,
                                         edge_mat=self._edge_mat, latency=self.latency, simple=simple)
        return self._dist

    @property
    def hops(self) -> np.ndarray:
        """(f, f) hop counts between fabric switches (``fabric_index`` order; unreachable 10**6)."""
        return self._fabric_dist()

    def _bfs_all(self, n: int) -> np.ndarray:
        """All-pairs hop counts over the fabric edges: row = source switch, column = target."""
        by_head = np.argsort(self._fe_dst, kind="stable")
        tails, heads = self._fe_src[by_head], self._fe_dst[by_head]
        has_in, starts = np.unique(heads, return_index=True)
        dist = np.where(np.eye(n, dtype=bool), 0, 10**6).astype(np.int64)
        seen = np.eye(n, dtype=bool)
        frontier = seen.copy()
        for hop in range(1, n):
            if not len(tails):
                break
            new = np.zeros((n, n), dtype=bool)
            new[:, has_in] = np.logical_or.reduceat(frontier[:, tails], starts, axis=1)
            new &= ~seen
            if not new.any():
                break
            dist[new] = hop
            seen |= new
            frontier = new
        return dist

    def _next_hops(self, u: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For states (switch u[i] holding traffic for switch b[i]): (state index, edge id) of every
        out-edge of u[i] on a shortest path to b[i]. One hop away: the direct edge (matrix lookup);
        farther: the out-edges whose head is one hop closer (CSR expansion)."""
        dist = self._dist
        assert dist is not None
        h = dist[u, b]
        near = np.flatnonzero(h == 1)
        far = np.flatnonzero(h > 1)
        count = self._fe_ptr[u[far] + 1] - self._fe_ptr[u[far]]
        state = np.repeat(far, count)
        idx = np.repeat(self._fe_ptr[u[far]] - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        keep = dist[self._fe_dst[idx], b[state]] == h[state] - 1
        return (np.concatenate([near, state[keep]]),
                np.concatenate([self._edge_mat[u[near], b[near]], self._fe[idx[keep]]]))

    def propagate(self, u: np.ndarray, b: np.ndarray, mass: np.ndarray, loads: np.ndarray) -> np.ndarray:
        """Push ``mass`` from fabric switch u[i] to b[i] (distinct pairs, all at once, one hop per
        round, merging equal (switch, destination) states); add edge loads; return each pair's
        expected path latency (ECMP-averaged). States are merged by counting into the f x f state
        space when it is small and the pairs fill enough of it (same order and sums as sorting them,
        without the sort). A round whose far states all send over every out-edge of their switch
        (leaf uplinks) is done by rows instead of state by state (``network.spread``: same sums in
        the same order) when that state space is small."""
        f = len(self._dist)  # type: ignore[arg-type]  # the all-pairs BFS ran in __init__ (None only before it)
        dense = f * f <= DENSE_STATES and len(u) * DENSE_FILL >= f * f
        by_rows = f * f <= DENSE_STATES
        rounds: list[_Round | spread.Spread] = []
        keys, m = u * f + b, mass
        while len(keys):
            done = spread.spread(self._csr, keys, m, loads) if by_rows else None
            if done is not None:
                rounds.append(done)
                keys, m = done.next_keys, done.next_mass
                continue
            cu, cb = keys // f, keys % f
            st, e = self._next_hops(cu, cb)
            frac = 1.0 / np.bincount(st, minlength=len(keys))[st]
            flow = m[st] * frac
            add_at(loads, e, flow)
            heads = self.fabric_index[self.dst_of[e]] * f + cb[st]
            rounds.append((keys, st, e, frac, heads))
            live = heads // f != heads % f
            if dense:
                keys = np.flatnonzero(np.bincount(heads[live], minlength=f * f))
                m = np.bincount(heads[live], weights=flow[live], minlength=f * f)[keys]
            else:
                keys, inv = np.unique(heads[live], return_inverse=True)
                m = np.bincount(inv, weights=flow[live], minlength=len(keys))
        if dense:
            return self._latencies_dense(rounds, u * f + b, f)
        known_k, known_l = np.full(1, -1, dtype=np.int64), np.zeros(1)  # sorted keys -> latency to b
        for rnd in reversed(rounds):  # nearest round first: heads are known
            if isinstance(rnd, spread.Spread):
                keys, lat = rnd.keys, spread.latency(self._csr, rnd, _first_known(known_k, known_l, f))
            else:
                keys, st, e, frac, heads = rnd
                child = np.where(heads // f != heads % f, known_l[np.searchsorted(known_k, heads).clip(max=len(known_k) - 1)], 0.0)
                lat = np.bincount(st, weights=frac * (self.latency[e] + child), minlength=len(keys))
            order = np.argsort(np.concatenate([known_k, keys]), kind="stable")
            known_k, known_l = np.concatenate([known_k, keys])[order], np.concatenate([known_l, lat])[order]
        start = np.searchsorted(known_k, u * f + b).clip(max=len(known_k) - 1)
        return np.where(u != b, known_l[start], 0.0)

    def _latencies_dense(self, rounds: list[_Round | spread.Spread], pairs: np.ndarray, f: int) -> np.ndarray:
        """Expected latency of each state to its destination, nearest round first, in an f x f table
        (a state met in two rounds gets the same value twice)."""
        known = np.zeros(f * f)
        for rnd in reversed(rounds):
            if isinstance(rnd, spread.Spread):
                table = known.reshape(f, f).copy()
                np.fill_diagonal(table, 0.0)  # head = destination: arrived
                known[rnd.keys] = spread.latency(self._csr, rnd, table)
                continue
            keys, st, e, frac, heads = rnd
            child = np.where(heads // f != heads % f, known[heads], 0.0)
            known[keys] = np.bincount(st, weights=frac * (self.latency[e] + child), minlength=len(keys))
        return np.where(pairs // f != pairs % f, known[pairs], 0.0)

    def loads(self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes per directed edge when GPU ``src[i]`` sends ``weight[i]`` bytes to ``dst[i]``, all
        flows at once; and each flow's expected path latency (s)."""
        loads = np.zeros(self.num_edges)
        lat = np.zeros(len(src))
        same_dom = (self.local_switch[src] == self.local_switch[dst]) & (self.local_switch[src] >= 0) & (src != dst)
        self._local_loads(src[same_dom], dst[same_dom], weight[same_dom], loads, lat, same_dom)
        rest = ~same_dom & (src != dst)
        routed = rest & (self.egress.switch[src, 0] >= 0) & (self.ingress.switch[dst, 0] >= 0)
        self._fabric_loads(src[routed], dst[routed], weight[routed], loads, lat, routed)
        for i in np.flatnonzero(rest & ~routed):
            edges, frac = self._fallback_route(int(src[i]), int(dst[i]))
            loads[edges] += frac * weight[i]
            lat[i] = float(np.sum(frac * self.latency[edges]))
        return loads, lat

    def _local_loads(self, s: np.ndarray, d: np.ndarray, w: np.ndarray, loads: np.ndarray,
                     lat: np.ndarray, mask: np.ndarray) -> None:
        add_at(loads, self.local_up[s], w)
        add_at(loads, self.local_down[d], w)
        lat[mask] = self.latency[self.local_up[s]] + self.latency[self.local_down[d]]

    def chain_loads(self, tab: alltoall.ChainTable, g: np.ndarray, w: np.ndarray, loads: np.ndarray) -> np.ndarray:
        """Add the NIC-chain loads of GPUs ``g``; returns their expected chain latency."""
        e, f = tab.edges[g], tab.edge_frac[g]
        ok = e >= 0
        add_at(loads, e[ok], (f * w[:, None])[ok])
        chain: np.ndarray = np.where(ok, f * self.latency[np.where(ok, e, 0)], 0.0).sum(axis=1)
        return chain

    def _fabric_loads(self, s: np.ndarray, d: np.ndarray, w: np.ndarray, loads: np.ndarray,
                      lat: np.ndarray, mask: np.ndarray) -> None:
        if len(s) == 0:
            return
        lat_flow = self.chain_loads(self.egress, s, w, loads) + self.chain_loads(self.ingress, d, w, loads)
        ks, kd = self.egress.switch.shape[1], self.ingress.switch.shape[1]
        a = np.repeat(self.egress.switch[s], kd, axis=1).ravel()
        b = np.tile(self.ingress.switch[d], (1, ks)).ravel()
        fa = np.repeat(self.egress.switch_frac[s], kd, axis=1)
        fb = np.tile(self.ingress.switch_frac[d], (1, ks))
        pw = (fa * fb * w[:, None]).ravel()
        flow_of = np.repeat(np.arange(len(s)), ks * kd)
        ok = (a >= 0) & (b >= 0) & (pw > 0)
        a, b, pw, flow_of = a[ok], b[ok], pw[ok], flow_of[ok]
        self._fabric_dist()
        f = len(self._dist)  # type: ignore[arg-type]  # the all-pairs BFS ran in __init__ (None only before it)
        pairs, inv = np.unique(self.fabric_index[a] * f + self.fabric_index[b], return_inverse=True)
        pair_lat = self.propagate(pairs // f, pairs % f, np.bincount(inv, weights=pw), loads)
        lat_flow += np.bincount(flow_of, weights=pw / w[flow_of] * pair_lat[inv], minlength=len(s))
        lat[mask] = lat_flow

    def all_to_all(self, groups: np.ndarray, weight: float) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Every group's all-to-all at once (each rank sends ``weight`` to every other rank of its
        group): link loads of all groups, those of the first group, and the longest path latency of
        the first group's flows (``clustersim.simulator.network.alltoall``: sums per (group, domain)
        and per switch, never per pair). None when a pair would need the per-pair fallback router."""
        return alltoall.all_to_all(self, groups, weight)

    def _fallback_route(self, s: int, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-hop ECMP over the whole graph between GPUs ``s`` and ``d`` (small graphs only)."""
        if (s, d) not in self._fallback:
            src, dst = f"gpu{s}", f"gpu{d}"
            import networkx as nx  # the fallback router walks the graph itself

            dist = nx.single_target_shortest_path_length(self.graph, dst)
            dist = dict(dist)
            mass: dict[str, float] = {src: 1.0}
            edges: dict[int, float] = {}
            for level in range(dist[src], 0, -1):
                nxt: dict[str, float] = {}
                for u, m in mass.items():
                    hops = [v for v in self.graph.successors(u) if dist.get(v, -1) == level - 1]
                    for v in hops:
                        e = self.edge_id[(u, v)]
                        edges[e] = edges.get(e, 0.0) + m / len(hops)
                        nxt[v] = nxt.get(v, 0.0) + m / len(hops)
                mass = nxt
            self._fallback[(s, d)] = (np.array(list(edges), dtype=np.int64), np.array(list(edges.values())))
        return self._fallback[(s, d)]

    def route(self, src: int, dst: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Edge ids, fractions and expected latency (s) of one GPU -> GPU flow."""
        loads, lat = self.loads(np.array([src]), np.array([dst]), np.array([1.0]))
        edges = np.flatnonzero(loads > _TINY)
        return edges, loads[edges], float(lat[0])


@dataclass(frozen=True, eq=False)
class _ByIdentity:
    """Hash a graph by identity so a memo can key on it (graphs are never mutated once built)."""

    obj: object
    """The wrapped object."""

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ByIdentity) and other.obj is self.obj


@lru_cache(maxsize=4)
def _fabric_memo(graph: _ByIdentity, profile_json: str) -> Fabric:
    return Fabric(graph.obj, CalibrationProfile.model_validate_json(profile_json))


def fabric_for(graph: nx.DiGraph, profile: CalibrationProfile) -> Fabric:
    """The (memoised) ``Fabric`` of ``graph`` under ``profile``; the graph must not change later."""
    return _fabric_memo(_ByIdentity(graph), profile.model_dump_json())


@lru_cache(maxsize=4)
def _cluster_memo(cluster: _ByIdentity, profile_json: str) -> Fabric:
    c = cluster.obj
    return Fabric(c.wiring, CalibrationProfile.model_validate_json(profile_json), source=lambda: c.graph)  # type: ignore[attr-defined]  # obj is a Cluster (has wiring and graph)


def fabric_of(cluster: object, profile: CalibrationProfile) -> Fabric:
    """The (memoised) ``Fabric`` of a ``Cluster``: from its columns when it has them (no networkx
    graph is built), else from its graph."""
    if getattr(cluster, "wiring", None) is not None:
        return _cluster_memo(_ByIdentity(cluster), profile.model_dump_json())
    return fabric_for(cluster.graph, profile)  # type: ignore[attr-defined]  # a Cluster without columns has a graph
