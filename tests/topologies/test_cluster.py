"""Cluster record and validate_cluster: the graph contract is enforced with a clear message."""

from __future__ import annotations

import pickle

import networkx as nx
import pytest

from clustersim.topologies import H100_SXM, Cluster, NodeSpec, TopologyError, fat_tree, rail_optimized, validate_cluster
from clustersim.topologies.graph import LINK_CLASSES, NODE_KINDS

NODE = NodeSpec(gpus_per_node=8, nvlink_bandwidth=450e9, in_network_reduction=True, nic_bandwidth=50e9)


def _cluster(graph: nx.DiGraph, num_gpus: int = 32) -> Cluster:
    return Cluster(name="t", accelerator=H100_SXM, num_gpus=num_gpus, gpus_per_node=8, graph=graph,
                   fabric="fat_tree", params={}, nic_bandwidth=50e9, nvlink_domain_size=8)


def test_valid_cluster_passes_and_names_gpus() -> None:
    c = _cluster(fat_tree(32, NODE, hosts_per_leaf=16))
    assert validate_cluster(c) is None
    assert [c.gpu(i) for i in (0, 31)] == ["gpu0", "gpu31"] and c.num_nodes == 4
    with pytest.raises(TopologyError, match="32"):
        c.gpu(32)


def test_graph_contract_vocabulary_is_used() -> None:
    g = rail_optimized(64, NODE, servers_per_leaf=4)
    assert {k for _, k in g.nodes(data="kind")} <= NODE_KINDS
    assert {c for *_, c in g.edges(data="link_class")} <= LINK_CLASSES
    assert [g.nodes[f"gpu{i}"]["rank_slot"] for i in range(64)] == list(range(64))


def test_disconnected_graph_names_the_unreachable_part() -> None:
    g = fat_tree(32, NODE, hosts_per_leaf=16)
    g.add_node("leaf99", kind="leaf", in_network_reduction=False)
    with pytest.raises(TopologyError, match=r"disconnected.*leaf99"):
        validate_cluster(_cluster(g))


def test_island_of_gpus_is_reported_with_gpu_count() -> None:
    g = fat_tree(32, NODE, hosts_per_leaf=16)
    for i in range(24, 32):  # cut server 3 off: drop its NIC uplinks
        g.remove_edge(f"nic{i}", "leaf1")
        g.remove_edge("leaf1", f"nic{i}")
    with pytest.raises(TopologyError, match=r"\(8 GPUs\) unreachable"):
        validate_cluster(_cluster(g))


def test_gpu_count_mismatch() -> None:
    with pytest.raises(TopologyError, match="32 gpu nodes but num_gpus = 64"):
        validate_cluster(_cluster(fat_tree(32, NODE, hosts_per_leaf=16), num_gpus=64))
    with pytest.raises(TopologyError, match="multiple of gpus_per_node"):
        validate_cluster(_cluster(fat_tree(32, NODE, hosts_per_leaf=16), num_gpus=30))


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"bandwidth": 1.0, "latency": 0.0}, "lacks"),
        ({"bandwidth": 0.0, "latency": 0.0, "link_class": "nic"}, "bandwidth = 0.0 must be > 0"),
        ({"bandwidth": -5.0, "latency": 0.0, "link_class": "nic"}, "must be > 0"),
        ({"bandwidth": 1.0, "latency": 0.0, "link_class": "warp"}, "link_class 'warp'"),
    ],
)
def test_bad_edge_attributes(attrs: dict[str, object], message: str) -> None:
    g = fat_tree(32, NODE, hosts_per_leaf=16)
    g.add_edge("gpu0", "gpu1", **attrs)
    g.add_edge("gpu1", "gpu0", bandwidth=1.0, latency=0.0, link_class="nvlink")
    with pytest.raises(TopologyError, match=message):
        validate_cluster(_cluster(g))


def test_one_way_edge_is_rejected() -> None:
    g = fat_tree(32, NODE, hosts_per_leaf=16)
    g.remove_edge("leaf0", "nic0")
    with pytest.raises(TopologyError, match="no reverse edge"):
        validate_cluster(_cluster(g))


def test_gpu_attributes_checked() -> None:
    g = fat_tree(32, NODE, hosts_per_leaf=16)
    g.nodes["gpu9"]["server"] = 0
    with pytest.raises(TopologyError, match="gpu9"):
        validate_cluster(_cluster(g))


def test_every_link_has_equal_reverse() -> None:
    g = rail_optimized(128, NODE, servers_per_leaf=4)
    assert all(g.edges[v, u] == d for u, v, d in g.edges(data=True))


def test_cluster_pickles_for_process_pools() -> None:
    c = _cluster(fat_tree(32, NODE, hosts_per_leaf=16))
    back = pickle.loads(pickle.dumps(c))
    assert back == c and back.graph.number_of_edges() == c.graph.number_of_edges()
    validate_cluster(back)
