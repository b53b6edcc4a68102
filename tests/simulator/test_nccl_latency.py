"""NCCL's tuning model of latency and protocol (``network.nccl_tuning``) and its use by the pricers.

Closed forms from the cited constants: NVIDIA/nccl src/graph/tuning.cc at commit
b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2 (baseLat ring LL/LL128/Simple 6.6/14.0/8.4 us; hwLat
ring NVLink .6/1.9/3.4, NET 2.7/4.0/14.0 us; getNetOverhead 1 us on Intel, x3 for Simple).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from clustersim.simulator.network import nccl_tuning as nt
from clustersim.simulator.network.analytic import GroupShape, collective_time
from clustersim.simulator.network.collectives import collective_steps, price_collective
from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.topologies.fabrics import NodeSpec, fat_tree

NVLINK = 450e9  # H100 NVLink4 per direction (NVIDIA H100 datasheet: 900 GB/s bidirectional)
NIC = 50e9  # ConnectX-7 400 Gb/s per direction (NVIDIA ConnectX-7 datasheet)
PATH = CalibrationProfile(link_efficiency={"nvlink": 1.0, "nic": 1.0, "fabric": 1.0},
                          collective_overhead=0.0, p2p_overhead=0.0, pipeline_fill_bytes=0.0,
                          collective_latency="path")
NCCL = PATH.replace(collective_latency="nccl")


def _cluster(gpus: int) -> SimpleNamespace:
    node = NodeSpec(gpus_per_node=8, nvlink_bandwidth=NVLINK, nic_bandwidth=NIC)
    return SimpleNamespace(graph=fat_tree(gpus, node, hosts_per_leaf=16))


def test_ring_all_gather_latency_is_the_cited_closed_form() -> None:
    # 64 ranks on 8 nodes: 56 intra-node steps at max(hwLat, netOverhead), 7 inter-node steps
    simple = 8.4 + 56 * max(3.4, 3 * 1.0) + 7 * 14.0
    ll = 6.6 + 56 * max(0.6, 1.0) + 7 * 2.7
    ll128 = 14.0 + 56 * max(1.9, 1.0) + 7 * 4.0
    for proto, us in (("Simple", simple), ("LL", ll), ("LL128", ll128)):
        assert nt.latency("all_gather", "ring", proto, 64, 8) == pytest.approx(us * 1e-6, rel=1e-12)
    # one node: no network step, no net overhead
    assert nt.latency("reduce_scatter", "ring", "Simple", 8, 1) == pytest.approx((8.4 + 7 * 3.4) * 1e-6)
    # all-reduce: 2(n-1) steps, 2 nodes of them inter-node
    assert nt.latency("all_reduce", "ring", "Simple", 16, 2) == pytest.approx((8.4 + 26 * 3.4 + 4 * 14.0) * 1e-6)


def test_tree_latency_closed_form() -> None:
    # tree all-reduce, 64 ranks on 8 nodes: 2 ((8-1) intra + log2(8) inter), Simple (baseLat 0)
    assert nt.latency("all_reduce", "tree", "Simple", 64, 8) == pytest.approx(2 * (7 * 28.0 + 3 * 28.0) * 1e-6)


def test_latency_grows_with_nodes_at_fixed_ranks_per_node() -> None:
    lats = [nt.latency("all_gather", "ring", "Simple", 8 * k, k) for k in (1, 2, 4, 8, 16, 64)]
    assert all(b > a for a, b in zip(lats, lats[1:]))


def test_protocol_pick_small_ll_large_simple_and_least_time() -> None:
    bw = 8 * NIC  # bus bytes per second of Simple on the ring (any positive figure)
    picks = []
    for size in (1e3, 1e5, 1e7, 1e9):
        proto, lat, t = nt.best_protocol("all_gather", "ring", 64, 8, size / bw, size)
        every = []
        for p in nt.PROTOCOLS:
            f = nt.bandwidth_factor("all_gather", "ring", p, 8, 8)
            t_p = size / bw / f
            if p == "LL":
                t_p = max(t_p, size / nt.ll_bus_cap(8))
            every.append(nt.latency("all_gather", "ring", p, 64, 8) + t_p)
        assert lat + t == pytest.approx(min(every))
        picks.append(proto)
    assert picks[0] == "LL" and picks[-1] == "Simple"


def test_pci_servers_never_run_ll128() -> None:
    assert "LL128" not in nt.protocols("ring", "pci")
    assert nt.protocols("in_switch") == ("Simple",)


def test_flow_pricer_replaces_path_latency_by_nccl_simple_at_large_sizes() -> None:
    cluster = _cluster(64)
    groups = np.arange(64).reshape(1, 64)
    size = 4e9  # Simple wins by far
    t_path, lat_path, _, _ = collective_steps("all_gather", size, groups, cluster, PATH, algorithm="ring")
    t_nccl = price_collective("all_gather", size, groups, cluster, NCCL, algorithm="ring").time
    expect = t_path - lat_path + nt.latency("all_gather", "ring", "Simple", 64, 8)
    assert t_nccl == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("size", [2e3, 2e6, 2e9])
def test_flows_alone_equal_the_static_price_under_nccl(size: float) -> None:
    cluster = _cluster(32)
    groups = np.arange(32).reshape(4, 8).T.copy()  # 8 groups of 4 ranks, one per node
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        static = price_collective(kind, size, groups, cluster, NCCL)
        alone, _, _, _ = collective_steps(kind, size, groups, cluster, NCCL)
        assert alone == pytest.approx(static.time, rel=1e-12)


def test_small_messages_pay_less_latency_than_simple_and_more_than_nothing() -> None:
    cluster = _cluster(64)
    groups = np.arange(64).reshape(1, 64)
    t = price_collective("all_gather", 4e3, groups, cluster, NCCL, algorithm="ring").time
    assert nt.latency("all_gather", "ring", "LL", 64, 8) < t < nt.latency("all_gather", "ring", "Simple", 64, 8)


def test_time_grows_with_size_under_nccl() -> None:
    cluster = _cluster(64)
    groups = np.arange(64).reshape(1, 64)
    times = [price_collective("all_gather", s, groups, cluster, NCCL).time for s in np.geomspace(1e2, 1e10, 25)]
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_analytic_tier_uses_the_same_model() -> None:
    cluster = SimpleNamespace(accelerator=SimpleNamespace(nvlink_bandwidth=NVLINK), nic_bandwidth=NIC, params={})
    shape = GroupShape(size=64, per_domain=8)
    size = 4e9
    t = collective_time("all_gather", size, shape, cluster, NCCL)  # type: ignore[arg-type]  # duck-typed cluster
    bw = 7 / 8 * size / NVLINK + 7 / 8 * (size / 8) / NIC
    assert t == pytest.approx(bw + nt.latency("all_gather", "ring", "Simple", 64, 8), rel=1e-12)
    assert collective_time("all_gather", size, shape, cluster, PATH) != pytest.approx(t, rel=1e-9)  # type: ignore[arg-type]  # duck-typed cluster


def test_default_profile_keeps_the_path_latency() -> None:
    # NCCL's model as the default measured 10.70 % out of sample against 10.64 % for path (fresh
    # sensitivity passes of each, December's sixth stop, docs/VALIDATION.md): path stays the default
    assert CalibrationProfile().collective_latency == "path"
    assert default_profile("H100 SXM 80GB").collective_latency == "path"
