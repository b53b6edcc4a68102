"""Placement and partition invariants: groups tile the ranks, Megatron order, layer split."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.errors import PlanError
from clustersim.simulator.step.partition import layer_split, stage_chunks
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


@pytest.mark.parametrize("axis", ["tp", "cp", "dp", "pp", "dp+cp", "ep", "edp", "etp"])
def test_groups_partition_every_rank_exactly_once(axis: str) -> None:
    plan = ParallelPlan(tp=2, cp=2, dp=4, pp=2, ep=4)
    g = Placement(plan, 8).groups(axis)
    assert np.array_equal(np.sort(g.ravel()), np.arange(plan.world_size))


def test_megatron_order_tp_fastest_and_nodes_spanned() -> None:
    pl = Placement(ParallelPlan(tp=8, pp=4, dp=4), gpus_per_node=8)
    assert pl.groups("tp")[0].tolist() == list(range(8))
    assert pl.groups("dp")[0].tolist() == [0, 8, 16, 24]
    assert pl.groups("pp")[0].tolist() == [0, 32, 64, 96]
    assert pl.nodes_spanned("tp") == 1 and pl.nodes_spanned("dp") == 4
    other = Placement(ParallelPlan(tp=8, pp=4, dp=4, order="dp-tp-cp-pp"), gpus_per_node=8)
    assert other.groups("dp")[0].tolist() == [0, 1, 2, 3]
    assert other.coords(5) == {"dp": 1, "tp": 1, "cp": 0, "pp": 0}


def test_expert_groups_are_carved_out_of_dp() -> None:
    pl = Placement(ParallelPlan(tp=2, dp=8, ep=4), gpus_per_node=8)
    assert pl.groups("ep").shape == (4, 4) and pl.groups("edp").shape == (4, 4)
    assert pl.groups("ep")[0].tolist() == [0, 1, 2, 3]  # etp=1: consecutive ranks


def test_bad_order_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="must list each of tp, cp, dp, pp once"):
        Placement(ParallelPlan(order="tp-dp-pp"), 8).groups("tp")


@pytest.mark.parametrize("layers,chunks", [(32, 4), (126, 16), (80, 10), (61, 8), (5, 5)])
def test_layer_split_covers_every_layer_once_and_evenly(layers: int, chunks: int) -> None:
    split = layer_split(layers, chunks)
    assert [i for r in split for i in r] == list(range(layers))
    sizes = [len(r) for r in split]
    assert max(sizes) - min(sizes) <= 1
    if layers % chunks:
        assert sizes[0] == min(sizes) and sizes[-1] == min(sizes)  # ends carry embedding and loss


def test_interleaved_chunks_round_robin_over_stages() -> None:
    chunks = stage_chunks(ParallelPlan(pp=4, vpp=2, schedule="interleaved", dp=1), 16)
    assert [k for k, _ in chunks[1]] == [1, 5]
    assert list(chunks[1][1][1]) == [10, 11]


def test_explicit_uneven_split_balances_embedding_and_loss() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", 8)
    training = TrainingSpec(seq_len=2048, global_batch_size=32)
    even = ParallelPlan(tp=1, pp=4, dp=2)
    uneven = ParallelPlan(tp=1, pp=4, dp=2, layer_split=(7, 9, 9, 7))
    assert [len(r) for _, r in [c[0] for c in stage_chunks(uneven, 32)]] == [7, 9, 9, 7]
    # llama3-8b's 128k vocabulary makes the ends heavy: fewer layers there shortens the step
    assert simulate(model, training, cluster, uneven).step_time < simulate(model, training, cluster, even).step_time
    with pytest.raises(PlanError, match="needs pp\\*vpp = 4 positive numbers summing to num_layers = 32"):
        simulate(model, training, cluster, ParallelPlan(tp=1, pp=4, dp=2, layer_split=(8, 8, 8, 9)))
