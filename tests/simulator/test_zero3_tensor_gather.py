"""ZeRO-3 parameter collectives tensor by tensor (``param_gather_unit = tensor``, DeepSpeed ZeRO-3 of
2021): the calls listed, their copies' closed form, the bounds a comm-bound step must respect, and
the validation rule that reads a DeepSpeed ZeRO-3 row with them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.errors import PlanError
from clustersim.simulator.network import CommPricer
from clustersim.simulator.plan import ParallelPlan, Placement, plan_from_mapping
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step import Costing, step_calls
from clustersim.simulator.step.lower_dp import tensor_copies_time
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

MODEL = get_model("gpt-1.7b")
TRAINING = TrainingSpec(seq_len=2048, global_batch_size=64)
PROFILE = default_profile("a100")


def _plan(dp: int, **kw: object) -> ParallelPlan:
    base = dict(tp=1, pp=1, dp=dp, zero=3, micro_batch=64 // dp, recompute="full")
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _costing(plan: ParallelPlan) -> Costing:
    cluster = get_cluster("a100", plan.world_size)
    pricer = CommPricer(cluster, Placement(plan, cluster.gpus_per_node), PROFILE, "analytic")
    return Costing(MODEL, TRAINING, plan, cluster.accelerator, PROFILE, pricer)


def _gathers(plan: ParallelPlan) -> int:
    return sum(c.count for c in step_calls(_costing(plan))[0] if c.kind == "all_gather")


def test_one_gather_per_tensor_above_the_persistence_threshold() -> None:
    layers = MODEL.num_layers
    module = _gathers(_plan(16))
    # per layer and micro-batch two gathers (forward, backward); the root unit once
    assert module == 2 * layers + 1
    # tensor by tensor: qkv, attn_out, fc1, fc2 and the two norms, each above 0 elements
    assert _gathers(_plan(16, param_gather_unit="tensor")) == 2 * 6 * layers + 1
    # the norms (2 h elements) persist under DeepSpeed's default 1e5: 4 GEMM weights per layer
    assert _gathers(_plan(16, param_gather_unit="tensor", param_persistence_threshold=100_000)) == 2 * 4 * layers + 1


def test_tensor_gathers_move_the_same_bytes_as_module_gathers_without_persistence() -> None:
    def moved(plan: ParallelPlan) -> float:
        return sum(c.size * c.count for c in step_calls(_costing(plan))[0] if c.kind == "all_gather")
    assert moved(_plan(16, param_gather_unit="tensor")) == pytest.approx(moved(_plan(16)), rel=1e-12)


def test_list_copies_closed_form() -> None:
    # n copy ops of the per-op overhead, and the buffer read and written once through HBM
    prof = PROFILE.model_copy(update={"kernel_overhead": 10e-6})
    plan = _plan(16, param_gather_unit="tensor")
    c = replace(_costing(plan), profile=prof)
    size = 1e9
    hbm = c.accelerator.hbm_bandwidth * prof.memory_efficiency
    assert tensor_copies_time(c, size) == pytest.approx(16 * 10e-6 + 2 * size / hbm)
    # linear in the shard degree at a fixed size: the per-rank views
    c32 = replace(_costing(_plan(32, param_gather_unit="tensor")), profile=prof)
    assert tensor_copies_time(c32, size) - tensor_copies_time(c, size) == pytest.approx(16 * 10e-6)
    assert tensor_copies_time(_costing(_plan(16)), size) == 0.0  # one flat buffer: no copies


def _step(plan: ParallelPlan) -> float:
    cluster = get_cluster("a100", plan.world_size)
    return simulate(MODEL, TRAINING, cluster, plan, profile=PROFILE, fidelity="analytic").step_time


def test_unoverlapped_tensor_gathers_bound_the_step_from_below() -> None:
    # every call of a synchronised ZeRO-3 step adds to the compute: the step is at least the
    # compute plus each call's bytes over the fastest link a GPU has (NVLink peak)
    plan = _plan(16, param_gather_unit="tensor", param_persistence_threshold=100_000, overlap_param_gather=False)
    nvlink = get_cluster("a100", 16).accelerator.nvlink_bandwidth
    moved = sum(c.size * c.count * 15 / 16 for c in step_calls(_costing(plan))[0]
                if c.kind in ("all_gather", "reduce_scatter"))
    cluster = get_cluster("a100", 16)
    res = simulate(MODEL, TRAINING, cluster, plan, profile=PROFILE, fidelity="analytic")
    assert res.step_time >= res.breakdown["compute"] + moved / nvlink
    # and the tensor-by-tensor step is never faster than the flat one (more calls, same bytes)
    assert res.step_time >= _step(replace(plan, param_gather_unit="module"))


def test_per_rank_copies_flatten_strong_scaling() -> None:
    # with a per-op overhead the copies grow with dp while the compute per GPU halves: doubling dp
    # at a fixed global batch cannot halve a ZeRO-3 tensor step, and gains less than the flat one
    prof = PROFILE.model_copy(update={"kernel_overhead": 20e-6})

    def step(plan: ParallelPlan) -> float:
        cl = get_cluster("a100", plan.world_size)
        return simulate(MODEL, TRAINING, cl, plan, profile=prof, fidelity="analytic").step_time
    kw = dict(param_gather_unit="tensor", param_persistence_threshold=100_000, overlap_param_gather=False)
    t16, t32 = step(_plan(16, **kw)), step(_plan(32, **kw))
    f16, f32 = step(_plan(16, overlap_param_gather=False)), step(_plan(32, overlap_param_gather=False))
    assert t32 > t16 / 2
    assert t32 / t16 > f32 / f16


def test_bad_gather_unit_names_the_field() -> None:
    with pytest.raises(PlanError, match="param_gather_unit"):
        cluster = get_cluster("a100", 16)
        simulate(MODEL, TRAINING, cluster, plan_from_mapping({"dp": 16, "zero": 3, "micro_batch": 4,
                                                              "param_gather_unit": "layer"}))
    with pytest.raises(PlanError, match="param_persistence_threshold"):
        simulate(MODEL, TRAINING, get_cluster("a100", 16), _plan(16, param_persistence_threshold=-1))


def test_deepspeed_zero3_rows_read_with_tensor_gathers() -> None:
    from clustersim.simulator.calibration.validate import load_runs, scenario_for_row

    runs = load_runs()
    ds = runs[runs.framework.str.contains("DeepSpeed", na=False)]
    assert len(ds) > 0
    for _, row in ds.iterrows():
        plan = scenario_for_row(row.to_dict()).plan
        assert (plan.param_gather_unit, plan.param_persistence_threshold, plan.overlap_param_gather,
                plan.grad_dtype_bytes) == ("tensor", 100_000, False, 2)
    fsdp = runs[runs.zero_fsdp.str.contains("FULL_SHARD", na=False)].iloc[0]
    assert scenario_for_row(fsdp.to_dict()).plan.param_gather_unit == "module"
