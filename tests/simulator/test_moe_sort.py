"""The all-to-all dispatcher's sort by local expert (``workloads.blocks.expert_sort_ops``, issue 13).

Megatron-Core's ``MoEAlltoAllTokenDispatcher`` copies every received token row into local-expert
order after the all-to-all and back before the combine when a rank holds several experts. Closed
forms: the bytes of each copy (one read and one write of the received rows, the backward the
same), none with one local expert or a flex dispatcher, and the layer's forward time grows by
exactly the two copies' memory time; no extra kernel launches (counted with the marker).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step.compute import op_time
from clustersim.simulator.step.host import kernel_launches
from clustersim.simulator.step.partition import chunk_ops
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

QWEN = get_model("qwen3-30b-a3b")  # 128 experts, hidden 2048, top-8
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=64, precision="bf16")
EP8 = ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1)


def _layer(plan: ParallelPlan) -> list:
    return list(chunk_ops(QWEN, TRAINING, plan, -1, range(1, 2)))


def test_each_copy_moves_the_received_rows_once_each_way() -> None:
    ops = _layer(EP8)
    sorts = [o for o in ops if o.role == "expert_sort"]
    assert [o.name for o in sorts] == ["moe_sort", "moe_unsort"]
    rows = 4096 * QWEN.top_k  # tokens of one micro-batch x top-k reach this rank's experts (balanced)
    want = 2 * rows * QWEN.hidden_size * TRAINING.activation_bytes  # one read + one write, bf16
    for o in sorts:
        assert o.bytes == pytest.approx(want) and o.bwd_bytes == pytest.approx(want) and o.flops == 0
    names = [o.name for o in ops]
    assert names.index("moe_dispatch") < names.index("moe_sort") < names.index("expert_fc1")
    assert names.index("expert_fc2") < names.index("moe_unsort") < names.index("moe_combine")


def test_no_copy_with_one_local_expert_or_a_flex_dispatcher() -> None:
    assert not [o for o in _layer(replace(EP8, dp=128, ep=128)) if o.role == "expert_sort"]
    for kind in ("deepep", "hybridep"):
        assert not [o for o in _layer(replace(EP8, moe_dispatcher=kind)) if o.role == "expert_sort"]


def test_the_layer_grows_by_the_two_copies_and_launches_nothing_more() -> None:
    acc = get_cluster("dgx-b200", 8).accelerator
    prof = default_profile(acc.name)
    with_sort, without = _layer(EP8), _layer(replace(EP8, moe_dispatcher="deepep"))
    sorts = [o for o in with_sort if o.role == "expert_sort"]
    copy = 2 * 4096 * QWEN.top_k * QWEN.hidden_size * 2 / (acc.hbm_bandwidth * prof.memory_efficiency)
    for o in sorts:
        assert op_time(o, acc, prof, "bf16", "fwd") == pytest.approx(copy + prof.kernel_overhead)
        assert op_time(o, acc, prof, "bf16", "bwd_input") == pytest.approx(copy + prof.kernel_overhead)
        assert kernel_launches(o, "fwd", 16, False, 8) == 0 and kernel_launches(o, "bwd", 16, False, 8) == 0
    rest = [o for o in with_sort if o.role != "expert_sort"]
    assert [o.name for o in rest] == [o.name for o in without]
