"""ZeRO-1/2 parameter all-gathers split like the gradient reduce (issue 13): the dense weights over
dp, the routed experts' over the expert-DP group (Megatron-LM distributed_data_parallel.py: expert
parameters live in their own buffers on ``intra_expt_dp_group``, and ``start_param_sync`` gathers
both bucket groups). Expected times are priced with the same ``CommPricer`` by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.search.estimate import Estimator
from clustersim.simulator.step.compute import is_routed_expert
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.costs import ChunkCost
from clustersim.simulator.step.lower import lower, step_calls
from clustersim.simulator.step.partition import partition_plan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import ModelSpec, TrainingSpec, get_model

TRAIN = TrainingSpec(seq_len=4096, global_batch_size=16)
MOE = replace(get_model("mixtral-8x7b"), num_layers=2)  # 8 experts top-2: ep 8 or 2 on one node


def _costing(model: ModelSpec, plan: ParallelPlan) -> Costing:
    cluster = get_cluster("dgx-h100", plan.world_size)
    prof = default_profile(cluster.accelerator.name)
    return Costing(model, TRAIN, plan, cluster.accelerator, prof,
                   CommPricer(cluster, Placement(plan, cluster.gpus_per_node), prof, "analytic"))


def _params(model: ModelSpec, plan: ParallelPlan) -> tuple[float, float]:
    """(dense, routed-expert) parameters of the one chunk on one device."""
    ops = partition_plan(model, TRAIN, plan).stages[0].chunks[0].ops
    expert = float(sum(o.params for o in ops if is_routed_expert(o)))
    return float(sum(o.params for o in ops)) - expert, expert


def _bucketed(c: Costing, params: float, axis: str) -> float:
    """Seconds of ``params`` weights all-gathered over ``axis`` in ceil(bytes / bucket_size) buckets."""
    nbytes = params * c.training.param_bytes
    n = math.ceil(nbytes / c.plan.bucket_size)
    return n * c.pricer.time("all_gather", nbytes / n, axis)  # type: ignore[arg-type]


def _chunk(c: Costing) -> ChunkCost:
    return lower(c).stages[0].chunks[0]


def test_experts_are_not_gathered_when_each_device_holds_its_own() -> None:
    plan = ParallelPlan(tp=1, pp=1, dp=8, ep=8, zero=1, micro_batch=1)
    assert plan.expert_dp == 1
    c = _costing(MOE, plan)
    dense, expert = _params(MOE, plan)
    assert expert > dense  # the experts are most of Mixtral's weights: the old gather over dp had them
    ch = _chunk(c)
    assert {call.axis for call in ch.param_gather_calls} == {"dp"}
    assert ch.param_gather == pytest.approx(_bucketed(c, dense, "dp"), rel=1e-12)
    assert ch.param_gather < _bucketed(c, dense + expert, "dp")


def test_expert_part_is_priced_over_the_expert_dp_group() -> None:
    plan = ParallelPlan(tp=1, pp=1, dp=8, ep=2, zero=1, micro_batch=1)
    assert plan.expert_dp == 4
    c = _costing(MOE, plan)
    dense, expert = _params(MOE, plan)
    ch = _chunk(c)
    assert [call.axis for call in ch.param_gather_calls] == ["dp", "edp"]
    want = _bucketed(c, dense, "dp") + _bucketed(c, expert, "edp")
    assert ch.param_gather == pytest.approx(want, rel=1e-12)
    sizes = {call.axis: call.size * call.count for call in ch.param_gather_calls}
    assert sizes == pytest.approx({"dp": dense * 2, "edp": expert * 2})  # bf16 weights, conserved
    assert all(call.size <= plan.bucket_size for call in ch.param_gather_calls)
    # overlapped, the first forward waits for at most the whole gather and at least nothing
    assert 0 < ch.param_gather_lead <= ch.param_gather
    # the collectives table carries both parts
    table = {(call.kind, call.axis) for stage in step_calls(c) for call in stage}
    assert {("all_gather", "dp"), ("all_gather", "edp")} <= table


def test_dense_model_gather_unchanged() -> None:
    model = replace(get_model("llama3-8b"), num_layers=2)
    plan = ParallelPlan(tp=1, pp=1, dp=8, zero=1, micro_batch=1)
    c = _costing(model, plan)
    dense, expert = _params(model, plan)
    assert expert == 0
    ch = _chunk(c)
    assert len(ch.param_gather_calls) == 1 and ch.param_gather_calls[0].axis == "dp"
    assert ch.param_gather == pytest.approx(_bucketed(c, dense, "dp"), rel=1e-12)


def test_both_parts_run_as_flows_one_after_another() -> None:
    plan = ParallelPlan(tp=1, pp=1, dp=8, ep=2, zero=1, micro_batch=1)
    cluster = get_cluster("dgx-h100", 8)
    static = simulate(MOE, TRAIN, cluster, plan)
    flows = simulate(MOE, TRAIN, cluster, plan, fabric_sharing="flows")
    spans = [iv for iv in flows.intervals if iv.label == "param gather 0" and iv.category == "dp_comm"]
    assert len(spans) == 2  # the dense and the expert all-gather, each its own transfer
    alone = sum(iv.end - iv.start for iv in static.intervals if iv.label == "param gather 0")
    # alone on the fabric the two flows take (about) their priced times back to back
    assert sum(iv.end - iv.start for iv in spans) == pytest.approx(alone, rel=0.05)


def test_search_estimate_gathers_the_experts_over_edp_too() -> None:
    cluster = get_cluster("dgx-h100", 8)
    est = Estimator(MOE, TRAIN, cluster, default_profile(cluster.accelerator.name))
    dense, expert = 1e9, 4e9
    own = ParallelPlan(tp=1, pp=1, dp=8, ep=8, zero=1, micro_batch=1)  # edp 1: experts not sharded
    shared = ParallelPlan(tp=1, pp=1, dp=8, ep=2, zero=1, micro_batch=1)  # edp 4
    dense_only = est.comm("all_gather", dense * 2, 8, 1)
    assert est._param_gather(own, dense, expert) == pytest.approx(dense_only)
    assert est._param_gather(shared, dense, expert) == pytest.approx(dense_only + est.comm("all_gather", expert * 2, 4, 2))
    assert est._param_gather(replace(shared, zero=0), dense, expert) == 0.0
