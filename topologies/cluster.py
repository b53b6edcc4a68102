"""The ``Cluster``: one accelerator model wired by one graph, and the check that the graph is sound.

Owns the ``Cluster`` record (docs/ARCHITECTURE.md "topologies/cluster.py") and
``validate_cluster``, which enforces the graph contract of ``topologies.graph``: every GPU present
with its attributes, every edge with a positive bandwidth, a latency and a known link class, every
link in both directions, every node reachable, on the columns (``Wiring``) with numpy. A preset
cluster holds only its ``Wiring``; ``Cluster.graph`` builds the ``networkx.DiGraph`` on first
access (custom topologies, fabric reports, drawing) and keeps it. It does not build graphs
(``topologies.fabrics``) nor choose presets (``topologies.presets``).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from clustersim.topologies.accelerators import AcceleratorSpec
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.graph import LINK_CLASSES, NODE_KINDS, SWITCH_KINDS, Wiring, gpu_name

if TYPE_CHECKING:  # networkx loads when a graph is built
    import networkx as nx


class _Unbuilt:
    """Default of ``Cluster.graph``: build it from ``wiring`` when first read."""


def _unbuilt() -> Any:
    return _Unbuilt()


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A cluster as the simulator sees it: devices, how they are wired, what they cost."""

    name: str
    """Preset or user name, e.g. ``"dgx-h100"``."""
    accelerator: AcceleratorSpec
    """The (uniform) device model."""
    num_gpus: int
    """Number of devices, ``gpu0 .. gpu{num_gpus-1}`` in the graph."""
    gpus_per_node: int
    """Devices per server (consecutive indices)."""
    graph: nx.DiGraph = field(default_factory=_unbuilt, hash=False, compare=False, repr=False)
    """The wiring, per the graph contract (``topologies.graph``); built from ``wiring`` on first
    access when the cluster was made from columns."""
    fabric: str
    """Name of the builder that made ``graph`` (``fat_tree``, ``rail_optimized``, ...)."""
    params: Mapping[str, object] = field(default_factory=dict, hash=False)
    """Builder parameters in SI units, for provenance and analytic fast paths."""
    nic_bandwidth: float
    """Scale-out bandwidth per GPU per direction (bytes/s); 0 when there is no scale-out network."""
    nvlink_domain_size: int
    """Devices per NVLink domain (8 for DGX, 72 for NVL72; the last domain may be partial)."""
    cost_per_gpu_hour: float = 0.0
    """Price of one device-hour in the user's currency (0 = unknown)."""
    wiring: Wiring | None = field(default=None, hash=False, compare=False, repr=False)
    """The same graph in columns (preset clusters); what routing and validation read."""

    def __post_init__(self) -> None:
        if isinstance(self.__dict__.get("graph"), _Unbuilt):
            if self.wiring is None:
                raise TopologyError(f"cluster {self.name!r} needs a graph or a wiring")
            object.__delattr__(self, "graph")  # __getattr__ builds it on first read

    def __getattr__(self, name: str) -> Any:
        if name != "graph" or "wiring" not in self.__dict__:
            raise AttributeError(name)
        graph = self.wiring.to_digraph()  # type: ignore[union-attr]  # wiring is in __dict__ (checked above)
        object.__setattr__(self, "graph", graph)
        return graph

    def columns(self) -> Wiring:
        """The wiring in columns (converted from the graph once for clusters built from a graph)."""
        if self.wiring is None:
            object.__setattr__(self, "wiring", Wiring.from_graph(self.graph))
        return self.wiring  # type: ignore[return-value]  # set just above when it was None

    def gpu(self, i: int) -> str:
        """Graph node name of device ``i``."""
        if not 0 <= i < self.num_gpus:
            raise TopologyError(f"device index {i} is outside 0..{self.num_gpus - 1} of cluster {self.name!r}")
        return gpu_name(i)

    @property
    def num_nodes(self) -> int:
        """Number of servers."""
        return self.num_gpus // self.gpus_per_node


def _check_counts(cluster: Cluster, wiring: Wiring) -> None:
    for name in ("num_gpus", "gpus_per_node", "nvlink_domain_size"):
        value = getattr(cluster, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TopologyError(f"cluster {cluster.name!r}: {name} = {value!r} must be an integer")
    if cluster.num_gpus < 1 or cluster.gpus_per_node < 1 or cluster.num_gpus % cluster.gpus_per_node:
        raise TopologyError(
            f"num_gpus = {cluster.num_gpus} must be a positive multiple of gpus_per_node = {cluster.gpus_per_node}"
        )
    gpus = sum(1 for _, attrs in wiring.nodes if attrs.get("kind") == "gpu")
    if gpus != cluster.num_gpus:
        raise TopologyError(
            f"cluster {cluster.name!r}: graph has {gpus} gpu nodes but num_gpus = {cluster.num_gpus}; "
            "rebuild the graph for num_gpus devices"
        )


def _check_nodes(cluster: Cluster, wiring: Wiring) -> None:
    g = cluster.gpus_per_node
    nodes = dict(wiring.nodes)
    for i in range(cluster.num_gpus):
        attrs = nodes.get(gpu_name(i))
        got = None if attrs is None else (attrs.get("kind"), attrs.get("rank_slot"), attrs.get("server"), attrs.get("local"))
        if got != ("gpu", i, i // g, i % g):
            want = {"kind": "gpu", "rank_slot": i, "server": i // g, "local": i % g}
            raise TopologyError(f"cluster {cluster.name!r}: node {gpu_name(i)} must exist with {want}, got {attrs}")
    for name, attrs in wiring.nodes:
        kind = attrs.get("kind")
        if kind not in NODE_KINDS:
            raise TopologyError(f"node {name!r} has kind {kind!r}; use one of {sorted(NODE_KINDS)}")
        if kind in SWITCH_KINDS and "in_network_reduction" not in attrs:
            raise TopologyError(f"switch node {name!r} lacks in_network_reduction; set it True or False")


def _check_edge(u: str, v: str, attrs: dict[str, object]) -> None:
    bw, lat, cls = attrs.get("bandwidth"), attrs.get("latency"), attrs.get("link_class")
    if bw is None or lat is None or cls is None:
        raise TopologyError(f"edge {u}->{v} lacks bandwidth/latency/link_class; got {attrs}")
    if (not isinstance(bw, (int, float)) or not isinstance(lat, (int, float))
            or not 0 < bw < math.inf or not 0 <= lat < math.inf):
        raise TopologyError(f"edge {u}->{v}: bandwidth = {bw} must be > 0 and finite (bytes/s), "
                            f"latency = {lat} >= 0 and finite (s); fix the link")
    raise TopologyError(f"edge {u}->{v}: link_class {cls!r} unknown; use one of {sorted(LINK_CLASSES)}")


def _missing_as_none(value: Any) -> Any:
    """A column's stand-in for a missing attribute (NaN, empty class) as None, else a plain value."""
    if isinstance(value, (float, np.floating)):
        return None if np.isnan(value) else float(value)
    return str(value) if value != "" else None


def _check_edges(cluster: Cluster, wiring: Wiring) -> None:
    """Every edge well formed and paired with its reverse (vectorised; details only on failure)."""
    names = [n for n, _ in wiring.nodes]
    known = np.zeros(len(wiring.link_class), dtype=bool)
    for cls in LINK_CLASSES:
        known |= wiring.link_class == cls
    bw, lat = wiring.bandwidth, wiring.latency
    ok = known & (bw > 0) & (bw < math.inf) & (lat >= 0) & (lat < math.inf)  # NaN (missing) fails both
    if not ok.all():
        e = int(np.flatnonzero(~ok)[0])
        u, v = names[wiring.src[e]], names[wiring.dst[e]]
        if "graph" in vars(cluster):  # a user's graph: report its own attributes (missing vs NaN)
            _check_edge(u, v, dict(cluster.graph.edges[u, v]))
        attrs = {"bandwidth": wiring.bandwidth[e], "latency": wiring.latency[e], "link_class": wiring.link_class[e]}
        _check_edge(u, v, {k: _missing_as_none(val) for k, val in attrs.items()})
    n = len(names)
    forward = np.sort(wiring.src * n + wiring.dst, kind="stable")  # the same values; radix-friendly, 4x faster here
    reverse = wiring.dst * n + wiring.src
    paired = forward[np.searchsorted(forward, reverse).clip(max=len(forward) - 1)] == reverse
    if not paired.all():
        e = int(np.flatnonzero(~paired)[0])
        u, v = names[wiring.src[e]], names[wiring.dst[e]]
        raise TopologyError(f"edge {u}->{v} has no reverse edge; add {v}->{u} (links are two directed edges)")


def _reachable(wiring: Wiring, start: int) -> np.ndarray:
    """Nodes reachable from ``start`` over edges in either direction (frontier by frontier)."""
    n = len(wiring.nodes)
    tails = np.concatenate([wiring.src, wiring.dst])
    heads = np.concatenate([wiring.dst, wiring.src])
    order = np.argsort(tails, kind="stable")
    heads = heads[order]
    ptr = np.searchsorted(tails[order], np.arange(n + 1))
    seen = np.zeros(n, dtype=bool)
    seen[start] = True
    frontier = np.array([start])
    reached = np.zeros(n, dtype=bool)
    while len(frontier):
        count = ptr[frontier + 1] - ptr[frontier]
        idx = np.repeat(ptr[frontier] - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        reached[heads[idx]] = True  # marks, not a sort: the next frontier in node order
        reached &= ~seen
        frontier = np.flatnonzero(reached)
        seen[frontier] = True
        reached[frontier] = False
    return seen


def _check_connected(cluster: Cluster, wiring: Wiring) -> None:
    names = [n for n, _ in wiring.nodes]
    if not names:
        raise TopologyError(f"cluster {cluster.name!r} has an empty graph")
    seen = _reachable(wiring, names.index(gpu_name(0)))
    if seen.all():
        return
    cut_off = sorted(names[i] for i in np.flatnonzero(~seen))
    kinds = dict(wiring.nodes)
    gpus = [n for n in cut_off if kinds[n].get("kind") == "gpu"]
    raise TopologyError(
        f"cluster {cluster.name!r} is disconnected: {len(cut_off)} nodes ({len(gpus)} GPUs) unreachable from "
        f"gpu0, e.g. {cut_off[:5]}; link them to the fabric"
    )


def validate_cluster(cluster: Cluster) -> None:
    """Raise TopologyError if ``cluster`` breaks the graph contract; return None if it holds."""
    if not isinstance(cluster, Cluster):
        raise TopologyError(f"cluster must be a Cluster (e.g. get_cluster('dgx-h100', 64)), got {type(cluster).__name__}")
    wiring = cluster.columns()
    _check_counts(cluster, wiring)
    _check_nodes(cluster, wiring)
    _check_edges(cluster, wiring)
    _check_connected(cluster, wiring)
    if not (cluster.nvlink_domain_size >= 1 and 0 <= cluster.nic_bandwidth < math.inf
            and 0 <= cluster.cost_per_gpu_hour < math.inf):
        raise TopologyError(
            f"cluster {cluster.name!r}: nvlink_domain_size = {cluster.nvlink_domain_size} must be >= 1, "
            f"nic_bandwidth = {cluster.nic_bandwidth} and cost_per_gpu_hour = {cluster.cost_per_gpu_hour} finite and >= 0"
        )


_VALIDATED: weakref.WeakKeyDictionary[object, tuple[int, int, int]] = weakref.WeakKeyDictionary()
"""Graphs (or columns of preset clusters) that passed ``validate_cluster``, with (num_gpus, nodes,
edges) at that time."""


def ensure_valid(cluster: Cluster) -> None:
    """``validate_cluster`` unless this graph already passed it with the same GPU, node and edge
    counts (presets validate once when built; a user-built Cluster is checked on first use).
    A preset cluster is keyed by its columns, so checking it builds no networkx graph.
    An attribute edited in place on an already validated graph is not seen: rebuild the Cluster."""
    target: object
    wiring = getattr(cluster, "wiring", None)
    if not isinstance(cluster, Cluster):
        validate_cluster(cluster)  # raises: names the type that was passed
    if wiring is not None and "graph" not in vars(cluster):
        target, key = wiring, (cluster.num_gpus, len(wiring.nodes), len(wiring.src))
    else:
        target = cluster.graph
        key = (cluster.num_gpus, cluster.graph.number_of_nodes(), cluster.graph.number_of_edges())
    if _VALIDATED.get(target) == key:
        return
    validate_cluster(cluster)
    _VALIDATED[target] = key


def register_view(view: Cluster, joint: Cluster) -> None:
    """Mark ``view`` valid: one job's view of ``joint`` (``topologies.colocate.job_views``), its
    wiring ``joint``'s with the devices renamed, whose graph holds more devices than the job's
    ``num_gpus`` (the other jobs'). ``joint`` is checked; the renaming keeps every edge and gives
    the job's devices the attributes the contract asks of ``gpu0 .. gpu{num_gpus-1}``."""
    ensure_valid(joint)
    if view.wiring is None or len(view.wiring.src) != len(joint.columns().src):
        raise TopologyError(f"cluster {view.name!r} is not a view of {joint.name!r}: its edges differ")
    _check_nodes(view, view.wiring)
    _VALIDATED[view.wiring] = (view.num_gpus, len(view.wiring.nodes), len(view.wiring.src))
