"""The FP8 quantize kernels of the routed experts, and the fused grouped MLP's epilogues (issue 13).

Transformer Engine's GroupedLinear quantizes each expert GEMM's input (forward) and output gradient
(backward) in separate memory-bound kernels, 4 bytes of HBM traffic per element (bf16 read, rowwise
and columnwise FP8 writes). The fused grouped MLP writes the second GEMM's FP8 input and the first
GEMM's FP8 output gradient from its GEMM epilogues, and reads the SwiGLU input from the accumulators.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step.compute import FP8_CAST_BYTES_PER_ELEMENT, fp8_cast_time, op_time, op_time_parts
from clustersim.simulator.step.partition import chunk_ops
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model
from clustersim.workloads.op_primitives import Op

QWEN = get_model("qwen3-30b-a3b")  # 128 experts, hidden 2048, expert FFN 768, top-8, gated
FP8 = TrainingSpec(seq_len=4096, global_batch_size=64, precision="fp8")
BF16 = replace(FP8, precision="bf16")
EP8 = ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1)
ACC = get_cluster("dgx-b200", 8).accelerator
PROF = default_profile(ACC.name)


def _ops(plan: ParallelPlan, training: TrainingSpec = FP8) -> dict[str, Op]:
    return {o.name: o for o in chunk_ops(QWEN, training, plan, -1, range(1, 2))}


def test_quantized_elements_by_gemm_unfused_and_fused() -> None:
    pairs = 4096 * QWEN.top_k  # one micro-batch's token-expert pairs reach this rank (balanced)
    h, f = QWEN.hidden_size, QWEN.moe_ffn_hidden_size
    assert f is not None
    ops = _ops(EP8)
    assert ops["expert_fc1"].quantize_elements == (pairs * h, pairs * 2 * f)
    assert ops["expert_fc2"].quantize_elements == (pairs * f, pairs * h)
    fused = _ops(replace(EP8, moe_fused_grouped_mlp=True))
    assert fused["expert_fc1"].quantize_elements == (pairs * h, 0.0)
    assert fused["expert_fc2"].quantize_elements == (0.0, pairs * h)
    for name, o in ops.items():  # no other op quantizes separately
        if name not in ("expert_fc1", "expert_fc2"):
            assert o.quantize_elements == (0.0, 0.0)


def test_cast_time_closed_form_and_only_in_fp8() -> None:
    fc1 = _ops(EP8)["expert_fc1"]
    fwd, bwd = fc1.quantize_elements
    bw = ACC.hbm_bandwidth * PROF.memory_efficiency
    assert FP8_CAST_BYTES_PER_ELEMENT == 4.0
    assert fp8_cast_time(fc1, ACC, PROF, "fp8", "fwd") == pytest.approx(4.0 * fwd / bw)
    assert fp8_cast_time(fc1, ACC, PROF, "fp8", "bwd") == pytest.approx(4.0 * bwd / bw)
    assert fp8_cast_time(fc1, ACC, PROF, "fp8", "bwd_input") == pytest.approx(4.0 * bwd / bw)
    assert fp8_cast_time(fc1, ACC, PROF, "fp8", "bwd_weight") == 0.0
    assert fp8_cast_time(fc1, ACC, PROF, "fp8", "fwd", 1.5) == pytest.approx(1.5 * 4.0 * fwd / bw)
    assert fp8_cast_time(fc1, ACC, PROF, "bf16", "fwd") == 0.0
    # op_time adds it on top of the roofline, and the parts put it with the element-wise work
    bare = replace(fc1, quantize_elements=(0.0, 0.0))
    for which in ("fwd", "bwd"):
        extra = op_time(fc1, ACC, PROF, "fp8", which) - op_time(bare, ACC, PROF, "fp8", which)
        assert extra == pytest.approx(fp8_cast_time(fc1, ACC, PROF, "fp8", which))
        parts = op_time_parts(fc1, ACC, PROF, "fp8", which)
        assert sum(parts.values()) == pytest.approx(op_time(fc1, ACC, PROF, "fp8", which))
        assert parts["elementwise"] == pytest.approx(extra)


def test_the_fused_activation_reads_nothing_from_hbm() -> None:
    # gated: the unfused SwiGLU reads both halves and writes one; fused it only stores its output
    unfused, fused = _ops(EP8, BF16)["expert_act"], _ops(replace(EP8, moe_fused_grouped_mlp=True), BF16)["expert_act"]
    assert fused.bytes == pytest.approx(unfused.bytes / 3)
    assert fused.flops == unfused.flops


def test_an_fp8_moe_step_pays_every_layer_and_micro_batch_its_casts(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustersim.simulator.step import compute
    cluster = get_cluster("dgx-b200", 8)
    with_casts = simulate(QWEN, FP8, cluster, EP8, profile=PROF, fidelity="analytic")
    monkeypatch.setattr(compute, "FP8_CAST_BYTES_PER_ELEMENT", 0.0)
    without = simulate(QWEN, FP8, cluster, EP8, profile=PROF, fidelity="analytic")
    ops = _ops(EP8)
    monkeypatch.setattr(compute, "FP8_CAST_BYTES_PER_ELEMENT", 4.0)
    per_layer = sum(fp8_cast_time(ops[n], ACC, PROF, "fp8", w)
                    for n in ("expert_fc1", "expert_fc2") for w in ("fwd", "bwd"))
    micro_batches = FP8.global_batch_size // (EP8.dp * EP8.micro_batch)
    want = QWEN.num_layers * micro_batches * per_layer
    got = with_casts.breakdown["compute"] - without.breakdown["compute"]
    assert got == pytest.approx(want, rel=1e-6)
    bf16 = [simulate(QWEN, BF16, cluster, EP8, profile=PROF, fidelity="analytic").step_time for _ in range(2)]
    monkeypatch.setattr(compute, "FP8_CAST_BYTES_PER_ELEMENT", 0.0)
    assert simulate(QWEN, BF16, cluster, EP8, profile=PROF, fidelity="analytic").step_time == bf16[0]
