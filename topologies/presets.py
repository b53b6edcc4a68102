"""Cluster presets: named systems (DGX pods, NVL72 racks, AWS instances, this CPU host) as functions.

Owns ``SystemSpec`` (one server design with its cited NIC and NVLink figures), ``build_cluster``
(system + num_gpus + fabric overrides -> validated ``Cluster``), the preset functions
(``dgx_h100_pod(num_gpus, **overrides)`` ...), ``CLUSTER_PRESETS``, ``get_cluster``,
and ``cpu_loopback``. Reading YAML-like descriptions with unit-suffixed keys is
``topologies.config.load_cluster``. It does not define accelerators (``topologies.accelerators``)
nor topology shapes (``topologies.fabrics``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Callable, Mapping

from clustersim.collector import paused
from clustersim.units import GBIT
from clustersim.topologies.accelerators import (
    A100_40GB, A100_80GB, B200, B300, GB200, GB300, H100_SXM, H200, AcceleratorSpec, cpu_accelerator, get_accelerator,
)
from clustersim.topologies.cluster import Cluster, ensure_valid
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.fabrics import NodeSpec, dragonfly, fat_tree_parts, multi_plane_parts, rail_optimized_parts, torus
from clustersim.topologies.servers import single_domain_parts
from clustersim.topologies.graph import LOOPBACK_LATENCY, GraphParts, gpu_name



@dataclass(frozen=True, kw_only=True)
class SystemSpec:
    """One server design: the device, how many per server, NVLink domain and NICs."""

    name: str
    """Preset name, e.g. ``"dgx-h100"``."""
    accelerator: AcceleratorSpec
    """Device model."""
    gpus_per_node: int
    """Devices per server or compute tray."""
    nvlink_domain_size: int
    """Devices per NVLink domain."""
    nic_bandwidth: float
    """Scale-out bandwidth per device per direction (bytes/s)."""
    fabric: str = "rail_optimized"
    """Default scale-out builder."""
    servers_per_leaf: int = 32
    """Servers per scalable unit (rail leaf) of the reference architecture."""
    source: str = ""
    """Citation of the NIC / NVLink / topology figures."""


# DGX A100 datasheet: 8x A100 80GB, NVSwitch 600 GB/s bidirectional per GPU, 8x single-port
# ConnectX-6 HDR 200 Gb/s for compute; DGX SuperPOD (A100) reference architecture: rail-optimised
# fat tree in scalable units of 20 DGX.
DGX_A100 = SystemSpec(name="dgx-a100", accelerator=A100_80GB, gpus_per_node=8, nvlink_domain_size=8,
                      nic_bandwidth=200 * GBIT, servers_per_leaf=20,
                      source="NVIDIA DGX A100 datasheet; DGX SuperPOD A100 reference architecture")
# DGX H100 datasheet: 8x ConnectX-7 400 Gb/s NDR (OSFP); DGX SuperPOD H100 RA: rail-optimised, SU = 32 DGX.
DGX_H100 = SystemSpec(name="dgx-h100", accelerator=H100_SXM, gpus_per_node=8, nvlink_domain_size=8,
                      nic_bandwidth=400 * GBIT, source="NVIDIA DGX H100 datasheet; DGX SuperPOD H100 RA")
# DGX H200 datasheet: same networking as DGX H100 (8x ConnectX-7 400 Gb/s).
DGX_H200 = replace(DGX_H100, name="dgx-h200", accelerator=H200, source="NVIDIA DGX H200 datasheet")
# DGX B200 datasheet: 8x single-port ConnectX-7 VPI up to 400 Gb/s InfiniBand/Ethernet.
DGX_B200 = replace(DGX_H100, name="dgx-b200", accelerator=B200, source="NVIDIA DGX B200 datasheet")
# DGX B300 datasheet: 8x ConnectX-8 SuperNIC, up to 800 Gb/s each.
DGX_B300 = replace(DGX_H100, name="dgx-b300", accelerator=B300, nic_bandwidth=800 * GBIT,
                   source="NVIDIA DGX B300 datasheet")
# GB200 NVL72: 18 compute trays of 4 GPUs on one NVLink domain of 72; 4x ConnectX-7 400 Gb/s per
# tray (NVIDIA multi-node NVLink tuning guide, "compute tray" topology) -> 400 Gb/s per GPU.
GB200_NVL72 = SystemSpec(name="gb200-nvl72", accelerator=GB200, gpus_per_node=4, nvlink_domain_size=72,
                         nic_bandwidth=400 * GBIT, servers_per_leaf=18,
                         source="NVIDIA GB200 NVL72 datasheet; multi-node NVLink systems tuning guide")
# GB300 NVL72 compute tray: 4 ConnectX-8 HCAs (NVIDIA NVL72 enterprise RA, components) -> 800 Gb/s per GPU.
GB300_NVL72 = replace(GB200_NVL72, name="gb300-nvl72", accelerator=GB300, nic_bandwidth=800 * GBIT,
                      source="NVIDIA GB300 NVL72 datasheet; NVL72 AI factory enterprise RA (components)")
# AWS p4d.24xlarge: 8x A100 40GB, NVSwitch, 400 Gb/s EFA (4x 100 Gb/s) per instance -> 50 Gb/s per GPU.
AWS_P4D = SystemSpec(name="aws-p4d", accelerator=A100_40GB, gpus_per_node=8, nvlink_domain_size=8,
                     nic_bandwidth=50 * GBIT, fabric="fat_tree", source="AWS EC2 P4 instance page (p4d.24xlarge)")
# AWS p5.48xlarge: 8x H100, 3,200 Gb/s EFAv2 (32x 100 Gb/s) per instance -> 400 Gb/s per GPU.
AWS_P5 = SystemSpec(name="aws-p5", accelerator=H100_SXM, gpus_per_node=8, nvlink_domain_size=8,
                    nic_bandwidth=400 * GBIT, fabric="fat_tree", source="AWS EC2 P5 instance page (p5.48xlarge)")

SYSTEMS: Mapping[str, SystemSpec] = MappingProxyType(
    {s.name: s for s in (DGX_A100, DGX_H100, DGX_H200, DGX_B200, DGX_B300, GB200_NVL72, GB300_NVL72, AWS_P4D, AWS_P5)}
)
"""Server designs by preset name."""

FABRIC_KEYS: frozenset[str] = frozenset({
    "oversubscription", "servers_per_leaf", "hosts_per_leaf", "num_spines", "tiers", "leaves_per_pod",
    "num_cores", "core_oversubscription", "planes", "dims", "link_bandwidth", "servers_per_router", "groups",
    "routers_per_group", "hosts_per_router", "local_bandwidth", "global_bandwidth", "sharp", "rail_optimized",
})
"""Builder parameters ``build_cluster`` accepts as overrides (SI units)."""

SYSTEM_KEYS: frozenset[str] = frozenset({
    "name", "fabric", "accelerator", "gpus_per_node", "nvlink_domain_size", "nvlink_bandwidth", "nic_bandwidth",
    "cost_per_gpu_hour",
})
"""Overrides of the server design and the cluster record."""


def _domain(system: SystemSpec, gpus_per_node: int, o: dict[str, Any]) -> int:
    """NVLink domain size; a partial server (fewer GPUs than one node) is its own domain."""
    if gpus_per_node < int(o.get("gpus_per_node", system.gpus_per_node)):
        return gpus_per_node
    return int(o.get("nvlink_domain_size", system.nvlink_domain_size))


def _node_spec(system: SystemSpec, accelerator: AcceleratorSpec, gpus_per_node: int, o: dict[str, Any]) -> NodeSpec:
    return NodeSpec(
        gpus_per_node=gpus_per_node,
        nvlink_bandwidth=float(o.get("nvlink_bandwidth", accelerator.nvlink_bandwidth)),
        nvlink_domain_size=_domain(system, gpus_per_node, o),
        in_network_reduction=accelerator.nvls,
        nic_bandwidth=float(o.get("nic_bandwidth", system.nic_bandwidth)),
    )


def _fabric_name(system: SystemSpec, o: dict[str, Any]) -> str:
    fabric = str(o.get("fabric", system.fabric))
    rail = o.get("rail_optimized")
    if rail is not None and fabric in ("fat_tree", "rail_optimized"):
        fabric = "rail_optimized" if rail else "fat_tree"
    return fabric


def _need(o: dict[str, Any], key: str, fabric: str) -> Any:
    if key not in o:
        raise TopologyError(f"fabric {fabric!r} needs {key!r}; add it to the cluster description")
    return o[key]


def _check_direct_size(num_gpus: int, node: NodeSpec, fabric: str, servers: int) -> None:
    if servers * node.gpus_per_node != num_gpus:
        raise TopologyError(
            f"{fabric} shape holds {servers} servers x {node.gpus_per_node} GPUs = {servers * node.gpus_per_node} "
            f"!= num_gpus = {num_gpus}; change dims/groups or num_gpus"
        )


def _torus(num_gpus: int, node: NodeSpec, o: dict[str, Any]) -> Any:
    dims, per_router = tuple(_need(o, "dims", "torus")), int(o.get("servers_per_router", 1))
    _check_direct_size(num_gpus, node, "torus", math.prod(dims) * per_router)
    return torus(dims, node, link_bandwidth=o.get("link_bandwidth", node.nic_bandwidth), servers_per_router=per_router)


def _dragonfly(num_gpus: int, node: NodeSpec, o: dict[str, Any]) -> Any:
    groups, routers, hosts = (int(_need(o, k, "dragonfly")) for k in ("groups", "routers_per_group", "hosts_per_router"))
    _check_direct_size(num_gpus, node, "dragonfly", groups * routers * hosts)
    per_server = node.nic_bandwidth * node.gpus_per_node  # default: router links carry one server's NICs
    return dragonfly(groups, routers, hosts, node, local_bandwidth=o.get("local_bandwidth", per_server),
                     global_bandwidth=o.get("global_bandwidth", per_server))


def _build_graph(fabric: str, num_gpus: int, node: NodeSpec, o: dict[str, Any], spl: int) -> Any:
    """Dispatch to the builder named ``fabric`` with the overrides it understands: the switched
    fabrics and single domains come back as ``GraphParts`` (columns, no networkx graph), the
    direct networks as graphs."""
    common = {k: o[k] for k in ("oversubscription", "num_spines", "sharp") if k in o}
    match fabric:
        case "rail_optimized":
            return rail_optimized_parts(num_gpus, node, servers_per_leaf=o.get("servers_per_leaf", spl), **common)
        case "fat_tree":
            keys: tuple[str, ...] = ("hosts_per_leaf", "tiers", "leaves_per_pod", "num_cores", "core_oversubscription")
            return fat_tree_parts(num_gpus, node, **common, **{k: o[k] for k in keys if k in o})
        case "multi_plane":
            keys = ("planes", "hosts_per_leaf")
            return multi_plane_parts(num_gpus, node, rail=bool(o.get("rail_optimized", True)),
                               servers_per_leaf=o.get("servers_per_leaf", spl), **common,
                               **{k: o[k] for k in keys if k in o})
        case "torus":
            return _torus(num_gpus, node, o)
        case "dragonfly":
            return _dragonfly(num_gpus, node, o)
        case "single_domain":
            return single_domain_parts(num_gpus, node)
    raise TopologyError(
        f"fabric {fabric!r} is unknown; use one of rail_optimized, fat_tree, multi_plane, torus, dragonfly, "
        "single_domain"
    )


def _check_override_keys(overrides: Mapping[str, Any]) -> None:
    unknown = sorted(set(overrides) - FABRIC_KEYS - SYSTEM_KEYS)
    if unknown:
        raise TopologyError(f"unknown cluster option(s) {unknown}; use {sorted(FABRIC_KEYS | SYSTEM_KEYS)}")


def _gpus_per_node(num_gpus: int, gpus_per_node: int) -> int:
    """A job smaller than one server uses part of it; otherwise num_gpus must fill whole servers."""
    if num_gpus < 1:
        raise TopologyError(f"num_gpus = {num_gpus} must be >= 1")
    if num_gpus < gpus_per_node:
        return num_gpus
    if num_gpus % gpus_per_node:
        raise TopologyError(
            f"num_gpus = {num_gpus} is not a multiple of gpus_per_node = {gpus_per_node}; "
            f"use {num_gpus // gpus_per_node * gpus_per_node} or {(num_gpus // gpus_per_node + 1) * gpus_per_node}"
        )
    return gpus_per_node


def _params(system: SystemSpec, node: NodeSpec, o: dict[str, Any]) -> dict[str, object]:
    """Effective builder parameters (defaults filled in, SI units) for provenance and fast paths."""
    params: dict[str, object] = {
        "oversubscription": float(o.get("oversubscription", 1.0)),
        "servers_per_leaf": int(o.get("servers_per_leaf", system.servers_per_leaf)),
        "nvlink_bandwidth": node.nvlink_bandwidth,
        "nic_bandwidth": node.nic_bandwidth,
        "in_network_reduction": node.in_network_reduction,
        "sharp": bool(o.get("sharp", False)),
        "system_source": system.source,
    }
    return params | {k: v for k, v in o.items() if k in FABRIC_KEYS}


def build_cluster(system: SystemSpec, num_gpus: int, **overrides: Any) -> Cluster:
    """A validated ``Cluster`` of ``num_gpus`` devices of ``system`` (overrides in SI units), built
    with the cyclic garbage collector paused (``clustersim.collector``: the node and edge lists are
    never garbage)."""
    with paused():
        return _build_cluster(system, num_gpus, **overrides)


def _build_cluster(system: SystemSpec, num_gpus: int, **overrides: Any) -> Cluster:
    _check_override_keys(overrides)
    o = dict(overrides)
    acc = o.get("accelerator", system.accelerator)
    acc = get_accelerator(acc) if isinstance(acc, str) else acc
    g = _gpus_per_node(num_gpus, int(o.get("gpus_per_node", system.gpus_per_node)))
    node = _node_spec(system, acc, g, o)
    fabric = _fabric_name(system, o)
    built = _build_graph(fabric, num_gpus, node, o, system.servers_per_leaf)
    wired = {"wiring": built.to_wiring()} if isinstance(built, GraphParts) else {"graph": built}
    params = _params(system, node, o)
    cluster = Cluster(
        name=str(o.get("name", system.name)), accelerator=acc, num_gpus=num_gpus, gpus_per_node=g, **wired,
        fabric=fabric, params=params, nic_bandwidth=node.nic_bandwidth,
        nvlink_domain_size=min(node.domain, num_gpus), cost_per_gpu_hour=float(o.get("cost_per_gpu_hour", 0.0)),
    )
    ensure_valid(cluster)
    return cluster


def slurm_segment(nodes: int, nodes_per_domain: int) -> int:
    """Nodes of one job in each NVLink domain when its launcher asks Slurm's topology/block plugin for
    segments (``sbatch --segment``: every segment of that many nodes lands in one block, a rack):
    all the nodes up to one domain's worth, else the largest divisor of ``nodes`` that fits in one
    domain. The rule of Megatron-Bridge's performance launcher for 4-GPU trays (GB200/GB300 NVL72:
    ``scripts/performance/utils/executors.py``, ``slurm_executor``, "add --segment flag to sbatch if
    job uses GB200", NVIDIA-NeMo/Megatron-Bridge commit 023219e): 64 nodes (256 GPUs) -> 16 trays of
    each rack's 18, so the spare 2 trays (8 GPUs) of every rack stay out of the job."""
    if nodes < 1 or nodes_per_domain < 1:
        raise TopologyError(f"nodes = {nodes} and nodes_per_domain = {nodes_per_domain} must be >= 1")
    if nodes <= nodes_per_domain:
        return nodes
    return next(s for s in range(nodes_per_domain, 0, -1) if nodes % s == 0)


def segment_overrides(name: str, num_gpus: int) -> dict[str, int]:
    """Cluster options (``get_cluster(name, num_gpus, **them)``) for a job placed by Slurm segments
    (``slurm_segment``) on the multi-node NVLink system ``name``: its NVLink domains hold only the
    job's trays of each rack (``nvlink_domain_size`` = segment x GPUs per tray), one rack per leaf
    (``servers_per_leaf`` = segment). Empty for systems whose NVLink domain is one server, and for a
    job within one domain (it is placed as before)."""
    system = SYSTEMS.get(preset_name(name))
    if system is None:
        return {}
    g = system.gpus_per_node
    if system.nvlink_domain_size <= g or num_gpus <= system.nvlink_domain_size or num_gpus % g:
        return {}
    seg = slurm_segment(num_gpus // g, system.nvlink_domain_size // g)
    return {"nvlink_domain_size": seg * g, "servers_per_leaf": seg}


def dgx_a100_pod(num_gpus: int, **overrides: Any) -> Cluster:
    """DGX A100 80GB nodes, HDR 200 Gb/s per GPU, rail-optimised two-tier fabric."""
    return build_cluster(DGX_A100, num_gpus, **overrides)


def dgx_h100_pod(num_gpus: int, **overrides: Any) -> Cluster:
    """DGX H100 nodes, NDR 400 Gb/s per GPU, rail-optimised two-tier fabric."""
    return build_cluster(DGX_H100, num_gpus, **overrides)


def dgx_h200_pod(num_gpus: int, **overrides: Any) -> Cluster:
    """DGX H200 nodes, NDR 400 Gb/s per GPU, rail-optimised two-tier fabric."""
    return build_cluster(DGX_H200, num_gpus, **overrides)


def dgx_b200_pod(num_gpus: int, **overrides: Any) -> Cluster:
    """DGX B200 nodes, ConnectX-7 400 Gb/s per GPU, rail-optimised two-tier fabric."""
    return build_cluster(DGX_B200, num_gpus, **overrides)


def dgx_b300_pod(num_gpus: int, **overrides: Any) -> Cluster:
    """DGX B300 nodes, ConnectX-8 800 Gb/s per GPU, rail-optimised two-tier fabric."""
    return build_cluster(DGX_B300, num_gpus, **overrides)


def gb200_nvl72(num_gpus: int, **overrides: Any) -> Cluster:
    """GB200 NVL72 racks (72-GPU NVLink domains), 400 Gb/s per GPU scale-out."""
    return build_cluster(GB200_NVL72, num_gpus, **overrides)


def gb300_nvl72(num_gpus: int, **overrides: Any) -> Cluster:
    """GB300 NVL72 racks (72-GPU NVLink domains), 800 Gb/s per GPU scale-out."""
    return build_cluster(GB300_NVL72, num_gpus, **overrides)


def aws_p4d(num_gpus: int, **overrides: Any) -> Cluster:
    """AWS p4d.24xlarge instances: A100 40GB, 400 Gb/s EFA per instance, fat tree."""
    return build_cluster(AWS_P4D, num_gpus, **overrides)


def aws_p5(num_gpus: int, **overrides: Any) -> Cluster:
    """AWS p5.48xlarge instances: H100, 3,200 Gb/s EFA per instance, fat tree."""
    return build_cluster(AWS_P5, num_gpus, **overrides)


# Placeholder CPU figures for cpu_loopback when nothing was measured (assumptions, not facts):
# calibration replaces them with this machine's measured matmul rate and memory bandwidth.
_CPU_PLACEHOLDER_FLOPS: float = 50e9
_CPU_PLACEHOLDER_MEMORY: float = 4.0 * 2**30
_CPU_PLACEHOLDER_MEMORY_BW: float = 10e9
_LOOPBACK_PLACEHOLDER_BW: float = 2e9


def cpu_loopback(
    num_gpus: int, *, accelerator: AcceleratorSpec | None = None, loopback_bandwidth: float = _LOOPBACK_PLACEHOLDER_BW,
    name: str = "cpu-loopback", cost_per_gpu_hour: float = 0.0,
) -> Cluster:
    """``num_gpus`` CPU ranks on this host, each linked to the host node over loopback
    (link_class "loopback"); pass the measured ``accelerator`` and ``loopback_bandwidth``."""
    if num_gpus < 1 or not loopback_bandwidth > 0:
        raise TopologyError(f"cpu_loopback needs num_gpus >= 1 (got {num_gpus}) and loopback_bandwidth > 0 "
                            f"(got {loopback_bandwidth})")
    acc = accelerator or cpu_accelerator(
        peak_flops=_CPU_PLACEHOLDER_FLOPS, memory_capacity=_CPU_PLACEHOLDER_MEMORY,
        memory_bandwidth=_CPU_PLACEHOLDER_MEMORY_BW, source="placeholder, not measured",
    )
    parts = GraphParts(name="cpu_loopback")
    parts.nodes.extend(
        (gpu_name(i), {"kind": "gpu", "rank_slot": i, "server": 0, "local": i, "domain": 0}) for i in range(num_gpus)
    )
    hub = parts.switch("host0", "pcie", False, server=0)
    for i in range(num_gpus):
        parts.link(gpu_name(i), hub, loopback_bandwidth, LOOPBACK_LATENCY, "loopback")
    cluster = Cluster(name=name, accelerator=acc, num_gpus=num_gpus, gpus_per_node=num_gpus, wiring=parts.to_wiring(),
                      fabric="cpu_loopback", params={"loopback_bandwidth": float(loopback_bandwidth)},
                      nic_bandwidth=0.0, nvlink_domain_size=num_gpus, cost_per_gpu_hour=cost_per_gpu_hour)
    ensure_valid(cluster)
    return cluster


CLUSTER_PRESETS: Mapping[str, Callable[..., Cluster]] = MappingProxyType({
    "dgx-a100": dgx_a100_pod, "dgx-h100": dgx_h100_pod, "dgx-h200": dgx_h200_pod, "dgx-b200": dgx_b200_pod,
    "dgx-b300": dgx_b300_pod, "gb200-nvl72": gb200_nvl72, "gb300-nvl72": gb300_nvl72, "aws-p4d": aws_p4d,
    "aws-p5": aws_p5, "cpu-loopback": cpu_loopback,
})
"""Preset name -> ``callable(num_gpus, **overrides) -> Cluster``."""

PRESET_ALIASES: Mapping[str, str] = MappingProxyType({
    # gpu_type values of workloads/data/published_runs.csv -> the system those runs used
    "a100": "dgx-a100", "a100-sxm4": "dgx-a100", "h100": "dgx-h100", "h200": "dgx-h200", "b200": "dgx-b200",
    "b300": "dgx-b300", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72", "cpu": "cpu-loopback",
})
"""Alternative names accepted by ``get_cluster``."""


def preset_name(name: str) -> str:
    """Canonical preset name for ``name`` (case, ``_`` vs ``-`` and aliases ignored)."""
    key = name.strip().lower().replace("_", "-")
    key = PRESET_ALIASES.get(key, key)
    if key not in CLUSTER_PRESETS:
        raise TopologyError(f"unknown cluster preset {name!r}; use one of {sorted(CLUSTER_PRESETS)}")
    return key


def get_cluster(name: str, num_gpus: int, **overrides: Any) -> Cluster:
    """The preset ``name`` with ``num_gpus`` devices; the error lists the preset names."""
    return CLUSTER_PRESETS[preset_name(name)](num_gpus, **overrides)
