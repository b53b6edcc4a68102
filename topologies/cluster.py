"""The ``Cluster``: one accelerator model wired by one graph, and the check that the graph is sound.

Owns the ``Cluster`` record (docs/ARCHITECTURE.md "topologies/cluster.py") and
``validate_cluster``, which enforces the graph contract of ``topologies.graph``: every GPU present
with its attributes, every edge with a positive bandwidth, a latency and a known link class, every
link in both directions, every node reachable. It does not build graphs (``topologies.fabrics``)
nor choose presets (``topologies.presets``).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Mapping

import networkx as nx

from clustersim.topologies.accelerators import AcceleratorSpec
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.graph import LINK_CLASSES, NODE_KINDS, SWITCH_KINDS, gpu_name


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
    graph: nx.DiGraph = field(hash=False, compare=False, repr=False)
    """The wiring, per the graph contract (``topologies.graph``)."""
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

    def gpu(self, i: int) -> str:
        """Graph node name of device ``i``."""
        if not 0 <= i < self.num_gpus:
            raise TopologyError(f"device index {i} is outside 0..{self.num_gpus - 1} of cluster {self.name!r}")
        return gpu_name(i)

    @property
    def num_nodes(self) -> int:
        """Number of servers."""
        return self.num_gpus // self.gpus_per_node


def _check_counts(cluster: Cluster) -> None:
    for name in ("num_gpus", "gpus_per_node", "nvlink_domain_size"):
        value = getattr(cluster, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TopologyError(f"cluster {cluster.name!r}: {name} = {value!r} must be an integer")
    if cluster.num_gpus < 1 or cluster.gpus_per_node < 1 or cluster.num_gpus % cluster.gpus_per_node:
        raise TopologyError(
            f"num_gpus = {cluster.num_gpus} must be a positive multiple of gpus_per_node = {cluster.gpus_per_node}"
        )
    gpus = [n for n, k in cluster.graph.nodes(data="kind") if k == "gpu"]
    if len(gpus) != cluster.num_gpus:
        raise TopologyError(
            f"cluster {cluster.name!r}: graph has {len(gpus)} gpu nodes but num_gpus = {cluster.num_gpus}; "
            "rebuild the graph for num_gpus devices"
        )


def _check_nodes(cluster: Cluster) -> None:
    g, nodes = cluster.gpus_per_node, cluster.graph.nodes
    for i in range(cluster.num_gpus):
        attrs = nodes.get(gpu_name(i))
        want = {"kind": "gpu", "rank_slot": i, "server": i // g, "local": i % g}
        if attrs is None or any(attrs.get(k) != v for k, v in want.items()):
            raise TopologyError(f"cluster {cluster.name!r}: node {gpu_name(i)} must exist with {want}, got {attrs}")
    for name, attrs in nodes(data=True):
        kind = attrs.get("kind")
        if kind not in NODE_KINDS:
            raise TopologyError(f"node {name!r} has kind {kind!r}; use one of {sorted(NODE_KINDS)}")
        if kind in SWITCH_KINDS and "in_network_reduction" not in attrs:
            raise TopologyError(f"switch node {name!r} lacks in_network_reduction; set it True or False")


def _check_edge(u: str, v: str, attrs: dict[str, object]) -> None:
    bw, lat, cls = attrs.get("bandwidth"), attrs.get("latency"), attrs.get("link_class")
    if bw is None or lat is None or cls is None:
        raise TopologyError(f"edge {u}->{v} lacks bandwidth/latency/link_class; got {attrs}")
    if not 0 < bw < math.inf or not 0 <= lat < math.inf:  # type: ignore[operator]
        raise TopologyError(f"edge {u}->{v}: bandwidth = {bw} must be > 0 and finite (bytes/s), "
                            f"latency = {lat} >= 0 and finite (s); fix the link")
    raise TopologyError(f"edge {u}->{v}: link_class {cls!r} unknown; use one of {sorted(LINK_CLASSES)}")


def _check_edges(graph: nx.DiGraph) -> None:
    """Every edge well formed and paired with its reverse (a fast pass; details only on failure)."""
    succ = dict(graph.adjacency())
    for u, nbrs in succ.items():
        for v, attrs in nbrs.items():
            bw, lat = attrs.get("bandwidth"), attrs.get("latency")
            ok = attrs.get("link_class") in LINK_CLASSES and bw is not None and 0 < bw < math.inf
            if not (ok and lat is not None and 0 <= lat < math.inf):
                _check_edge(u, v, attrs)
            if u not in succ[v]:
                raise TopologyError(f"edge {u}->{v} has no reverse edge; add {v}->{u} (links are two directed edges)")


def _check_connected(cluster: Cluster) -> None:
    graph = cluster.graph
    if graph.number_of_nodes() == 0:
        raise TopologyError(f"cluster {cluster.name!r} has an empty graph")
    main = nx.node_connected_component(graph.to_undirected(as_view=True), gpu_name(0))
    if len(main) == graph.number_of_nodes():
        return
    cut_off = sorted(n for n in graph.nodes if n not in main)
    gpus = [n for n in cut_off if graph.nodes[n].get("kind") == "gpu"]
    raise TopologyError(
        f"cluster {cluster.name!r} is disconnected: {len(cut_off)} nodes ({len(gpus)} GPUs) unreachable from "
        f"gpu0, e.g. {cut_off[:5]}; link them to the fabric"
    )


def validate_cluster(cluster: Cluster) -> None:
    """Raise TopologyError if ``cluster`` breaks the graph contract; return None if it holds."""
    if not isinstance(cluster, Cluster):
        raise TopologyError(f"cluster must be a Cluster (e.g. get_cluster('dgx-h100', 64)), got {type(cluster).__name__}")
    _check_counts(cluster)
    _check_nodes(cluster)
    _check_edges(cluster.graph)
    _check_connected(cluster)
    if not (cluster.nvlink_domain_size >= 1 and 0 <= cluster.nic_bandwidth < math.inf
            and 0 <= cluster.cost_per_gpu_hour < math.inf):
        raise TopologyError(
            f"cluster {cluster.name!r}: nvlink_domain_size = {cluster.nvlink_domain_size} must be >= 1, "
            f"nic_bandwidth = {cluster.nic_bandwidth} and cost_per_gpu_hour = {cluster.cost_per_gpu_hour} finite and >= 0"
        )


_VALIDATED: weakref.WeakKeyDictionary[nx.DiGraph, tuple[int, int, int]] = weakref.WeakKeyDictionary()
"""Graphs that passed ``validate_cluster``, with (num_gpus, nodes, edges) at that time."""


def ensure_valid(cluster: Cluster) -> None:
    """``validate_cluster`` unless this graph already passed it with the same GPU, node and edge
    counts (presets validate once when built; a user-built Cluster is checked on first use).
    An attribute edited in place on an already validated graph is not seen: rebuild the Cluster."""
    key = (cluster.num_gpus, cluster.graph.number_of_nodes(), cluster.graph.number_of_edges())
    if _VALIDATED.get(cluster.graph) == key:
        return
    validate_cluster(cluster)
    _VALIDATED[cluster.graph] = key
