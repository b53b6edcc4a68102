"""The graph contract: node kinds, link classes, default latencies, and the list-based builder.

Owns the vocabulary every cluster graph uses (see docs/ARCHITECTURE.md "topologies/graph.py") and
``GraphParts``, the plain-list accumulator the fabric builders fill, and ``Wiring``, its columnar
form (node list, edge endpoint indices, bandwidth, latency and link class as numpy arrays): what
the preset clusters keep and the simulator routes on, with the ``networkx.DiGraph`` built from it
only when someone asks for ``Cluster.graph``. It does not decide any topology
(``topologies.fabrics``) nor check a finished graph (``topologies.cluster``).

Graph contract, in short: each physical link is two directed edges, each with ``bandwidth``
(bytes/s, this direction), ``latency`` (s) and ``link_class``; every node has ``kind``; GPU nodes
are named ``gpu{i}`` and carry ``rank_slot`` (= i, node-major), ``server`` and ``local``; switch
nodes carry ``in_network_reduction``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # networkx loads only when a graph is built
    import networkx as nx

NODE_KINDS: frozenset[str] = frozenset({"gpu", "nvswitch", "pcie", "nic", "leaf", "spine", "core", "router"})
"""Allowed values of the ``kind`` node attribute."""

SWITCH_KINDS: frozenset[str] = frozenset({"nvswitch", "pcie", "leaf", "spine", "core", "router"})
"""Node kinds that carry ``in_network_reduction``."""

LINK_CLASSES: frozenset[str] = frozenset({"nvlink", "pcie", "nic", "fabric", "loopback"})
"""Allowed values of the ``link_class`` edge attribute (the calibration profile's keys)."""

# Latencies per directed edge. Where no datasheet gives the figure it is marked an assumption.
NVLINK_LATENCY: float = 0.25e-6
"""GPU <-> NVSwitch hop (assumption: NVLink + NVSwitch port-to-port, a few hundred ns; two hops
GPU to GPU give ~0.5 us, the order NCCL small-message latencies suggest inside a DGX)."""
PCIE_LATENCY: float = 0.5e-6
"""GPU <-> PCIe switch / host bridge hop (assumption: ~0.5 us per PCIe traversal)."""
NIC_LATENCY: float = 0.5e-6
"""GPU <-> NIC hop (assumption: NIC + PCIe processing ~1 us end to end, half per side)."""
SWITCH_LATENCY: float = 130e-9
"""NIC <-> switch and switch <-> switch hop: InfiniBand cut-through port-to-port latency
(NVIDIA Quantum-2 QM9700 class, vendor material cites < 150 ns; cable flight time not included)."""
LOOPBACK_LATENCY: float = 5e-6
"""Rank <-> host hop over the loopback interface (assumption: ~10 us TCP round trip on one host)."""


def gpu_name(index: int) -> str:
    """Node name of the device with global index ``index``."""
    return f"gpu{index}"


@dataclass(frozen=True, eq=False, kw_only=True)
class Wiring:
    """A cluster graph in columns: what routing tables and validation read without networkx.

    Edge ``e`` runs from node ``src[e]`` to node ``dst[e]`` (indices into ``nodes``). Never mutated.
    """

    name: str
    """Graph name."""
    nodes: list[tuple[str, dict[str, Any]]]
    """(name, attributes) per node, in node order."""
    src: np.ndarray
    """Tail node index per directed edge."""
    dst: np.ndarray
    """Head node index per directed edge."""
    bandwidth: np.ndarray
    """Bytes/s per directed edge."""
    latency: np.ndarray
    """Seconds per directed edge."""
    link_class: np.ndarray
    """Link class per directed edge (numpy strings; "" = missing)."""

    def to_digraph(self) -> nx.DiGraph:
        """The ``networkx.DiGraph`` of the graph contract (each edge its own attribute dict).

        Filled through the adjacency dicts that ``DiGraph`` documents as its data structure
        (``_node``, ``_succ``/``_adj``, ``_pred``), 2-3x faster than ``add_edges_from``.
        """
        import networkx as nx  # only here: routing and validation work on the columns

        graph = nx.DiGraph(name=self.name)
        node, succ, pred = graph._node, graph._succ, graph._pred
        names = [n for n, _ in self.nodes]
        for name, attrs in self.nodes:
            node[name] = dict(attrs)
            succ[name] = {}
            pred[name] = {}
        for u, v, bw, lat, cls in zip(self.src.tolist(), self.dst.tolist(), self.bandwidth.tolist(),
                                      self.latency.tolist(), self.link_class.tolist()):
            data = {"bandwidth": bw, "latency": lat, "link_class": cls}
            succ[names[u]][names[v]] = data
            pred[names[v]][names[u]] = data
        return graph

    @staticmethod
    def from_graph(graph: nx.DiGraph) -> Wiring:
        """The columns of any graph (edges in ``graph.edges`` order)."""
        nodes = [(n, dict(d)) for n, d in graph.nodes(data=True)]
        index = {n: i for i, (n, _) in enumerate(nodes)}
        edges = list(graph.edges(data=True))
        return Wiring(
            name=str(graph.graph.get("name", "")), nodes=nodes,
            src=np.array([index[u] for u, _, _ in edges], dtype=np.int64),
            dst=np.array([index[v] for _, v, _ in edges], dtype=np.int64),
            bandwidth=np.array([d.get("bandwidth", np.nan) for *_, d in edges], dtype=float),
            latency=np.array([d.get("latency", np.nan) for *_, d in edges], dtype=float),
            link_class=np.array([str(d.get("link_class") or "") for *_, d in edges], dtype=str),
        )


@dataclass(kw_only=True)
class GraphParts:
    """Nodes and directed edges as plain lists, converted once by ``to_digraph``.

    Mutable on purpose: a builder owns one instance while it runs and never shares it.
    """

    name: str = ""
    """Graph name (``G.graph["name"]``)."""
    nodes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(name, attributes) per node."""
    edges: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """(u, v, attributes) per directed edge."""
    bulk: list[tuple[Sequence[str], Sequence[str], float, float, str]] = field(default_factory=list)
    """Links added by ``links``: (one ends, other ends, bandwidth, latency, link class)."""

    def node(self, name: str, kind: str, **attrs: Any) -> str:
        """Add a node of ``kind``; returns its name."""
        self.nodes.append((name, {"kind": kind, **attrs}))
        return name

    def switch(self, name: str, kind: str, in_network_reduction: bool = False, **attrs: Any) -> str:
        """Add a switch node (any kind in ``SWITCH_KINDS``)."""
        return self.node(name, kind, in_network_reduction=in_network_reduction, **attrs)

    def link(self, a: str, b: str, bandwidth: float, latency: float, link_class: str) -> None:
        """Add one physical link: two directed edges with the same attributes."""
        attrs = {"bandwidth": float(bandwidth), "latency": float(latency), "link_class": link_class}
        # one dict for both directions is safe: networkx copies edge attributes on insertion
        self.edges.append((a, b, attrs))
        self.edges.append((b, a, attrs))

    def links(self, a: Sequence[str], b: Sequence[str], bandwidth: float, latency: float, link_class: str) -> None:
        """Add the physical links a[i] <-> b[i] at once (two directed edges each), same attributes."""
        if len(a) != len(b):
            raise ValueError(f"links: {len(a)} ends on one side, {len(b)} on the other")
        self.bulk.append((list(a), list(b), float(bandwidth), float(latency), link_class))

    def to_wiring(self) -> Wiring:
        """The columns: nodes in insertion order (edge ends never added become attribute-less nodes),
        edges of ``link`` first, then those of ``links`` (both directions of each link adjacent)."""
        nodes = [(n, dict(d)) for n, d in self.nodes]
        index = {n: i for i, (n, _) in enumerate(nodes)}

        def ids(names: Sequence[str]) -> np.ndarray:
            try:
                return np.array(list(map(index.__getitem__, names)), dtype=np.int64)
            except KeyError:  # an end never added as a node: add it without attributes
                for name in names:
                    if name not in index:
                        index[name] = len(nodes)
                        nodes.append((name, {}))
                return np.array(list(map(index.__getitem__, names)), dtype=np.int64)

        src = [ids([u for u, _, _ in self.edges])]
        dst = [ids([v for _, v, _ in self.edges])]
        bw = [np.array([d["bandwidth"] for *_, d in self.edges], dtype=float)]
        lat = [np.array([d["latency"] for *_, d in self.edges], dtype=float)]
        cls = [np.array([d["link_class"] for *_, d in self.edges], dtype=str)]
        for a, b, bandwidth, latency, link_class in self.bulk:
            ia, ib = ids(a), ids(b)
            src.append(np.column_stack([ia, ib]).ravel())
            dst.append(np.column_stack([ib, ia]).ravel())
            bw.append(np.full(2 * len(ia), bandwidth))
            lat.append(np.full(2 * len(ia), latency))
            cls.append(np.full(2 * len(ia), link_class))
        return Wiring(name=self.name, nodes=nodes, src=np.concatenate(src), dst=np.concatenate(dst),
                      bandwidth=np.concatenate(bw), latency=np.concatenate(lat), link_class=np.concatenate(cls))

    def to_digraph(self) -> nx.DiGraph:
        """The finished ``networkx.DiGraph`` (``to_wiring().to_digraph()``)."""
        return self.to_wiring().to_digraph()
