"""Expert placement (issue 13 item 6): the expert mesh follows ``plan.order`` as Megatron-Core's expert
rank generator does (tp -> etp, dp -> edp, cp left out), so the EP group's position in the order
decides which tier its all-to-all crosses; ETP and EP fold into TP and DP. Closed forms for the bytes
per tier of a flat all-to-all: a GPU sends (n - 1)/n of its T*k*h payload, (g - 1)/n over NVLink and
(n - g)/n over the network, for an EP group of n ranks with g of them in one NVLink domain."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.errors import PlanError
from clustersim.simulator.plan.checks import check_plan
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.dispatch import dispatch_bytes, ep_shape
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

MODEL = get_model("qwen3-30b-a3b")  # 128 experts, top-8
CLUSTER = get_cluster("dgx-h100", 16)  # two 8-GPU NVLink domains
TOKENS, TOKEN_BYTES = 4096.0, 2.0 * MODEL.hidden_size


def _tiers(plan: ParallelPlan) -> tuple[float, float, list[int]]:
    placement = Placement(plan, CLUSTER.gpus_per_node)
    tiers = dispatch_bytes("alltoall", MODEL, TOKENS, TOKEN_BYTES, ep_shape(placement, CLUSTER))
    return tiers.nvlink, tiers.network, [int(r) for r in placement.groups("ep")[0]]


def test_ep_before_dp_keeps_the_group_inside_a_node() -> None:
    nvl, net, group = _tiers(ParallelPlan(dp=16, ep=8, order="tp-cp-ep-dp-pp"))
    assert group == list(range(8))
    payload = TOKENS * MODEL.top_k * TOKEN_BYTES
    assert net == 0.0 and nvl == pytest.approx(payload * 7 / 8)


def test_ep_after_dp_strides_the_group_across_nodes() -> None:
    nvl, net, group = _tiers(ParallelPlan(dp=16, ep=8, order="tp-cp-dp-ep-pp"))
    assert group == list(range(0, 16, 2))  # expert data-parallel rank fastest: every other GPU
    payload = TOKENS * MODEL.top_k * TOKEN_BYTES
    assert nvl == pytest.approx(payload * 3 / 8) and net == pytest.approx(payload * 4 / 8)  # g = 4 per node
    assert nvl + net == pytest.approx(payload * 7 / 8)  # the same bytes leave the GPU, another tier


def test_ep_folds_inside_tp_and_etp_takes_the_fastest_ranks() -> None:
    # tp 4 with etp 1: the four TP ranks of a replica are four EP ranks (MoE parallel folding)
    plan = ParallelPlan(tp=4, dp=4, ep=8, sp=True)
    p = Placement(plan, CLUSTER.gpus_per_node)
    assert [int(r) for r in p.groups("ep")[0]] == list(range(8))
    assert p.groups("tp")[0].tolist() == [0, 1, 2, 3]
    # etp 2: expert tensor-parallel pairs fastest, EP strided by 2, the rest expert data-parallel
    q = Placement(ParallelPlan(tp=4, dp=4, ep=4, etp=2, sp=True), CLUSTER.gpus_per_node)
    assert q.groups("etp")[0].tolist() == [0, 1] and q.groups("ep")[0].tolist() == [0, 2, 4, 6]
    assert q.groups("edp")[0].tolist() == [0, 8]
    # every rank is in exactly one group of each expert axis
    for axis in ("etp", "ep", "edp"):
        assert sorted(np.concatenate(q.groups(axis)).tolist()) == list(range(16))  # type: ignore[arg-type]


def test_an_order_without_ep_places_it_before_dp() -> None:
    a = Placement(ParallelPlan(dp=16, ep=8, order="tp-cp-dp-pp"), CLUSTER.gpus_per_node)
    b = Placement(ParallelPlan(dp=16, ep=8), CLUSTER.gpus_per_node)
    assert a.expert_order == b.expert_order == ("etp", "ep", "edp", "pp")
    assert Placement(ParallelPlan(dp=16, ep=8, order="tp-cp-dp-ep-pp"), 8).expert_order == ("etp", "edp", "ep", "pp")


def test_pp_not_last_needs_the_expert_dp_to_equal_dp() -> None:
    training = TrainingSpec(seq_len=4096, global_batch_size=64)
    plan = ParallelPlan(pp=2, dp=8, ep=8, order="tp-cp-ep-pp-dp")
    with pytest.raises(PlanError, match="put pp last"):
        check_plan(MODEL, training, CLUSTER, plan)
    check_plan(MODEL, training, CLUSTER, ParallelPlan(pp=2, dp=8, ep=8))
