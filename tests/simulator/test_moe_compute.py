"""Routed-expert compute by shape (``step.compute``) and the expert load (``step.dispatch``):
grouped GEMMs priced per expert call, monotone in tokens per expert, memory bound when small,
compute bound when large; imbalance, capacity factor, a seeded imbalance draw."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.profile import default_profile
from clustersim.simulator.step.compute import op_time, ops_time
from clustersim.simulator.step.host import kernel_launches
from clustersim.simulator.step.dispatch import draw_expert_imbalance, expert_load
from clustersim.topologies import get_accelerator
from clustersim.workloads import get_model, layer_ops
from clustersim.workloads.op_primitives import gemm_op

H100 = get_accelerator("h100")
PROFILE = default_profile("h100")


def _experts(m: float, count: int = 16, h: int = 2048, f: int = 768) -> object:
    """Qwen3-30B-A3B-like fc1 (2 x 768 columns of 2048) of ``count`` local experts, m tokens each."""
    return gemm_op("expert_fc1", m, 2 * f, h, 2, params=count * h * 2 * f, count=count, role="routed_expert")


@pytest.mark.parametrize("which", ["fwd", "bwd_input", "bwd_weight"])
def test_grouped_gemm_time_is_monotone_in_tokens_per_expert(which: str) -> None:
    times = [op_time(_experts(m), H100, PROFILE, "bf16", which) for m in (8, 32, 128, 512, 2048, 8192, 32768)]
    assert all(b > a for a, b in zip(times, times[1:]))


def test_small_experts_are_memory_bound_and_large_ones_compute_bound() -> None:
    small, large = _experts(16), _experts(32768)
    memory = small.bytes / (H100.hbm_bandwidth * PROFILE.memory_efficiency) + small.calls * PROFILE.kernel_overhead
    assert op_time(small, H100, PROFILE, "bf16") == pytest.approx(memory)  # the weights dominate
    t_large = op_time(large, H100, PROFILE, "bf16")
    assert t_large > 1.5 * large.bytes / (H100.hbm_bandwidth * PROFILE.memory_efficiency)
    # per token, the large experts come out faster: better shape, weights amortised
    assert t_large / 32768 < op_time(small, H100, PROFILE, "bf16") / 16


def test_an_expert_call_is_one_experts_gemm_not_the_group() -> None:
    # same FLOPs and bytes as one dense GEMM of all the tokens would have more: the grouped op is
    # priced at one expert's shape, so it runs slower than a dense GEMM of the group's total size
    grouped = _experts(256, count=16)
    dense = gemm_op("mlp_fc1", 256 * 16, 2 * 768, 2048, 2, params=2048 * 2 * 768)
    assert grouped.flops == pytest.approx(dense.flops)
    assert op_time(grouped, H100, PROFILE, "bf16") > op_time(dense, H100, PROFILE, "bf16")


def test_imbalance_stretches_only_the_routed_experts() -> None:
    ops = list(layer_ops(get_model("qwen3-30b-a3b"), 0, micro_batch=1, seq_len=4096, ep=8))
    experts = [o for o in ops if o.role == "routed_expert"]
    others = [o for o in ops if o.role != "routed_expert"]
    assert experts and others
    for sel, grows in ((experts, True), (others, False)):
        base, skewed = (ops_time(sel, H100, PROFILE, "bf16", "fwd", s) for s in (1.0, 1.5))
        assert (skewed > 1.2 * base) if grows else skewed == pytest.approx(base)


def test_capacity_factor_caps_the_busiest_rank() -> None:
    assert expert_load(2.0, None) == 2.0  # dropless: the busiest rank takes all its tokens
    assert expert_load(2.0, 1.25) == 1.25  # the excess over capacity is dropped
    assert expert_load(1.1, 1.25) == 1.1


def test_imbalance_draw_is_seeded_and_shrinks_with_more_tokens() -> None:
    draw = lambda seed, pairs, **kw: draw_expert_imbalance(np.random.default_rng(seed), pairs, 128, 8, **kw)  # noqa: E731
    assert draw(3, 4096) == draw(3, 4096)  # same seed, same draw
    few, many = draw(3, 2048), draw(3, 2_000_000)
    assert few > many >= 1.0 and many < 1.01  # uniform routing: balanced in the limit
    assert draw(3, 2_000_000, concentration=2.0) > 1.05  # a skewed router stays imbalanced
    with pytest.raises(ValueError, match="ep dividing experts"):
        draw_expert_imbalance(np.random.default_rng(0), 10, 128, 7)


@pytest.mark.parametrize("which", ["fwd", "bwd_input", "bwd_weight"])
def test_each_local_experts_gemm_pays_the_per_kernel_overhead(which: str) -> None:
    # the unfused grouped GEMM is one cuBLAS call per local expert: its time over the same op at
    # zero overhead is exactly count x the profile's per-kernel overhead (a dense op's is 1 x)
    k = 20e-6
    on, off = PROFILE.replace(kernel_overhead=k), PROFILE.replace(kernel_overhead=0.0)
    for count in (1, 4, 16, 32):
        op = _experts(512, count=count)
        assert op.calls == count
        assert op_time(op, H100, on, "bf16", which) - op_time(op, H100, off, "bf16", which) == pytest.approx(count * k)
    dense = gemm_op("mlp_fc1", 512 * 16, 2 * 768, 2048, 2, params=2048 * 2 * 768)
    assert op_time(dense, H100, on, "bf16", which) - op_time(dense, H100, off, "bf16", which) == pytest.approx(k)


def test_expert_calls_follow_the_local_experts_and_the_fused_path() -> None:
    model = get_model("qwen3-30b-a3b")  # 128 routed experts
    for ep in (1, 8, 32, 128):
        for fused in (False, True):
            ops = layer_ops(model, 0, micro_batch=1, seq_len=4096, ep=ep, fused_grouped_mlp=fused)
            gemms = [o for o in ops if o.role == "routed_expert" and o.kind == "gemm"]
            assert len(gemms) == 2
            assert all(o.calls == (1 if fused else model.num_experts // ep) for o in gemms)
            # the host's launch count (step.host) and the GPU's per-kernel overhead count the same calls
            local = model.num_experts // ep
            assert all(kernel_launches(o, w, local, fused, ep) == o.calls for o in gemms for w in ("fwd", "bwd_input", "bwd_weight"))
            assert all(o.calls == 1 for o in ops if o.role != "routed_expert")


def test_more_local_experts_of_the_same_tokens_cost_more_launches() -> None:
    # one rank's token-expert pairs spread over more local experts: same FLOPs, smaller calls and
    # more of them, so never faster; with the overhead the gap grows by (count - 1) x overhead
    k = 20e-6
    on, off = PROFILE.replace(kernel_overhead=k), PROFILE.replace(kernel_overhead=0.0)
    pairs = 32768
    prev = 0.0
    for count in (1, 2, 4, 8, 16, 32):
        op = _experts(pairs / count, count=count)
        t = op_time(op, H100, on, "bf16")
        assert t >= prev
        assert t - op_time(op, H100, off, "bf16") == pytest.approx(count * k)
        prev = t


def test_eager_host_figure_nets_out_every_expert_kernel_once() -> None:
    # a CPU rank's eager figure less the per-kernel overhead its priced ops carry: an unfused grouped
    # GEMM carries one per local expert, so a figure equal to the layer's kernel count x overhead adds 0
    from clustersim.simulator.step.host import eager_excess

    k = 10e-6
    ops = layer_ops(get_model("qwen3-30b-a3b"), 0, micro_batch=1, seq_len=4096, ep=8)
    n_fwd = sum(kernel_launches(o, "fwd", o.calls, False) for o in ops)
    n_bwd = sum(kernel_launches(o, "bwd", o.calls, False) for o in ops)
    gemm_calls = sum(o.calls for o in ops if o.role == "routed_expert" and o.kind == "gemm")
    assert gemm_calls == 2 * 16 and n_fwd >= gemm_calls
    exact = eager_excess([ops], {"fwd": n_fwd * k, "bwd": n_bwd * k}, k)
    assert exact.fwd == pytest.approx(0.0, abs=1e-12) and exact.bwd == pytest.approx(0.0, abs=1e-12)
    more = eager_excess([ops], {"fwd": n_fwd * k + 1e-3, "bwd": n_bwd * k + 2e-3}, k)
    assert more.fwd == pytest.approx(1e-3) and more.bwd == pytest.approx(2e-3)
