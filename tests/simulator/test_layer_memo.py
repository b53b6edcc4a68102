"""Phase 1 prices each layer signature once (``step.partition.LayerMemo``) and ``ops_time`` prices
a listed-again op once: both must give what layer-by-layer pricing gives, bit for bit, on models
whose layers differ (hybrid patterns, sliding windows, dense-then-MoE)."""

from __future__ import annotations

import pytest

from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step.compute import (
    COMPUTE_PARTS,
    Pass,
    expert_scales,
    op_time,
    op_time_parts,
    ops_time,
    ops_time_parts,
)
from clustersim.simulator.step.partition import (
    LayerMemo,
    chunk_ops,
    layer_bytes,
    layer_signature,
    partition_plan,
    stage_chunks,
)
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model, layer_ops

MODELS = ("nemotron-3-nano", "gemma2-9b", "gpt-oss-20b", "deepseek-v2", "llama3-8b")
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=16)


def _plan(name: str) -> ParallelPlan:
    model = get_model(name)
    ep = 2 if model.is_moe else 1
    return ParallelPlan(tp=2, pp=2, dp=2 * ep, ep=ep, sp=True, micro_batch=1, recompute="selective")


@pytest.mark.parametrize("name", MODELS)
def test_memoised_chunk_ops_equal_layer_by_layer(name: str) -> None:
    model, plan = get_model(name), _plan(name)
    kw = {"micro_batch": plan.micro_batch, "seq_len": TRAINING.seq_len, "tp": plan.tp, "cp": plan.cp, "ep": plan.ep,
          "etp": plan.etp, "dtype_bytes": TRAINING.activation_bytes, "sp": plan.sp,
          "sort_by_local_expert": plan.moe_dispatcher == "alltoall"}
    memo = LayerMemo(model, TRAINING, plan)
    for stage in stage_chunks(plan, model.num_layers):
        for k, layers in stage:
            got = chunk_ops(model, TRAINING, plan, k, layers, memo)
            for i in layers:
                assert memo.ops(i) == tuple(layer_ops(model, i, attention_kernel=TRAINING.attention_kernel, **kw))
                assert memo.activation_bytes(i) == layer_bytes(model, TRAINING, plan, i)
            assert got == chunk_ops(model, TRAINING, plan, k, layers, LayerMemo(model, TRAINING, plan))
    assert len({layer_signature(model, i) for i in range(model.num_layers)}) == len(memo._ops)


@pytest.mark.parametrize("name", ("nemotron-3-nano", "gemma2-9b"))
def test_layers_of_different_signature_are_not_shared(name: str) -> None:
    model, plan = get_model(name), _plan(name)
    memo = LayerMemo(model, TRAINING, plan)
    kinds = {layer_signature(model, i): i for i in range(model.num_layers)}
    assert len(kinds) >= 2  # the model has layers that differ
    ops = {sig: memo.ops(i) for sig, i in kinds.items()}
    assert len(set(ops.values())) == len(ops)  # each signature its own ops


@pytest.mark.parametrize("name", MODELS)
def test_ops_time_of_shared_ops_is_the_sum_of_each(name: str) -> None:
    model, plan = get_model(name), _plan(name)
    acc = get_cluster("dgx-h100", 8).accelerator
    prof = default_profile(acc.name)
    part = partition_plan(model, TRAINING, plan)
    passes: tuple[Pass, ...] = ("fwd", "bwd_input", "bwd_weight")
    for ch in (c for stage in part.stages for c in stage.chunks):
        assert len({id(o) for o in ch.ops}) < len(ch.ops)  # layers of one signature share their ops
        for which in passes:
            each = [op_time(o, acc, prof, TRAINING.precision, which, *expert_scales(o, prof, 1.3)) for o in ch.ops]
            assert ops_time(ch.ops, acc, prof, TRAINING.precision, which, 1.3) == sum(each)
            split = dict.fromkeys(COMPUTE_PARTS, 0.0)
            for o in ch.ops:
                for k, v in op_time_parts(o, acc, prof, TRAINING.precision, which, *expert_scales(o, prof, 1.3)).items():
                    split[k] += v
            assert ops_time_parts(ch.ops, acc, prof, TRAINING.precision, which, 1.3) == split
