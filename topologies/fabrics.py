"""Switched scale-out fabrics: fat trees (two and three tiers), rail-optimised, multi-plane.

Each builder comes twice: ``X_parts`` fills the columns (``GraphParts``, what preset clusters keep)
and ``X`` returns the ``networkx.DiGraph`` built from them.

Owns the builders that return a whole cluster graph (GPUs, NVLink domains, NICs, switches) for a
switched network, and re-exports the scale-up builders (``topologies.servers``) and the direct
networks (``topologies.direct``) so that ``topologies.fabrics`` names every builder. It does not
route or price traffic (``clustersim.simulator.network.flows``) nor pick presets (``topologies.presets``).

Modelling choices (say so when comparing with a real plant):
- Spines are logical: a leaf's whole uplink capacity, ``hosts_per_leaf * nic_bandwidth /
  oversubscription``, is split evenly over ``num_spines`` aggregated links. A real 16k-GPU
  network needs three tiers of radix-64 switches; the logical two-tier graph has the same
  per-leaf uplink capacity and bisection, with fewer ECMP paths to enumerate.
- Leaf uplinks are provisioned for ``hosts_per_leaf`` hosts even when the last leaf is partial.
- NIC <-> leaf links have link_class "nic" (NIC line rate); switch <-> switch links "fabric".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from clustersim.topologies.direct import dragonfly, torus
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.graph import SWITCH_LATENCY, GraphParts
from clustersim.topologies.servers import NodeSpec, add_servers, nvl_domain, nvswitch_node, pcie_host, single_domain

if TYPE_CHECKING:  # builders return networkx graphs; the module loads when one is built
    import networkx as nx

__all__ = [
    "NodeSpec",
    "dragonfly",
    "fat_tree",
    "multi_plane",
    "nvl_domain",
    "nvswitch_node",
    "pcie_host",
    "rail_optimized",
    "single_domain",
    "torus",
]

MAX_DEFAULT_SPINES: int = 8
"""Default cap on logical spines (parallel spines add ECMP choice, not capacity)."""


def _check(node: NodeSpec, per_leaf: int, oversubscription: float, num_spines: int | None) -> None:
    if node.nic_bandwidth <= 0:
        raise TopologyError(f"nic_bandwidth = {node.nic_bandwidth} must be > 0 for a scale-out fabric")
    if per_leaf < 1:
        raise TopologyError(f"hosts per leaf = {per_leaf} must be >= 1")
    if not oversubscription > 0:
        raise TopologyError(f"oversubscription = {oversubscription} must be > 0 (1 = non-blocking, 2 = 2:1)")
    if num_spines is not None and num_spines < 1:
        raise TopologyError(f"num_spines = {num_spines} must be >= 1")


def _spines(per_leaf: int, oversubscription: float, num_spines: int | None) -> int:
    if num_spines is not None:
        return num_spines
    return max(1, min(MAX_DEFAULT_SPINES, round(per_leaf / oversubscription)))


def _leaves(
    parts: GraphParts, nics: list[str], leaf_of: list[int], nic_bw: float, prefix: str, sharp: bool, rails: int
) -> list[str]:
    """Leaf switches and the NIC -> leaf links; leaf ``l`` serves rail ``l % rails`` when rails > 0."""
    count = max(leaf_of) + 1
    leaves = [
        parts.switch(f"{prefix}leaf{l}", "leaf", sharp, **({"rail": l % rails} if rails else {}))
        for l in range(count)
    ]
    parts.links(nics, [leaves[l] for l in leaf_of], nic_bw, SWITCH_LATENCY, "nic")
    return leaves


def _spine_tier(parts: GraphParts, lower: list[str], names: list[str], bw: float, kind: str, sharp: bool) -> None:
    """Switches ``names`` of ``kind``, each linked to every switch of ``lower`` at ``bw``."""
    for name in names:
        parts.switch(name, kind, sharp)
    parts.links([low for low in lower for _ in names], [up for _ in lower for up in names], bw, SWITCH_LATENCY,
                "fabric")


def _two_tier(
    parts: GraphParts, nics: list[str], leaf_of: list[int], *, nic_bw: float, per_leaf: int,
    oversubscription: float, num_spines: int | None, prefix: str = "", sharp: bool = False, rails: int = 0,
) -> None:
    """Leaves plus one spine tier joining all leaves (none when a single leaf suffices)."""
    leaves = _leaves(parts, nics, leaf_of, nic_bw, prefix, sharp, rails)
    if len(leaves) == 1:
        return
    spines = _spines(per_leaf, oversubscription, num_spines)
    uplink = per_leaf * nic_bw / oversubscription  # leaf uplink capacity = downlink / ratio
    _spine_tier(parts, leaves, [f"{prefix}spine{s}" for s in range(spines)], uplink / spines, "spine", sharp)


def _three_tier(
    parts: GraphParts, nics: list[str], *, nic_bw: float, per_leaf: int, oversubscription: float,
    leaves_per_pod: int, spines_per_pod: int, num_cores: int, core_oversubscription: float, sharp: bool,
) -> None:
    """Leaves in pods with their own spines; every spine joins every core."""
    leaves = _leaves(parts, nics, [i // per_leaf for i in range(len(nics))], nic_bw, "", sharp, 0)
    leaf_up = per_leaf * nic_bw / oversubscription
    spine_up = leaves_per_pod * leaf_up / spines_per_pod / core_oversubscription
    pods = [leaves[p : p + leaves_per_pod] for p in range(0, len(leaves), leaves_per_pod)]
    all_spines: list[str] = []
    for p, pod in enumerate(pods):
        names = [f"spine{p * spines_per_pod + s}" for s in range(spines_per_pod)]
        _spine_tier(parts, pod, names, leaf_up / spines_per_pod, "spine", sharp)
        all_spines.extend(names)
    if len(pods) > 1:
        _spine_tier(parts, all_spines, [f"core{c}" for c in range(num_cores)], spine_up / num_cores, "core", sharp)


def fat_tree(
    num_gpus: int, node: NodeSpec, *, hosts_per_leaf: int = 32, oversubscription: float = 1.0,
    tiers: Literal[2, 3] = 2, num_spines: int | None = None, leaves_per_pod: int = 16,
    num_cores: int = MAX_DEFAULT_SPINES, core_oversubscription: float = 1.0, sharp: bool = False,
) -> nx.DiGraph:
    """The graph of ``fat_tree_parts`` (same arguments)."""
    return fat_tree_parts(num_gpus, node, hosts_per_leaf=hosts_per_leaf, oversubscription=oversubscription,
                          tiers=tiers, num_spines=num_spines, leaves_per_pod=leaves_per_pod, num_cores=num_cores,
                          core_oversubscription=core_oversubscription, sharp=sharp).to_digraph()


def fat_tree_parts(
    num_gpus: int, node: NodeSpec, *, hosts_per_leaf: int = 32, oversubscription: float = 1.0,
    tiers: Literal[2, 3] = 2, num_spines: int | None = None, leaves_per_pod: int = 16,
    num_cores: int = MAX_DEFAULT_SPINES, core_oversubscription: float = 1.0, sharp: bool = False,
) -> GraphParts:
    """Leaf-spine(-core) fat tree; NICs fill leaves in device order (top-of-rack style).

    ``oversubscription`` = leaf downlink / uplink capacity (1 = non-blocking); with ``tiers=3``
    leaves form pods of ``leaves_per_pod`` with ``num_spines`` spines each, joined by cores with
    spine uplink = spine downlink / ``core_oversubscription``.
    """
    _check(node, hosts_per_leaf, oversubscription, num_spines)
    parts = GraphParts(name=f"fat_tree{tiers}")
    nics = add_servers(parts, num_gpus, node)
    if tiers == 2:
        _two_tier(parts, nics, [i // hosts_per_leaf for i in range(num_gpus)], nic_bw=node.nic_bandwidth,
                  per_leaf=hosts_per_leaf, oversubscription=oversubscription, num_spines=num_spines, sharp=sharp)
    elif tiers == 3:
        if leaves_per_pod < 1 or num_cores < 1 or not core_oversubscription > 0:
            raise TopologyError(
                f"three-tier fat tree needs leaves_per_pod >= 1 (got {leaves_per_pod}), num_cores >= 1 "
                f"(got {num_cores}) and core_oversubscription > 0 (got {core_oversubscription})"
            )
        _three_tier(parts, nics, nic_bw=node.nic_bandwidth, per_leaf=hosts_per_leaf,
                    oversubscription=oversubscription, leaves_per_pod=leaves_per_pod,
                    spines_per_pod=_spines(hosts_per_leaf, oversubscription, num_spines), num_cores=num_cores,
                    core_oversubscription=core_oversubscription, sharp=sharp)
    else:
        raise TopologyError(f"tiers = {tiers} is not supported; use 2 or 3")
    return parts


def _rail_leaf_of(num_gpus: int, gpus_per_node: int, servers_per_leaf: int) -> list[int]:
    """Leaf of NIC i: one leaf per (scalable unit, rail); rail = local GPU index."""
    return [
        (i // gpus_per_node // servers_per_leaf) * gpus_per_node + i % gpus_per_node for i in range(num_gpus)
    ]


def rail_optimized(
    num_gpus: int, node: NodeSpec, *, servers_per_leaf: int = 32, oversubscription: float = 1.0,
    num_spines: int | None = None, sharp: bool = False,
) -> nx.DiGraph:
    """The graph of ``rail_optimized_parts`` (same arguments)."""
    return rail_optimized_parts(num_gpus, node, servers_per_leaf=servers_per_leaf, oversubscription=oversubscription,
                                num_spines=num_spines, sharp=sharp).to_digraph()


def rail_optimized_parts(
    num_gpus: int, node: NodeSpec, *, servers_per_leaf: int = 32, oversubscription: float = 1.0,
    num_spines: int | None = None, sharp: bool = False,
) -> GraphParts:
    """Rail-optimised two-tier fabric: NIC i of every server in a scalable unit of
    ``servers_per_leaf`` servers goes to rail leaf i; spines join all leaves (and so the rails)."""
    _check(node, servers_per_leaf, oversubscription, num_spines)
    parts = GraphParts(name="rail_optimized")
    nics = add_servers(parts, num_gpus, node)
    g = node.gpus_per_node
    _two_tier(parts, nics, _rail_leaf_of(num_gpus, g, servers_per_leaf), nic_bw=node.nic_bandwidth,
              per_leaf=servers_per_leaf, oversubscription=oversubscription, num_spines=num_spines,
              sharp=sharp, rails=g)
    return parts


def multi_plane(
    num_gpus: int, node: NodeSpec, *, planes: int = 2, rail: bool = True, servers_per_leaf: int = 32,
    hosts_per_leaf: int = 32, oversubscription: float = 1.0, num_spines: int | None = None,
    sharp: bool = False,
) -> nx.DiGraph:
    """The graph of ``multi_plane_parts`` (same arguments)."""
    return multi_plane_parts(num_gpus, node, planes=planes, rail=rail, servers_per_leaf=servers_per_leaf,
                             hosts_per_leaf=hosts_per_leaf, oversubscription=oversubscription, num_spines=num_spines,
                             sharp=sharp).to_digraph()


def multi_plane_parts(
    num_gpus: int, node: NodeSpec, *, planes: int = 2, rail: bool = True, servers_per_leaf: int = 32,
    hosts_per_leaf: int = 32, oversubscription: float = 1.0, num_spines: int | None = None,
    sharp: bool = False,
) -> GraphParts:
    """``planes`` independent two-tier fabrics; each NIC splits its bandwidth evenly over one
    leaf per plane (multi-plane / dual-plane designs). ``rail`` picks rail-optimised planes."""
    if planes < 1:
        raise TopologyError(f"planes = {planes} must be >= 1")
    per_leaf = servers_per_leaf if rail else hosts_per_leaf
    _check(node, per_leaf, oversubscription, num_spines)
    parts = GraphParts(name="multi_plane")
    nics = add_servers(parts, num_gpus, node)
    g = node.gpus_per_node
    leaf_of = _rail_leaf_of(num_gpus, g, servers_per_leaf) if rail else [i // hosts_per_leaf for i in range(num_gpus)]
    for p in range(planes):
        _two_tier(parts, nics, leaf_of, nic_bw=node.nic_bandwidth / planes, per_leaf=per_leaf,
                  oversubscription=oversubscription, num_spines=num_spines, prefix=f"p{p}_", sharp=sharp,
                  rails=g if rail else 0)
    return parts
