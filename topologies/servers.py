"""Scale-up: the GPUs of a server or NVLink domain, their switch, and their NICs.

Owns ``NodeSpec`` (what one server looks like: GPUs, NVLink or PCIe bandwidth, NVLink domain size,
NIC bandwidth per GPU), ``add_servers`` (the shared step every cluster builder starts with) and the
single-domain builders ``nvswitch_node``, ``nvl_domain``, ``pcie_host``. It does not build any
scale-out network (``topologies.fabrics``, ``topologies.direct``).

Model: an NVLink domain is one logical switch node (kind ``nvswitch``) to which each GPU has one
link at its full NVLink bandwidth per direction; the 4 (DGX H100) or 18 (NVL72) physical NVSwitch
chips are folded into it, which is exact for bandwidth as long as the chips are non-blocking.
Without NVLink (``nvlink_bandwidth == 0``) GPUs hang off one PCIe switch per server.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from clustersim.topologies.errors import TopologyError
from clustersim.topologies.graph import (
    NIC_LATENCY,
    NVLINK_LATENCY,
    PCIE_LATENCY,
    GraphParts,
    gpu_name,
)

if TYPE_CHECKING:  # builders return networkx graphs; the module loads when one is built
    import networkx as nx

PCIE_GEN4_X16: float = 32e9
"""PCIe Gen4 x16 per direction: 16 GT/s x 16 lanes x 128/130 encoding ~ 31.5 GB/s (PCI-SIG 4.0)."""
PCIE_GEN5_X16: float = 64e9
"""PCIe Gen5 x16 per direction: 32 GT/s x 16 lanes ~ 63 GB/s (PCI-SIG 5.0)."""


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """One server (or NVLink tray) and how its GPUs reach each other and the network."""

    gpus_per_node: int = 8
    """GPUs per server; servers are blocks of consecutive device indices."""
    nvlink_bandwidth: float = 0.0
    """NVLink bandwidth per GPU per direction (bytes/s); 0 = no NVLink, GPUs share a PCIe switch."""
    nvlink_domain_size: int | None = None
    """GPUs per NVLink domain (8 for DGX, 72 for NVL72); None = one server. Multiple of gpus_per_node."""
    in_network_reduction: bool = False
    """Whether the NVLink switch reduces in-network (NVLink SHARP, Hopper and later)."""
    nic_bandwidth: float = 0.0
    """Scale-out NIC bandwidth per GPU per direction (bytes/s); 0 = no NICs (one domain only)."""
    pcie_bandwidth: float = PCIE_GEN4_X16
    """GPU <-> PCIe switch bandwidth per direction when there is no NVLink (bytes/s)."""

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise TopologyError(f"gpus_per_node = {self.gpus_per_node} must be >= 1")
        if self.domain % self.gpus_per_node:
            raise TopologyError(
                f"nvlink_domain_size = {self.domain} must be a multiple of gpus_per_node = {self.gpus_per_node}"
            )
        if self.nvlink_bandwidth < 0 or self.nic_bandwidth < 0 or self.pcie_bandwidth <= 0:
            raise TopologyError(
                f"bandwidths must be non-negative (pcie > 0): nvlink {self.nvlink_bandwidth}, "
                f"nic {self.nic_bandwidth}, pcie {self.pcie_bandwidth}"
            )

    @property
    def domain(self) -> int:
        """GPUs per NVLink domain (``gpus_per_node`` when not set or without NVLink)."""
        if self.nvlink_bandwidth <= 0 or self.nvlink_domain_size is None:
            return self.gpus_per_node
        return self.nvlink_domain_size


def check_gpu_count(num_gpus: int, node: NodeSpec) -> int:
    """Number of servers; error when ``num_gpus`` is not a positive multiple of gpus_per_node."""
    if num_gpus < 1 or num_gpus % node.gpus_per_node:
        raise TopologyError(
            f"num_gpus = {num_gpus} is not a positive multiple of gpus_per_node = {node.gpus_per_node}; "
            f"use {max(1, num_gpus // node.gpus_per_node) * node.gpus_per_node}"
        )
    return num_gpus // node.gpus_per_node


def _add_domain_switches(parts: GraphParts, num_gpus: int, node: NodeSpec) -> None:
    """One NVLink switch per domain (or PCIe switch per server) and its GPU links."""
    if node.nvlink_bandwidth > 0:
        size, kind, prefix = node.domain, "nvswitch", "nvsw"
        bw, lat, cls, inr = node.nvlink_bandwidth, NVLINK_LATENCY, "nvlink", node.in_network_reduction
    else:
        size, kind, prefix = node.gpus_per_node, "pcie", "pcie"
        bw, lat, cls, inr = node.pcie_bandwidth, PCIE_LATENCY, "pcie", False
    if size == 1:
        return  # a single GPU needs no switch
    switches = [parts.switch(f"{prefix}{d}", kind, inr, domain=d) for d in range((num_gpus + size - 1) // size)]
    parts.links([gpu_name(i) for i in range(num_gpus)], [switches[i // size] for i in range(num_gpus)], bw, lat, cls)


def add_servers(parts: GraphParts, num_gpus: int, node: NodeSpec) -> list[str]:
    """Add GPUs, their NVLink/PCIe switches and one NIC per GPU; returns the NIC names in order."""
    check_gpu_count(num_gpus, node)
    g, dom = node.gpus_per_node, node.domain
    parts.nodes.extend(
        (gpu_name(i), {"kind": "gpu", "rank_slot": i, "server": i // g, "local": i % g, "domain": i // dom})
        for i in range(num_gpus)
    )
    _add_domain_switches(parts, num_gpus, node)
    if node.nic_bandwidth <= 0:
        return []
    nics = [f"nic{i}" for i in range(num_gpus)]
    parts.nodes.extend((nics[i], {"kind": "nic", "server": i // g, "rail": i % g}) for i in range(num_gpus))
    parts.links([gpu_name(i) for i in range(num_gpus)], nics, node.nic_bandwidth, NIC_LATENCY, "nic")
    return nics


def single_domain(num_gpus: int, node: NodeSpec, name: str = "single_domain") -> nx.DiGraph:
    """One NVLink domain (or PCIe server) of ``num_gpus`` GPUs, no scale-out network."""
    return single_domain_parts(num_gpus, node, name).to_digraph()


def single_domain_parts(num_gpus: int, node: NodeSpec, name: str = "single_domain") -> GraphParts:
    """GPUs with no scale-out network: they must all share one NVLink domain or one server."""
    if num_gpus > node.domain:
        raise TopologyError(
            f"num_gpus = {num_gpus} exceeds one domain of {node.domain} GPUs; use a scale-out fabric "
            "(fat_tree, rail_optimized, ...) or fewer GPUs"
        )
    parts = GraphParts(name=name)
    add_servers(parts, num_gpus, replace(node, nic_bandwidth=0.0))
    return parts


def nvswitch_node(
    *, gpus_per_node: int = 8, nvlink_bandwidth: float, in_network_reduction: bool = False
) -> nx.DiGraph:
    """One server: ``gpus_per_node`` GPUs, each linked to one logical NVSwitch node."""
    node = NodeSpec(
        gpus_per_node=gpus_per_node, nvlink_bandwidth=nvlink_bandwidth, in_network_reduction=in_network_reduction
    )
    return single_domain(gpus_per_node, node, name="nvswitch_node")


def nvl_domain(
    size: int, *, nvlink_bandwidth: float, gpus_per_node: int = 4, in_network_reduction: bool = True
) -> nx.DiGraph:
    """One NVLink domain of ``size`` GPUs (NVL72: 72 GPUs in trays of 4) on one switch tier."""
    node = NodeSpec(
        gpus_per_node=gpus_per_node,
        nvlink_bandwidth=nvlink_bandwidth,
        nvlink_domain_size=size,
        in_network_reduction=in_network_reduction,
    )
    return single_domain(size, node, name="nvl_domain")


def pcie_host(*, gpus_per_node: int = 8, pcie_bandwidth: float = PCIE_GEN4_X16) -> nx.DiGraph:
    """One server whose GPUs talk through a PCIe switch (no NVLink)."""
    node = NodeSpec(gpus_per_node=gpus_per_node, pcie_bandwidth=pcie_bandwidth)
    return single_domain(gpus_per_node, node, name="pcie_host")
