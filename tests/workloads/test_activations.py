"""Activation memory per layer against Korthikanti et al. 2022, Table 2, and its invariants."""

import dataclasses

import pytest

from clustersim.workloads import get_model, head_activation_bytes, layer_activation_bytes
from clustersim.workloads.activations import embedding_activation_bytes
from clustersim.workloads.errors import WorkloadError

# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
# Table 2: activation bytes per layer in units of s*b*h (a = heads, t = tp degree).
S, B, T = 2048, 2, 8


def _gpt(**overrides: object):
    return dataclasses.replace(get_model("gpt3-175b"), **overrides)


def _units(model, **kwargs: object) -> float:
    total = layer_activation_bytes(model, 0, micro_batch=B, seq_len=S, flash_attention=False,
                                   **kwargs)
    return total / (S * B * model.hidden_size)


def test_no_parallelism_is_34_plus_5as_over_h() -> None:
    m = _gpt()
    a, h = m.num_heads, m.hidden_size
    assert _units(m) == pytest.approx(34 + 5 * a * S / h)


def test_tensor_parallel_without_sp() -> None:
    m = _gpt()
    a, h = m.num_heads, m.hidden_size
    assert _units(m, tp=T) == pytest.approx(10 + 24 / T + 5 * a * S / (h * T))


def test_tensor_and_sequence_parallel() -> None:
    m = _gpt()
    a, h = m.num_heads, m.hidden_size
    assert _units(m, tp=T, sp=True) == pytest.approx(34 / T + 5 * a * S / (h * T))


def test_selective_recompute_drops_the_attention_core() -> None:
    assert _units(_gpt(), tp=T, sp=True, recompute="selective") == pytest.approx(34 / T)


def test_full_recompute_keeps_only_the_layer_input() -> None:
    assert _units(_gpt(), tp=T, sp=True, recompute="full") == pytest.approx(2 / T)
    assert _units(_gpt(), tp=T, sp=False, recompute="full") == pytest.approx(2)


def test_flash_attention_has_no_s_squared_term() -> None:
    m = get_model("llama3-8b")
    short = layer_activation_bytes(m, 0, micro_batch=1, seq_len=4096)
    long = layer_activation_bytes(m, 0, micro_batch=1, seq_len=8192)
    assert long == pytest.approx(2 * short)  # linear in s with a fused attention kernel
    paper = layer_activation_bytes(m, 0, micro_batch=1, seq_len=8192, flash_attention=False)
    assert paper > 4 * long  # the 5as^2b term dominates at s=8192


def test_context_parallel_divides_everything_by_cp() -> None:
    m = get_model("llama3-70b")
    one = layer_activation_bytes(m, 0, micro_batch=1, seq_len=8192, tp=8, sp=True)
    four = layer_activation_bytes(m, 0, micro_batch=1, seq_len=8192, tp=8, sp=True, cp=4)
    assert four == pytest.approx(one / 4)


def test_gqa_and_gating_change_the_tensor_widths() -> None:
    base = _gpt(gated_mlp=False)
    gqa = _gpt(num_kv_heads=8)
    # K and V shrink from h to h*8/96 each: 4*s*b*h*(1 - 8/96) bytes fewer
    saved = 4 * S * B * base.hidden_size * (1 - 8 / 96)
    assert _units(base) - _units(gqa) == pytest.approx(saved / (S * B * base.hidden_size))
    gated = _gpt(gated_mlp=True, ffn_hidden_size=base.hidden_size * 8 // 3 // 128 * 128)
    # gated: act input 2*f*2 + fc2 input 2*f = 6f bytes per token vs 16h for f = 4h plain
    f = gated.ffn_hidden_size
    diff = _units(gated) - _units(base)
    assert diff == pytest.approx((6 * f - 16 * base.hidden_size) / base.hidden_size)


def test_moe_activations_grow_with_top_k() -> None:
    m = get_model("qwen3-30b-a3b")
    kwargs = dict(micro_batch=1, seq_len=4096, tp=2, sp=True)
    k8 = layer_activation_bytes(m, 0, **kwargs)
    k4 = layer_activation_bytes(dataclasses.replace(m, top_k=4), 0, **kwargs)
    k2 = layer_activation_bytes(dataclasses.replace(m, top_k=2), 0, **kwargs)
    assert k8 > k4 > k2
    assert k8 - k4 == pytest.approx(2 * (k4 - k2))  # linear in top_k


def test_more_tp_never_needs_more_memory() -> None:
    m = get_model("deepseek-v3")
    values = [layer_activation_bytes(m, 5, micro_batch=1, seq_len=4096, tp=t, sp=True)
              for t in (1, 2, 4, 8)]
    assert values == sorted(values, reverse=True)


def test_embedding_and_head_activations() -> None:
    m = get_model("llama3-8b")
    tokens = 4096
    logits = 4 * tokens * m.vocab_size / 4  # fp32 logits over tp = 4
    head = head_activation_bytes(m, micro_batch=1, seq_len=tokens, tp=4, sp=True)
    assert head == pytest.approx(logits + 2 * 2 * tokens * m.hidden_size / 4)
    # Llama 3 trains without dropout: no embedding mask; with p > 0 one byte per element (sp-sharded)
    assert m.hidden_dropout == 0.0
    assert embedding_activation_bytes(m, micro_batch=1, seq_len=tokens, tp=4, sp=True) == 0.0
    dropped = dataclasses.replace(m, hidden_dropout=0.1)
    emb = embedding_activation_bytes(dropped, micro_batch=1, seq_len=tokens, tp=4, sp=True)
    assert emb == pytest.approx(tokens * m.hidden_size / 4)


@pytest.mark.parametrize("flash", [True, False])
def test_dropout_masks_are_kept_only_when_dropout_is_on(flash: bool) -> None:
    # Korthikanti's 34 + 5as/h counts the masks of p = 0.1 (the GPT-3 preset, Megatron-LM's default);
    # at p = 0 the two residual masks go (34 -> 32 units of sbh) and, without a fused kernel, the
    # attention dropout's mask and output (5 -> 2 bytes per score); a fused kernel keeps neither
    m = _gpt()
    a, h = m.num_heads, m.hidden_size
    def units(model) -> float:
        return layer_activation_bytes(model, 0, micro_batch=B, seq_len=S, flash_attention=flash) / (S * B * h)
    lse = 4 * a / h  # the fused kernel's fp32 log-sum-exp, per token and unit of h
    with_dropout = 34 + (lse if flash else 5 * a * S / h)
    assert (m.hidden_dropout, m.attention_dropout) == (0.1, 0.1)
    assert units(m) == pytest.approx(with_dropout)
    assert units(dataclasses.replace(m, hidden_dropout=0.0)) == pytest.approx(with_dropout - 2)
    no_attn = dataclasses.replace(m, attention_dropout=0.0)
    assert units(no_attn) == pytest.approx(34 + (lse if flash else 2 * a * S / h))
    assert units(dataclasses.replace(no_attn, hidden_dropout=0.0)) == pytest.approx(units(no_attn) - 2)


@pytest.mark.parametrize("field", ["hidden_dropout", "attention_dropout"])
@pytest.mark.parametrize("value", [-0.1, 1.0, 2.0])
def test_a_dropout_outside_zero_to_one_is_rejected(field: str, value: float) -> None:
    with pytest.raises(WorkloadError, match=f"{field} = {value}: must be a probability"):
        dataclasses.replace(get_model("llama3-8b"), **{field: value})


def test_fp8_keeps_linear_only_inputs_at_one_byte() -> None:
    # Transformer Engine saves the FP8-quantised input of a linear layer for its wgrad GEMM: the
    # QKV input (fused norm output), the fc1 input and the fc2 input drop from 2 bytes to 1; Q/K/V,
    # the attention output, the residual stream and the activation-function input stay bf16.
    m = get_model("llama3-70b")
    n, h, f = B * S, m.hidden_size, m.ffn_hidden_size
    kw = dict(micro_batch=B, seq_len=S)
    bf16 = layer_activation_bytes(m, 0, **kw)
    fp8 = layer_activation_bytes(m, 0, gemm_input_bytes=1, **kw)
    assert bf16 - fp8 == pytest.approx(n * (h + h + f))  # (2 - 1) bytes x (qkv_in + fc1_in + fc2_in)
    # tensor parallel with SP shards all three by tp, so the saving does too
    sp = layer_activation_bytes(m, 0, tp=T, sp=True, **kw) - layer_activation_bytes(m, 0, tp=T, sp=True, gemm_input_bytes=1, **kw)
    assert sp == pytest.approx(n * (h + h + f) / T)
    # full recompute keeps only the layer input (the residual stream): nothing to narrow
    assert layer_activation_bytes(m, 0, recompute="full", gemm_input_bytes=1, **kw) == \
        layer_activation_bytes(m, 0, recompute="full", **kw)


def test_training_spec_gemm_input_bytes() -> None:
    from clustersim.workloads import TrainingSpec
    assert TrainingSpec(seq_len=S, global_batch_size=8, precision="fp8").gemm_input_bytes == 1
    assert TrainingSpec(seq_len=S, global_batch_size=8, precision="bf16").gemm_input_bytes == 2
    assert TrainingSpec(seq_len=S, global_batch_size=8, precision="fp32").gemm_input_bytes == 4
