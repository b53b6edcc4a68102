"""The graph contract: node kinds, link classes, default latencies, and the list-based builder.

Owns the vocabulary every cluster graph uses (see docs/ARCHITECTURE.md "topologies/graph.py") and
``GraphParts``, the plain-list accumulator the fabric builders fill before one bulk conversion to a
``networkx.DiGraph`` (fast: a 16,384-GPU cluster is built with two ``add_*_from`` calls). It does
not decide any topology (``topologies.fabrics``) nor check a finished graph (``topologies.cluster``).

Graph contract, in short: each physical link is two directed edges, each with ``bandwidth``
(bytes/s, this direction), ``latency`` (s) and ``link_class``; every node has ``kind``; GPU nodes
are named ``gpu{i}`` and carry ``rank_slot`` (= i, node-major), ``server`` and ``local``; switch
nodes carry ``in_network_reduction``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

    def to_digraph(self) -> nx.DiGraph:
        """The finished ``networkx.DiGraph``.

        Filled through the adjacency dicts that ``DiGraph`` documents as its data structure
        (``_node``, ``_succ``/``_adj``, ``_pred``), 2-3x faster than ``add_edges_from`` for the
        100k-edge fabrics of 16k GPUs; each edge gets its own attribute dict, as networkx does.
        """
        graph = nx.DiGraph(name=self.name)
        node, succ, pred = graph._node, graph._succ, graph._pred
        for name, attrs in self.nodes:
            node[name] = dict(attrs)
            succ[name] = {}
            pred[name] = {}
        for u, v, attrs in self.edges:
            for end in (u, v):
                if end not in node:
                    node[end], succ[end], pred[end] = {}, {}, {}
            data = dict(attrs)
            succ[u][v] = data
            pred[v][u] = data
        return graph
