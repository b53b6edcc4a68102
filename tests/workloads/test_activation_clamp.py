"""GPT-OSS clamped SwiGLU (HF config.json ``swiglu_limit``, ``ModelSpec.activation_clamp``; issue 13).

Megatron-Core clamps the gate and up halves and concatenates them in eager ops ahead of the fused
GLU kernel (megatron/core/fusions/fused_bias_geglu.py ``weighted_bias_quick_geglu_impl``): 8 more
passes of a [pairs, f] half through HBM forward, 10 backward (workloads/blocks.py
``expert_act_op``), and one more saved copy of the fc1 output, inside moe_act's checkpoint."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model, layer_activation_bytes, layer_ops
from clustersim.workloads.blocks import CLAMP_BWD_PASSES, CLAMP_FWD_PASSES
from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.hf_config import model_from_hf_config
from clustersim.workloads.model import ModelSpec
from clustersim.workloads.op_primitives import Op

CONFIG = Path(__file__).parent / "data" / "hf_configs" / "gpt-oss-20b" / "config.json"
OSS = get_model("gpt-oss-20b")
PLAIN = replace(OSS, activation_clamp=None)
S, F, K = 4096, 2880, 4  # sequence, expert width (intermediate_size), top-k of gpt-oss-20b


def _act(model: ModelSpec, fused: bool = False) -> Op:
    ops = layer_ops(model, 0, micro_batch=1, seq_len=S, ep=8, fused_grouped_mlp=fused)
    return next(o for o in ops if o.name == "expert_act")


def test_hf_config_swiglu_limit_sets_the_clamp() -> None:
    cfg = json.loads(CONFIG.read_text())
    assert cfg["swiglu_limit"] == 7.0  # openai/gpt-oss-20b config.json (tests/workloads/data/hf_configs/SOURCES.md)
    assert model_from_hf_config(CONFIG).activation_clamp == 7.0
    assert model_from_hf_config({k: v for k, v in cfg.items() if k != "swiglu_limit"}).activation_clamp is None
    assert OSS.activation_clamp == get_model("gpt-oss-120b").activation_clamp == 7.0


@pytest.mark.parametrize("limit", [-7.0, 0.0])
def test_a_limit_that_is_not_positive_is_named(limit: float) -> None:
    cfg = json.loads(CONFIG.read_text())
    with pytest.raises(WorkloadError, match=r"activation_clamp = .*must be > 0"):
        model_from_hf_config({**cfg, "swiglu_limit": limit})
    with pytest.raises(WorkloadError, match="swiglu_limit = 'seven': must be a number"):
        model_from_hf_config({**cfg, "swiglu_limit": "seven"})


def test_a_clamp_needs_gated_routed_experts() -> None:
    with pytest.raises(WorkloadError, match="activation_clamp = 7.0 clamps the gate and up"):
        replace(get_model("llama3-8b"), activation_clamp=7.0)
    with pytest.raises(WorkloadError, match="gated_mlp = False"):
        replace(OSS, gated_mlp=False)


def test_clamped_activation_moves_the_counted_passes() -> None:
    clamped, plain = _act(OSS), _act(PLAIN)
    pairs = S * K  # ep = 8 of 32 experts: every token-expert pair of the micro-batch reaches 4 local experts
    half = pairs * F * 2  # bytes of one [pairs, f] bf16 half
    assert plain.bytes == pytest.approx(3 * half)  # fused kernel: read gate and up, write the product
    assert clamped.bytes == pytest.approx((3 + CLAMP_FWD_PASSES) * half)
    assert clamped.bwd_bytes == pytest.approx((6 + CLAMP_BWD_PASSES) * half)
    assert clamped.bytes / plain.bytes == pytest.approx(11 / 3)
    assert (clamped.flops, clamped.params) == (plain.flops, plain.params)
    # the fused grouped MLP's epilogue reads nothing back: no clamp passes counted there
    assert _act(OSS, fused=True) == _act(PLAIN, fused=True)


def test_clamp_keeps_one_more_fc1_output_until_moe_act_is_recomputed() -> None:
    def acts(model: ModelSpec, modules: tuple[str, ...] = ()) -> float:
        return layer_activation_bytes(model, 0, micro_batch=1, seq_len=S, ep=8, recompute="selective" if modules else "none",
                                      recompute_modules=modules)
    assert acts(OSS) - acts(PLAIN) == pytest.approx(2 * S * K * 2 * F)  # bf16 [pairs, 2f]: the clamped gate|up
    assert acts(OSS, ("moe_act",)) == pytest.approx(acts(PLAIN, ("moe_act",)))
    assert acts(OSS, ("moe",)) == pytest.approx(acts(PLAIN, ("moe",)))


def test_clamped_model_steps_slower_with_the_same_model_flops() -> None:
    training = TrainingSpec(seq_len=S, global_batch_size=8)
    cluster = get_cluster("dgx-h100", 8)
    small, small_plain = replace(OSS, num_layers=2), replace(PLAIN, num_layers=2)
    plan = ParallelPlan(tp=1, pp=1, dp=8, ep=8, micro_batch=1, recompute="selective", recompute_modules=("moe_act",))
    a = simulate(small, training, cluster, plan, fidelity="analytic")
    b = simulate(small_plain, training, cluster, plan, fidelity="analytic")
    assert a.step_time > b.step_time
    assert a.model_flops == b.model_flops  # elementwise passes are no model FLOPs
