"""Memory of one DeepSeek-V3-class pipeline stage (PP16 DualPipe, EP64, no TP, ZeRO-1 over 128
data-parallel ranks: the DeepSeek-V3 report's plan, sec. 3.2) against a hand computation of its
parameters and states, and its activations against the DualPipe row of the report's Table 2
(parameters 2x, activations PP + 1 micro-batches)."""

from __future__ import annotations

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.partition import partition_plan, stage_chunks
from clustersim.workloads import TrainingSpec, get_model, layer_activation_bytes

DSV3 = get_model("deepseek-v3")
PLAN = ParallelPlan(tp=1, pp=16, dp=128, ep=64, micro_batch=1, schedule="dualpipe", zero=1)
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=15360, precision="bf16")


def _moe_layer_params() -> tuple[int, int]:
    """(dense, routed-expert) parameters of one DeepSeek-V3 MoE layer on one GPU of EP64, by hand
    from config.json: MLA (q_lora 1536, kv_lora 512, 128 heads, qk 128 + 64 rope, v 128), two
    RMSNorms, router 7168 x 256, one shared expert and 256 / 64 = 4 routed experts, each a SwiGLU
    MLP of 2048 (3 matrices of 7168 x 2048)."""
    h, heads = 7168, 128
    mla = (h * 1536 + 1536 + 1536 * heads * 192 + h * (512 + 64) + 512 + 512 * heads * (128 + 128)
           + heads * 128 * h)
    expert = 3 * h * 2048
    dense = mla + 2 * h + h * 256 + expert
    return dense, 4 * expert


def test_a_middle_stage_holds_what_the_hand_computation_says() -> None:
    stage = 6
    part = partition_plan(DSV3, TRAINING, PLAN).stages[stage]
    layers = [i for _, rng in stage_chunks(PLAN, DSV3.num_layers)[stage] for i in rng]
    assert all(DSV3.is_moe_layer(i) for i in layers) and len(layers) == 8  # two chunks of 4 MoE layers
    dense, expert = (n * len(layers) for n in _moe_layer_params())
    mem = part.memory
    assert mem.weights == pytest.approx(2 * (dense + expert))  # bf16
    assert mem.grads == pytest.approx(4 * (dense + expert))  # fp32 main grads
    # distributed optimizer: fp32 master + Adam m, v = 12 B, dense over dp = 128, experts over the
    # expert-dp group 128 / 64 = 2
    assert mem.optimizer == pytest.approx(12 * dense / 128 + 12 * expert / 2)


def test_dualpipe_keeps_pp_plus_one_micro_batches_of_activations() -> None:
    # DeepSeek-V3 report Table 2: DualPipe holds PP + 1 micro-batches' activations (of one stage's
    # worth of layers: two chunks of half a 1F1B stage each)
    stage = 6
    layers = [i for _, rng in stage_chunks(PLAN, DSV3.num_layers)[stage] for i in rng]
    one = sum(layer_activation_bytes(DSV3, i, micro_batch=1, seq_len=4096, ep=64) for i in layers) / 2
    held = partition_plan(DSV3, TRAINING, PLAN).stages[stage].memory.activations
    assert held / one == pytest.approx(PLAN.pp + 1, abs=1.0)
