"""Kernel launches of a Megatron-Core MoE layer (``step.host.MOE_PATH_LAUNCHES``, issue 13).

The counts are read from Megatron-Core's router, dispatcher and permute code (locators in
``step.host``); these tests hold the simulator's layer to them: a layer's launches are the sum of
its ops' cited counts (closed form), the backward is the input- plus the weight-gradient pass, the
all-to-alls launch only with EP, the sort by local expert only with several local experts, and the
host time of a host-bound pass is the launches times the launch cost.
"""

from __future__ import annotations

import pytest

from clustersim.simulator.calibration.validate import load_runs
from clustersim.simulator.calibration.validate_rules import TOKEN_DROP_CAPACITY, model_for_row
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.graphs import layer_launches
from clustersim.simulator.step.host import MOE_PATH_LAUNCHES, Launches, host_excess, kernel_launches, layer_syncs_host
from clustersim.simulator.step.partition import chunk_ops
from clustersim.workloads import Op, TrainingSpec, get_model

QWEN = get_model("qwen3-30b-a3b")  # 128 experts of 768, top-8
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=64, precision="bf16")
EP8 = ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1)
MOE_ROLES = ("router", "permute", "dispatch", "expert_sort", "routed_expert", "combine", "unpermute")


def _layer(plan: ParallelPlan) -> list[Op]:
    return list(chunk_ops(QWEN, TRAINING, plan, -1, range(1, 2)))


def _launches(ops: list[Op], which: str, local: int, ep: int, fused: bool = False) -> int:
    return sum(kernel_launches(o, which, local, fused, ep) for o in ops)  # type: ignore[arg-type]


def test_a_moe_layer_forward_launches_the_cited_kernels_of_each_op() -> None:
    ops, local = _layer(EP8), 128 // 8
    others = sum(1 for o in ops if o.role not in MOE_ROLES)  # one kernel each (norms, GEMMs, attention)
    c = MOE_PATH_LAUNCHES
    expected = (others + c["router"].fwd + c["permute"].fwd
                + c["dispatch"].fwd + 1  # two all-to-alls, then the fused sort by local expert
                + local + 1 + local  # fc1 one GEMM per local expert, the activation, fc2
                + c["combine"].fwd + 1  # the unsort by local expert, one all-to-all
                + c["unpermute"].fwd)
    assert _launches(ops, "fwd", local, 8) == expected
    assert c["router"].fwd == 5 and c["permute"].fwd == 13 and c["dispatch"].fwd == 2  # as read


def test_the_backward_is_the_input_and_the_weight_gradient_passes() -> None:
    ops, local = _layer(EP8), 16
    for o in ops:
        both = kernel_launches(o, "bwd_input", local, False, 8) + kernel_launches(o, "bwd_weight", local, False, 8)
        assert kernel_launches(o, "bwd", local, False, 8) == both
    router = next(o for o in ops if o.role == "router")
    assert kernel_launches(router, "bwd_weight", local, False, 8) == 1  # the gating GEMM's wgrad
    assert kernel_launches(router, "bwd_input", local, False, 8) == MOE_PATH_LAUNCHES["router"].bwd_input


def test_all_to_alls_launch_only_with_ep_and_the_sort_only_with_several_local_experts() -> None:
    no_ep = _layer(ParallelPlan(dp=8, micro_batch=1, zero=1))
    dispatch = next(o for o in no_ep if o.role == "dispatch")
    permute = next(o for o in no_ep if o.role == "permute")
    assert kernel_launches(dispatch, "fwd", 128, False, 1) == 1  # the sort alone
    assert kernel_launches(dispatch, "fwd", 1, False, 1) == 0  # one expert, no EP: nothing
    assert kernel_launches(dispatch, "fwd", 1, False, 8) == MOE_PATH_LAUNCHES["dispatch"].fwd
    assert kernel_launches(permute, "fwd", 128, False, 1) < kernel_launches(permute, "fwd", 16, False, 8)
    # EP adds launches to a layer, whatever the expert count
    assert _launches(_layer(EP8), "fwd", 16, 8) - 2 * 16 > _launches(no_ep, "fwd", 128, 1) - 2 * 128


def test_the_fused_grouped_mlp_replaces_the_per_expert_gemms_by_one_each() -> None:
    ops = _layer(EP8)
    assert _launches(ops, "fwd", 16, 8) - _launches(ops, "fwd", 16, 8, fused=True) == 2 * (16 - 1)
    assert _launches(ops, "bwd", 16, 8) - _launches(ops, "bwd", 16, 8, fused=True) == 4 * (16 - 1)


def _counts(local: int, ep: int) -> Launches:
    """Per-op launches without CUDA graphs (``graphs.layer_launches`` with no scope)."""
    return lambda ops, which: layer_launches(ops, which, (), local, False, ep)


def test_with_free_kernels_the_host_adds_launches_times_the_cost() -> None:
    ops, launch = _layer(EP8), 25e-6
    out = host_excess(QWEN, [ops], [ops], lambda _ops, _which: 0.0, launch, _counts(16, 8))
    assert out.fwd == pytest.approx(launch * _launches(ops, "fwd", 16, 8))
    assert out.recompute == pytest.approx(out.fwd)
    assert out.bwd == pytest.approx(launch * (_launches(ops, "bwd_input", 16, 8) + _launches(ops, "bwd_weight", 16, 8)))
    # more local experts, more launches (the unfused GroupedLinear issues one GEMM per expert)
    assert _launches(ops, "fwd", 32, 8) == _launches(ops, "fwd", 16, 8) + 2 * 16


def _published(row_id: int) -> dict[str, object]:
    runs = load_runs()
    return {str(k): v for k, v in runs[runs.row_id == row_id].iloc[0].to_dict().items()}


def test_a_token_drop_run_is_padded_to_capacity_one_and_so_never_syncs() -> None:
    drop, dropless = _published(561), _published(349)  # Qwen3-30B-A3B on 8 B200: '(tokendrop)' and plain
    assert "tokendrop" in str(drop["model"]).lower() and "tokendrop" not in str(dropless["model"]).lower()
    model = model_for_row(drop, [])
    assert model.capacity_factor == TOKEN_DROP_CAPACITY == 1.0 and model.pad_to_capacity
    plain = model_for_row(dropless, [])
    assert plain.capacity_factor is None and not plain.pad_to_capacity
    ops = _layer(EP8)
    assert layer_syncs_host(plain, ops) and not layer_syncs_host(model, ops)
    # without the sync the host overlaps the GPU across the whole pass: never slower than dropless
    gpu = lambda chunk, _which: 1e-4 * len(chunk)  # noqa: E731 - a stand-in GPU time per op
    excess = {x: [host_excess(m, [ops] * 4, [], gpu, x, _counts(16, 8)).fwd for m in (model, plain)]
              for x in (5e-6, 25e-6, 60e-6)}
    assert all(padded <= synced + 1e-15 for padded, synced in excess.values())
    assert excess[25e-6][0] < excess[25e-6][1]  # the host binds before the sync, the GPU after it
