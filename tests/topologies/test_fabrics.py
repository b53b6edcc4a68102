"""Fabric builders: node counts, degrees, symmetry, connectivity, bisection bandwidth, errors."""

from __future__ import annotations

import time

import networkx as nx
import pytest

from clustersim.topologies import (
    NodeSpec, TopologyError, dragonfly, fat_tree, multi_plane, nvl_domain, nvswitch_node, pcie_host,
    rail_optimized, torus,
)

B = 50e9  # 400 Gb/s NIC per GPU, bytes/s
NODE = NodeSpec(gpus_per_node=8, nvlink_bandwidth=450e9, in_network_reduction=True, nic_bandwidth=B)
FLAT = NodeSpec(gpus_per_node=1, nic_bandwidth=B)  # one GPU per server: pure network tests


def _kind(g: nx.DiGraph, kind: str) -> list[str]:
    return [n for n, k in g.nodes(data="kind") if k == kind]


def _symmetric(g: nx.DiGraph) -> None:
    for u, v, d in g.edges(data=True):
        assert g.edges[v, u] == d, (u, v)
        assert d["bandwidth"] > 0 and d["latency"] >= 0


def bisection(g: nx.DiGraph, num_gpus: int) -> float:
    """Max flow (bytes/s) from the first half of the GPUs to the second half."""
    h = nx.DiGraph(g)
    for i in range(num_gpus):
        if i < num_gpus // 2:
            h.add_edge("SRC", f"gpu{i}")
        else:
            h.add_edge(f"gpu{i}", "DST")
    return nx.maximum_flow_value(h, "SRC", "DST", capacity="bandwidth")


def test_nvswitch_node_is_a_star() -> None:
    g = nvswitch_node(gpus_per_node=8, nvlink_bandwidth=450e9, in_network_reduction=True)
    assert len(_kind(g, "gpu")) == 8 and _kind(g, "nvswitch") == ["nvsw0"]
    assert g.number_of_edges() == 16
    assert g.nodes["nvsw0"]["in_network_reduction"] is True
    assert all(g.out_degree(f"gpu{i}") == 1 for i in range(8))
    assert {d["link_class"] for *_, d in g.edges(data=True)} == {"nvlink"}
    assert [g.nodes[f"gpu{i}"]["local"] for i in range(8)] == list(range(8))
    _symmetric(g)


def test_nvl72_domain_spans_trays() -> None:
    g = nvl_domain(72, nvlink_bandwidth=900e9)
    assert len(_kind(g, "gpu")) == 72 and len(_kind(g, "nvswitch")) == 1
    assert {g.nodes[f"gpu{i}"]["server"] for i in range(72)} == set(range(18))  # 18 trays of 4
    assert nx.shortest_path_length(g, "gpu0", "gpu71") == 2


def test_pcie_host_uses_pcie_links() -> None:
    g = pcie_host(gpus_per_node=4, pcie_bandwidth=32e9)
    assert _kind(g, "pcie") == ["pcie0"] and {d["link_class"] for *_, d in g.edges(data=True)} == {"pcie"}


@pytest.mark.parametrize("ratio", [1.0, 2.0, 4.0])
def test_two_tier_bisection_is_full_over_oversubscription(ratio: float) -> None:
    n = 64
    g = fat_tree(n, NODE, hosts_per_leaf=16, oversubscription=ratio)
    assert bisection(g, n) == pytest.approx(n / 2 * B / ratio, rel=1e-9)


def test_two_tier_counts_and_degrees() -> None:
    n, hpl, spines = 128, 32, 4
    g = fat_tree(n, NODE, hosts_per_leaf=hpl, num_spines=spines)
    assert len(_kind(g, "gpu")) == len(_kind(g, "nic")) == n
    assert len(_kind(g, "leaf")) == n // hpl and len(_kind(g, "spine")) == spines
    assert len(_kind(g, "nvswitch")) == n // 8
    assert all(g.out_degree(leaf) == hpl + spines for leaf in _kind(g, "leaf"))
    assert all(g.out_degree(s) == n // hpl for s in _kind(g, "spine"))
    assert all(g.out_degree(f"gpu{i}") == 2 for i in range(n))  # its NVSwitch and its NIC
    assert nx.is_strongly_connected(g)
    _symmetric(g)


def test_single_leaf_needs_no_spine() -> None:
    g = fat_tree(16, NODE, hosts_per_leaf=32)
    assert len(_kind(g, "leaf")) == 1 and not _kind(g, "spine")


def test_three_tier_bisection_and_counts() -> None:
    n, ratio, core_ratio = 128, 2.0, 2.0
    g = fat_tree(n, FLAT, hosts_per_leaf=8, oversubscription=ratio, tiers=3, leaves_per_pod=4, num_spines=2,
                 num_cores=3, core_oversubscription=core_ratio)
    assert len(_kind(g, "leaf")) == 16 and len(_kind(g, "spine")) == 4 * 2 and len(_kind(g, "core")) == 3
    assert all(g.out_degree(c) == 8 for c in _kind(g, "core"))
    assert bisection(g, n) == pytest.approx(n / 2 * B / (ratio * core_ratio), rel=1e-9)
    _symmetric(g)


def test_rail_optimized_puts_each_rail_on_its_leaf() -> None:
    n, spl = 256, 8  # 32 servers, scalable units of 8 servers -> 4 SUs x 8 rails
    g = rail_optimized(n, NODE, servers_per_leaf=spl)
    leaves = _kind(g, "leaf")
    assert len(leaves) == 4 * 8
    for leaf in leaves:
        nics = [u for u in g.predecessors(leaf) if g.nodes[u]["kind"] == "nic"]
        assert len(nics) == spl and {g.nodes[u]["rail"] for u in nics} == {g.nodes[leaf]["rail"]}
    assert nx.shortest_path_length(g, "gpu0", "gpu1") == 2  # same server: via the NVSwitch
    assert nx.shortest_path_length(g, "gpu0", "gpu8") == 4  # same rail and SU: NIC, rail leaf, NIC
    assert nx.shortest_path_length(g, "nic0", "nic8") == 2  # NIC-leaf-NIC on rail 0
    assert nx.shortest_path_length(g, "nic0", "nic1") == 4  # different rails meet at a spine
    assert bisection(g, n) == pytest.approx(n / 2 * B, rel=1e-9)
    _symmetric(g)


def test_multi_plane_splits_each_nic_over_planes() -> None:
    n = 64
    g = multi_plane(n, NODE, planes=2, servers_per_leaf=4)
    for i in range(n):
        ups = [v for v in g.successors(f"nic{i}") if g.nodes[v]["kind"] == "leaf"]
        assert len(ups) == 2 and sum(g.edges[f"nic{i}", v]["bandwidth"] for v in ups) == pytest.approx(B)
    assert bisection(g, n) == pytest.approx(n / 2 * B, rel=1e-9)
    planes = {v.split("_")[0] for v in _kind(g, "spine")}
    assert planes == {"p0", "p1"}


def test_torus_2d_degrees_wraparound_and_diameter() -> None:
    g = torus((4, 4), FLAT, link_bandwidth=B)
    routers = g.subgraph(_kind(g, "router"))
    assert routers.number_of_nodes() == 16
    assert all(routers.out_degree(r) == 4 for r in routers)
    assert routers.has_edge("router0", "router12") and routers.has_edge("router0", "router3")  # wraparound
    assert nx.diameter(routers.to_undirected()) == 2 + 2
    _symmetric(g)


def test_torus_default_node_is_one_gpu_per_router() -> None:
    g = torus((3, 3), link_bandwidth=B)
    assert len(_kind(g, "gpu")) == len(_kind(g, "router")) == 9 and not _kind(g, "nvswitch")
    assert nx.shortest_path_length(g, "gpu0", "gpu8") == 2 + 2 + 2  # gpu-nic-router ... router-nic-gpu


def test_torus_3d_small_dimensions() -> None:
    g = torus((2, 3, 4), NODE, link_bandwidth=B)
    routers = g.subgraph(_kind(g, "router"))
    assert routers.number_of_nodes() == 24 and len(_kind(g, "gpu")) == 24 * 8
    assert all(routers.out_degree(r) == 1 + 2 + 2 for r in routers)  # size 2 -> one neighbour
    assert nx.is_strongly_connected(g)


def test_dragonfly_links_every_group_pair_once() -> None:
    groups, a, p = 5, 4, 2
    g = dragonfly(groups, a, p, FLAT, local_bandwidth=2 * B, global_bandwidth=B)
    routers = _kind(g, "router")
    assert len(routers) == groups * a and len(_kind(g, "gpu")) == groups * a * p
    grp = {r: g.nodes[r]["group"] for r in routers}
    global_pairs = [(grp[u], grp[v]) for u, v in g.edges if u in grp and v in grp and grp[u] < grp[v]]
    assert sorted(global_pairs) == [(i, j) for i in range(groups) for j in range(i + 1, groups)]
    local = [1 for u, v in g.edges if u in grp and v in grp and grp[u] == grp[v]]
    assert len(local) == groups * a * (a - 1)
    assert nx.diameter(g.subgraph(routers).to_undirected()) <= 3  # local, global, local


@pytest.mark.parametrize(
    "build",
    [
        lambda: fat_tree(64, NodeSpec(gpus_per_node=8, nvlink_bandwidth=1e9)),  # no NIC
        lambda: fat_tree(64, NODE, oversubscription=0),
        lambda: fat_tree(12, NODE),
        lambda: fat_tree(64, NODE, tiers=4),  # type: ignore[arg-type]
        lambda: torus((4,), NODE, link_bandwidth=B),
        lambda: torus((4, 4), NODE, link_bandwidth=0),
        lambda: multi_plane(64, NODE, planes=0),
        lambda: NodeSpec(gpus_per_node=8, nvlink_bandwidth=1e9, nvlink_domain_size=12),
    ],
)
def test_bad_parameters_raise_topology_error(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TopologyError):
        build()


def test_gpu_count_error_gives_the_numbers() -> None:
    with pytest.raises(TopologyError, match=r"num_gpus = 12 .* gpus_per_node = 8"):
        rail_optimized(12, NODE)


def test_builders_are_deterministic() -> None:
    a, b = rail_optimized(128, NODE, servers_per_leaf=4), rail_optimized(128, NODE, servers_per_leaf=4)
    assert list(a.nodes(data=True)) == list(b.nodes(data=True))
    assert list(a.edges(data=True)) == list(b.edges(data=True))


def test_4k_rail_build_is_fast() -> None:
    # Full target (benchmarks/bench_topology_build.py): 16,384 GPUs in < 2 s; here a loose 4k bound.
    t0 = time.perf_counter()
    g = rail_optimized(4096, NODE)
    assert time.perf_counter() - t0 < 2.0
    assert g.number_of_nodes() == 4096 * 2 + 512 + 4096 // 256 * 8 + 8
