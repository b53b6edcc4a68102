"""ECMP hash collisions: the balls-into-bins closed form against a seeded simulation, and what the
pricing and the flows make of it on a fat tree (issue 14, item 3)."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.profile import default_profile
from clustersim.simulator.network.collectives import price_collective
from clustersim.simulator.network.ecmp import expected_max_load
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.topologies.fabrics import fat_tree
from clustersim.workloads import TrainingSpec, get_model

from tests.simulator.test_collectives import IDEAL, NIC, _cluster, _node

HASH = IDEAL.replace(ecmp_routing="hash")
LLAMA = get_model("llama3-8b")


@pytest.mark.parametrize("m,k", [(2, 8), (8, 8), (16, 8), (32, 32), (64, 32), (5, 1)])
def test_expected_max_load_matches_a_seeded_simulation(m: int, k: int) -> None:
    rng = np.random.default_rng(7)
    reps = 5000
    bins = rng.integers(0, k, size=(reps, m))
    busiest = np.array([np.bincount(row, minlength=k).max() for row in bins])
    se = max(busiest.std() / np.sqrt(reps), 1e-12)
    assert expected_max_load(m, k) == pytest.approx(busiest.mean(), abs=4 * se)


def test_expected_max_load_edge_cases() -> None:
    assert expected_max_load(0, 8) == 0.0
    assert expected_max_load(1, 8) == 1.0
    assert expected_max_load(7, 1) == 7.0
    # two balls collide with probability 1/k
    assert expected_max_load(2, 8) == pytest.approx(1 + 1 / 8, rel=1e-12)
    with pytest.raises(ValueError, match="bins"):
        expected_max_load(3, 0)


def _pairs(n: int) -> list[list[int]]:
    return [[i, 8 + i] for i in range(n)]  # GPU i of node 0 (leaf 0) -> GPU i of node 1 (leaf 1)


@pytest.mark.parametrize("flows", [1, 2, 4, 8])
def test_hashed_sends_slow_by_the_busiest_port(flows: int) -> None:
    # one node per leaf: 8 NICs under a leaf with 8 NIC-rate uplink ports; `flows` NIC-bound sends
    # leave it at once. Hashed, the busiest port carries E[max load](flows, 8) of them.
    graph = _cluster(fat_tree(16, _node(), hosts_per_leaf=8))

    def per_byte(profile: object) -> float:  # seconds per byte: the slope over size (latency drops out)
        t = [price_collective("send_recv", s, _pairs(flows), graph, profile).time for s in (2.0**30, 2.0**31)]
        return (t[1] - t[0]) / 2.0**30

    assert per_byte(IDEAL) == pytest.approx(1 / NIC, rel=1e-9)  # ideal split: each flow at its NIC's rate
    assert per_byte(HASH) / per_byte(IDEAL) == pytest.approx(expected_max_load(flows, 8), rel=1e-9)


def test_no_collision_inside_one_leaf_or_for_one_flow() -> None:
    graph = _cluster(fat_tree(16, _node(), hosts_per_leaf=16))  # both nodes under one leaf
    for groups in (_pairs(8), _pairs(1)):
        a = price_collective("send_recv", 2.0**30, groups, graph, IDEAL)
        b = price_collective("send_recv", 2.0**30, groups, graph, HASH)
        assert b.time == pytest.approx(a.time, rel=1e-12)


def test_hashing_never_speeds_a_collective_up() -> None:
    graph = _cluster(fat_tree(256, _node(), hosts_per_leaf=8, oversubscription=2.0))
    groups = np.arange(256).reshape(-1, 8).T.tolist()
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        a = price_collective(kind, 2.0**28, groups, graph, IDEAL, "ring")
        b = price_collective(kind, 2.0**28, groups, graph, HASH, "ring")
        assert b.time >= a.time * (1 - 1e-12)
        # the bytes reported per link stay the ideal split (conservation)
        assert b.link_utilisation is not None and a.link_utilisation is not None
        assert dict(b.link_utilisation).keys() == dict(a.link_utilisation).keys()


def test_flows_alone_equal_the_hashed_static_pricing() -> None:
    # pp = 1: nothing overlaps, so the flows must reproduce the (hashed) priced step exactly
    training = TrainingSpec(seq_len=2048, global_batch_size=32)
    cluster = get_cluster("dgx-h100", 32)
    plan = ParallelPlan(tp=8, dp=4, zero=1, overlap_param_gather=True)
    prof = default_profile(cluster.accelerator.name)
    base = simulate(LLAMA, training, cluster, plan, profile=prof)
    static = simulate(LLAMA, training, cluster, plan, profile=prof.replace(ecmp_routing="hash"))
    flows = simulate(LLAMA, training, cluster, plan, profile=prof.replace(ecmp_routing="hash"), fabric_sharing="flows")
    assert flows.step_time == pytest.approx(static.step_time, rel=1e-12)
    assert static.step_time >= base.step_time * (1 - 1e-12)
