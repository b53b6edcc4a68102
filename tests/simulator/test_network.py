"""Flow-level fluid model: max-min sharing, conservation, ECMP, duplex links, event loop."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.flows import Flow, NetworkError, fabric_for, max_min_rates, simulate_flows
from clustersim.topologies.fabrics import NodeSpec, fat_tree, nvswitch_node, torus

IDEAL = CalibrationProfile(link_efficiency={"nvlink": 1.0, "nic": 1.0, "fabric": 1.0})
NVLINK = 450e9  # H100 NVLink4: 900 GB/s bidirectional = 450 GB/s per direction (NVIDIA H100 datasheet)
NIC = 50e9  # ConnectX-7 NDR 400 Gb/s = 50 GB/s per direction (NVIDIA ConnectX-7 datasheet)


def _node() -> NodeSpec:
    return NodeSpec(gpus_per_node=8, nvlink_bandwidth=NVLINK, nic_bandwidth=NIC)


def test_two_flows_on_one_link_each_get_half() -> None:
    g = nvswitch_node(nvlink_bandwidth=NVLINK)
    size = 1e9
    one = simulate_flows(g, [Flow(src="gpu0", dst="gpu1", size=size)], IDEAL)
    two = simulate_flows(g, [Flow(src="gpu0", dst="gpu1", size=size), Flow(src="gpu0", dst="gpu2", size=size)], IDEAL)
    lat = 2 * g.edges["gpu0", "nvsw0"]["latency"]
    assert one.finish_times[0] == pytest.approx(size / NVLINK + lat, rel=1e-9)
    assert two.finish_times[0] == pytest.approx(2 * size / NVLINK + lat, rel=1e-9)
    assert two.link_utilisation["gpu0->nvsw0"] == pytest.approx(1.0, rel=1e-3)


def test_progressive_filling_textbook_case() -> None:
    # link0 cap 1 carries f0, f1; link1 cap 2 carries f1, f2: f0 = f1 = 0.5, f2 = 1.5 (Bertsekas &
    # Gallager, Data Networks, 6.5.2 max-min fairness by progressive filling).
    flow = np.array([0, 1, 1, 2])
    link = np.array([0, 0, 1, 1])
    rates = max_min_rates(flow, link, np.ones(4), np.array([1.0, 2.0]), np.ones(3, dtype=bool))
    assert rates == pytest.approx([0.5, 0.5, 1.5])


def test_late_flow_speeds_up_when_first_ends() -> None:
    g = nvswitch_node(nvlink_bandwidth=NVLINK)
    size, t1 = 1e9, 1e-3
    res = simulate_flows(g, [Flow(src="gpu0", dst="gpu1", size=size),
                             Flow(src="gpu0", dst="gpu2", size=size, start=t1)], IDEAL)
    lat = 2 * g.edges["gpu0", "nvsw0"]["latency"]
    # alone for t1, then half rate until flow 0 ends, then full rate
    sent_alone = NVLINK * t1
    end0 = t1 + 2 * (size - sent_alone) / NVLINK
    end1 = end0 + (size - (end0 - t1) * NVLINK / 2) / NVLINK
    assert res.finish_times[0] == pytest.approx(end0 + lat, rel=1e-9)
    assert res.finish_times[1] == pytest.approx(end1 + lat, rel=1e-9)


def test_bytes_are_conserved_at_every_node() -> None:
    g = fat_tree(64, _node(), hosts_per_leaf=16, oversubscription=2.0)
    rng = np.random.default_rng(7)
    pairs = rng.choice(64, size=(40, 2))
    flows = [Flow(src=f"gpu{a}", dst=f"gpu{b}", size=float(rng.uniform(1e6, 1e8))) for a, b in pairs if a != b]
    res = simulate_flows(g, flows, IDEAL)
    net = {n: 0.0 for n in g.nodes}
    for name, b in res.link_bytes.items():
        u, v = name.split("->")
        net[u] -= b
        net[v] += b
    for f in flows:
        net[f.src] += f.size
        net[f.dst] -= f.size
    assert max(abs(x) for x in net.values()) < 1e-6 * sum(f.size for f in flows)
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in res.link_utilisation.values())


def test_ecmp_splits_evenly_over_spines() -> None:
    g = fat_tree(64, _node(), hosts_per_leaf=16, num_spines=4)
    edges, frac, _ = fabric_for(g, IDEAL).route(0, 63)
    fab = fabric_for(g, IDEAL)
    ups = {fab.edge_name(e): f for e, f in zip(edges, frac) if fab.edges[e][0] == "leaf0"}
    assert len(ups) == 4 and all(f == pytest.approx(0.25) for f in ups.values())


def test_torus_neighbour_exchange_uses_both_directions() -> None:
    # NICs 4x faster than the torus links, so the router links are the bottleneck
    g = torus((4, 1), NodeSpec(gpus_per_node=1, nic_bandwidth=4 * NIC), link_bandwidth=NIC)
    one_way = [Flow(src=f"gpu{i}", dst=f"gpu{(i + 1) % 4}", size=1e9) for i in range(4)]
    both = one_way + [Flow(src=f"gpu{(i + 1) % 4}", dst=f"gpu{i}", size=1e9) for i in range(4)]
    r1, r2 = simulate_flows(g, one_way, IDEAL), simulate_flows(g, both, IDEAL)
    assert r2.link_bytes["router0->router1"] > 0 and r2.link_bytes["router1->router0"] > 0
    # full duplex: the reverse direction is free capacity, so exchanging both ways costs no more time
    assert r2.makespan == pytest.approx(r1.makespan, rel=1e-9)


def test_more_bandwidth_is_never_slower() -> None:
    rng = np.random.default_rng(3)
    pairs = rng.choice(32, size=(30, 2))
    flows = [Flow(src=f"gpu{a}", dst=f"gpu{b}", size=1e8) for a, b in pairs if a != b]
    spans = []
    for nic in (25e9, 50e9, 100e9):
        g = fat_tree(32, NodeSpec(gpus_per_node=8, nvlink_bandwidth=NVLINK, nic_bandwidth=nic), hosts_per_leaf=8,
                     oversubscription=2.0)
        spans.append(simulate_flows(g, flows, IDEAL).makespan)
    assert spans[0] >= spans[1] >= spans[2]


def test_flow_to_unknown_node_is_a_clear_error() -> None:
    g = nvswitch_node(nvlink_bandwidth=NVLINK)
    with pytest.raises(NetworkError, match="gpu99"):
        simulate_flows(g, [Flow(src="gpu0", dst="gpu99", size=1.0)], IDEAL)
