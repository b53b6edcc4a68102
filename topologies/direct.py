"""Direct (router-based) scale-out networks: torus and dragonfly.

Owns ``torus`` (2D/3D with wraparound) and ``dragonfly`` (groups of fully connected routers,
one global link between every pair of groups). Each router serves whole servers: all NICs of a
server link to its router. It does not build switched fat trees (``topologies.fabrics``) nor
the servers themselves (``topologies.servers``).
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Sequence


from clustersim.topologies.errors import TopologyError
from clustersim.topologies.graph import SWITCH_LATENCY, GraphParts
from clustersim.topologies.servers import NodeSpec, add_servers

if TYPE_CHECKING:  # builders return networkx graphs; the module loads when one is built
    import networkx as nx


def _attach_servers(parts: GraphParts, nics: list[str], routers: list[str], per_router: int, node: NodeSpec) -> None:
    """NICs of server s link to router s // per_router at the NIC bandwidth."""
    for i, nic in enumerate(nics):
        parts.link(nic, routers[i // node.gpus_per_node // per_router], node.nic_bandwidth, SWITCH_LATENCY, "nic")


def _check_direct(node: NodeSpec, per_router: int, bandwidths: dict[str, float]) -> None:
    if node.nic_bandwidth <= 0:
        raise TopologyError(f"nic_bandwidth = {node.nic_bandwidth} must be > 0 for a scale-out fabric")
    if per_router < 1:
        raise TopologyError(f"servers per router = {per_router} must be >= 1")
    bad = {k: v for k, v in bandwidths.items() if not v > 0}
    if bad:
        raise TopologyError(f"router link bandwidths must be > 0 bytes/s, got {bad}")


def _index(coords: Sequence[int], dims: Sequence[int]) -> int:
    """Row-major index of ``coords`` in a grid of ``dims``."""
    idx = 0
    for c, d in zip(coords, dims):
        idx = idx * d + c
    return idx


def torus(
    dims: Sequence[int], node: NodeSpec | None = None, *, link_bandwidth: float, servers_per_router: int = 1
) -> nx.DiGraph:
    """A 2D or 3D torus of routers with wraparound links; ``servers_per_router`` servers each.

    A dimension of size 2 has one link between its two routers, of size 1 none. Without ``node``
    each router serves one single-GPU server whose NIC runs at ``link_bandwidth``.
    """
    node = node or NodeSpec(gpus_per_node=1, nic_bandwidth=link_bandwidth)
    dims = tuple(int(d) for d in dims)
    if len(dims) not in (2, 3) or min(dims) < 1:
        raise TopologyError(f"torus dims = {dims} must be 2 or 3 positive sizes, e.g. (4, 4) or (4, 4, 4)")
    _check_direct(node, servers_per_router, {"link_bandwidth": link_bandwidth})
    num_routers = math.prod(dims)
    parts = GraphParts(name=f"torus{len(dims)}d")
    nics = add_servers(parts, num_routers * servers_per_router * node.gpus_per_node, node)
    grid = itertools.product(*map(range, dims))
    routers = [parts.switch(f"router{r}", "router", coords=c) for r, c in enumerate(grid)]
    seen: set[tuple[int, int]] = set()
    for coords in itertools.product(*map(range, dims)):
        here = _index(coords, dims)
        for axis, size in enumerate(dims):
            nxt = list(coords)
            nxt[axis] = (coords[axis] + 1) % size
            there = _index(nxt, dims)
            pair = (min(here, there), max(here, there))
            if here != there and pair not in seen:
                seen.add(pair)
                parts.link(routers[here], routers[there], link_bandwidth, SWITCH_LATENCY, "fabric")
    _attach_servers(parts, nics, routers, servers_per_router, node)
    return parts.to_digraph()


def dragonfly(
    groups: int, routers_per_group: int, hosts_per_router: int, node: NodeSpec | None = None, *,
    local_bandwidth: float, global_bandwidth: float,
) -> nx.DiGraph:
    """Dragonfly: routers of a group fully connected (local links); one global link per pair of
    groups, placed round-robin: the link between groups i < j leaves group i from router
    (j - 1) % routers_per_group and enters group j at router i % routers_per_group.
    ``hosts_per_router`` counts servers (single-GPU with NICs at ``global_bandwidth`` without ``node``).
    """
    node = node or NodeSpec(gpus_per_node=1, nic_bandwidth=global_bandwidth)
    if groups < 1 or routers_per_group < 1:
        raise TopologyError(
            f"dragonfly needs groups >= 1 and routers_per_group >= 1, got {groups} and {routers_per_group}"
        )
    _check_direct(node, hosts_per_router, {"local_bandwidth": local_bandwidth, "global_bandwidth": global_bandwidth})
    a = routers_per_group
    parts = GraphParts(name="dragonfly")
    nics = add_servers(parts, groups * a * hosts_per_router * node.gpus_per_node, node)
    routers = [parts.switch(f"router{g * a + r}", "router", group=g) for g in range(groups) for r in range(a)]
    for g in range(groups):
        for r1, r2 in itertools.combinations(range(a), 2):
            parts.link(routers[g * a + r1], routers[g * a + r2], local_bandwidth, SWITCH_LATENCY, "fabric")
    for i, j in itertools.combinations(range(groups), 2):
        src, dst = routers[i * a + (j - 1) % a], routers[j * a + i % a]
        parts.link(src, dst, global_bandwidth, SWITCH_LATENCY, "fabric")
    _attach_servers(parts, nics, routers, hosts_per_router, node)
    return parts.to_digraph()
