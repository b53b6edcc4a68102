"""Host launch cost (``step.host``, issue 13): the CPU issues kernels ahead of the GPU until a
device-to-host sync; a dropless MoE dispatcher syncs in every MoE layer's forward
(Megatron-Core ``MoEAlltoAllTokenDispatcher``), drop-and-pad does not.

Closed forms of the combining rule, the kernel counts, the sync rule, and the simulated step:
unchanged at ``host_launch_time`` 0 (the default), host-bound once the launches outlast the
kernels, monotone in the launch cost, and a sync costs time only where the GPU and the host bind
on different sides of it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import HOST_LAUNCH_RANGE, default_profile
from clustersim.simulator.step.host import host_bound, kernel_launches, layer_syncs_host, sync_pieces
from clustersim.simulator.step.partition import chunk_ops
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, WorkloadError, get_model

QWEN = get_model("qwen3-30b-a3b")  # 128 experts of 768, top-8, 48 MoE layers
CLUSTER = get_cluster("dgx-b200", 8)
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=64, precision="bf16")
PLAN = ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1)


def _step(model: object = QWEN, plan: ParallelPlan = PLAN, launch: float = 0.0) -> float:
    prof = default_profile(CLUSTER.accelerator.name).replace(host_launch_time=launch)
    return simulate(model, TRAINING, CLUSTER, plan, profile=prof, fidelity="analytic").step_time  # type: ignore[arg-type]


def test_without_syncs_a_pass_takes_the_larger_total() -> None:
    gpu, host = [3.0, 1.0, 2.0], [1.0, 4.0, 0.5]
    assert host_bound(gpu, host, [False] * 3) == pytest.approx(max(sum(gpu), sum(host)))


def test_a_sync_after_every_piece_takes_the_larger_side_of_each() -> None:
    gpu, host = [3.0, 1.0, 2.0], [1.0, 4.0, 0.5]
    assert host_bound(gpu, host, [True] * 3) == pytest.approx(3.0 + 4.0 + 2.0)
    # one sync after the first piece: max(3, 1) + max(1 + 2, 4 + 0.5)
    assert host_bound(gpu, host, [True, False, False]) == pytest.approx(3.0 + 4.5)
    assert host_bound(gpu, host, [True] * 3) >= host_bound(gpu, host, [False] * 3)


def test_routed_expert_gemms_launch_one_kernel_per_local_expert_unless_fused() -> None:
    ops = chunk_ops(QWEN, TRAINING, PLAN, -1, range(1, 2))
    fc1 = next(o for o in ops if o.role == "routed_expert" and o.kind == "gemm")
    assert kernel_launches(fc1, "fwd", 16, False) == 16
    assert kernel_launches(fc1, "bwd_input", 16, False) == kernel_launches(fc1, "bwd_weight", 16, False) == 16
    assert kernel_launches(fc1, "bwd", 16, False) == 32
    assert kernel_launches(fc1, "fwd", 16, True) == 1
    norm = next(o for o in ops if o.role == "input_norm")
    assert kernel_launches(norm, "fwd", 16, False) == 1 and kernel_launches(norm, "bwd_weight", 16, False) == 0


def test_dropless_and_unpadded_capacity_sync_drop_and_pad_does_not() -> None:
    ops = chunk_ops(QWEN, TRAINING, PLAN, -1, range(1, 2))
    assert layer_syncs_host(QWEN, ops)
    assert layer_syncs_host(replace(QWEN, capacity_factor=1.0), ops)
    assert not layer_syncs_host(replace(QWEN, capacity_factor=1.0, pad_to_capacity=True), ops)
    dense = get_model("llama3-8b")
    assert not layer_syncs_host(dense, chunk_ops(dense, TRAINING, ParallelPlan(dp=8), -1, range(1, 2)))
    before, after = sync_pieces(QWEN, ops)
    assert before[1] and not after[1] and after[0][0].role == "dispatch"
    assert [o.name for o in before[0]] + [o.name for o in after[0]] == [o.name for o in ops]


def test_padding_needs_a_capacity() -> None:
    with pytest.raises(WorkloadError, match="pad_to_capacity"):
        replace(QWEN, pad_to_capacity=True).validate()


def test_at_the_default_nothing_changes_and_a_cited_launch_cost_does_not_bind_at_micro_batch_4() -> None:
    assert default_profile(CLUSTER.accelerator.name).host_launch_time == 0.0
    mb4 = replace(PLAN, micro_batch=4, recompute="full")
    assert _step(plan=mb4, launch=HOST_LAUNCH_RANGE[0]) == pytest.approx(_step(plan=mb4), rel=1e-12)


def test_the_step_grows_with_the_launch_cost_once_the_host_binds() -> None:
    steps = [_step(launch=x) for x in (0.0, 25e-6, 60e-6, 120e-6)]
    assert steps == sorted(steps) and steps[-1] > steps[0] * 1.5
    # far past the GPU: the forward grows by the launches, at most kernels x launch per layer
    assert steps[-1] - steps[-2] > 0.5 * (steps[-2] - steps[1])


def test_a_sync_costs_time_only_through_the_split_it_makes() -> None:
    # with the host binding on one side of the sync and the GPU on the other, drop-and-pad (no sync)
    # is faster than dropless at the same launch cost; at launch 0 the two are the same step
    padded = replace(QWEN, capacity_factor=4.0, pad_to_capacity=True)  # no token dropped at balance
    unpadded = replace(QWEN, capacity_factor=4.0)
    assert _step(padded) == pytest.approx(_step(unpadded), rel=1e-12)
    pairs = [(_step(padded, launch=x), _step(unpadded, launch=x)) for x in (10e-6, 15e-6, 20e-6, 40e-6)]
    assert all(p <= u * (1 + 1e-12) for p, u in pairs)  # a sync never makes a pass faster
    assert any(p < u for p, u in pairs)  # and costs time where the sides differ


def test_fused_grouped_mlp_launches_fewer_kernels() -> None:
    fused = replace(PLAN, moe_fused_grouped_mlp=True)
    prof = default_profile(CLUSTER.accelerator.name).replace(expert_efficiency=1.0)
    at = {x: [simulate(QWEN, TRAINING, CLUSTER, p, profile=prof.replace(host_launch_time=x),
                       fidelity="analytic").step_time for p in (PLAN, fused)] for x in (0.0, 60e-6)}
    # at expert efficiency 1 the fused GPU time is less only by the SwiGLU's HBM reads (test_fp8_cast.py);
    # with a host cost per launch the gap grows by the launches it saves
    assert at[0.0][1] < at[0.0][0]
    assert at[60e-6][0] - at[60e-6][1] > at[0.0][0] - at[0.0][1]
