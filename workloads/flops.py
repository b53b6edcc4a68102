"""Whole-step FLOP counts under the three published conventions MFU/HFU figures use.

Owns `model_flops_per_step` (PaLM), `megatron_flops_per_step` (Narayanan et al. SC'21) and
`mosaic_flops_per_step` (MosaicML llm-foundry). Each counts one optimizer step of
`training.global_batch_size` sequences. Does not count per-device or per-op FLOPs
(workloads/ops.py) nor divide by time or peak (simulator/ and reports/ do).
"""

from clustersim.workloads.mamba import ssd_flops_per_token
from clustersim.workloads.model import ModelSpec
from clustersim.workloads.training import TrainingSpec


def attention_width(model: ModelSpec) -> float:
    """h_attn of the attention term: heads*head_dim; MLA averages the QK (nope+rope) and V widths,
    since QK^T costs heads*d_qk and AV heads*d_v per query-key pair."""
    return model.num_heads * (model.attn_head_dim + model.value_head_dim) / 2


def model_flops_per_step(model: ModelSpec, training: TrainingSpec, *,
                         include_input_embedding: bool = False,
                         causal_attention: bool = False) -> float:
    """PaLM model FLOPs: (6*N + 12*L*h_attn*s) per token, times tokens per step.

    Source: Chowdhery et al. 2022, "PaLM", Appendix B. N = active parameters per token
    (MoE: top_k routed + shared experts + router) that take part in a matrix multiply: the
    input-embedding lookup (the word table unless tied to the output projection, and a learned
    position table) runs no FLOPs and is excluded, as PaLM's 6N counts non-embedding
    parameters; the output projection counts, tied or not. Counting the lookup would put the
    "ideal" step below what the engine can run (MFU > 1 on shallow models, issue 19). The
    attention term uses the full s^2 (sliding-window layers count their s x window band);
    recompute is never counted. Hybrid models (`layer_pattern`) count the attention term only
    for their attention layers and add 3x the forward SSD scan FLOPs of each Mamba-2 layer
    (`scan_flops_per_token`; Dao & Gu 2024 sec. 6), the scan's analogue of the attention term.
    Variants the published tables use (fitted to workloads/data/published_runs.csv, see
    tests/workloads/test_flops.py): NeMo 24.07 also excludes the input-embedding lookup (this
    default); Megatron-Bridge also halves the attention term for the causal mask
    (`causal_attention=True`); `include_input_embedding=True` counts the lookup as 6 FLOP per
    parameter too (the convention of some earlier reports).
    """
    n = model.num_active_params()
    if not include_input_embedding:
        n -= input_lookup_params(model)
    attention = attention_flops_per_token(model, training.seq_len, causal_attention)
    # MTP modules run the shared output head again: 6*V*h per token each (weights not in N)
    mtp_head = 6.0 * model.mtp_layers * model.vocab_size * model.hidden_size
    return (6.0 * n + attention + mtp_head + scan_flops_per_token(model)) * training.tokens_per_step


def scan_flops_per_token(model: ModelSpec) -> float:
    """Forward + backward (3x forward) SSD scan FLOPs per token over the Mamba-2 layers (0 for
    models without a layer_pattern)."""
    if model.layer_pattern is None:
        return 0.0
    mtp = model.mtp_layers * model.mtp_block_kinds.count("mamba") if model.mtp_layer_pattern else 0
    return 3.0 * (model.layer_pattern.count("M") + mtp) * ssd_flops_per_token(model)


def attention_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = False) -> float:
    """12*h_attn*keys summed over layers (MTP blocks included): keys = seq_len for full layers
    (halved when `causal`), min(window, seq_len) for sliding-window layers (the band)."""
    last = model.num_layers - 1
    # (window, count) of every attention layer: the model's, then each MTP depth's block (the last
    # layer's shape, or the pattern's attention layers, which attend fully)
    windows = [(model.attention_window(i), 1) for i in range(model.num_layers) if model.has_attention(i)]
    if model.mtp_layer_pattern is None:
        windows += [(model.attention_window(last), model.mtp_layers)] if model.has_attention(last) else []
    else:
        windows.append((None, model.mtp_layers * model.mtp_block_kinds.count("attention")))
    full = seq_len / (2.0 if causal else 1.0)
    return sum(n * 12.0 * attention_width(model) * (full if w is None else min(w, seq_len)) for w, n in windows)


def input_lookup_params(model: ModelSpec) -> int:
    """Parameters used only by table lookups (no FLOPs): position table, and the word table
    unless it is tied to the output projection."""
    word = 0 if model.tied_embeddings else model.vocab_size * model.hidden_size
    return model.embedding_params() - model.vocab_size * model.hidden_size + word


def megatron_flops_per_step(model: ModelSpec, training: TrainingSpec,
                            recompute_full: bool = True) -> float:
    """Narayanan et al. SC'21 eq. (3): 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) per iteration.

    The factor 96 = 4 passes (forward, backward x2, recompute forward) x 24*B*s*h^2 per layer;
    without activation recomputation the factor is 72 (3 passes). Derived for GPT layers
    (MHA, ffn = 4h, non-gated); for other shapes it is the formula's value, not a true count.
    """
    b, s, l, h, v = (training.global_batch_size, training.seq_len, model.num_layers,
                     model.hidden_size, model.vocab_size)
    factor = 96.0 if recompute_full else 72.0
    return factor * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))


def mosaic_flops_per_step(model: ModelSpec, training: TrainingSpec,
                          activation_checkpointing: bool = False) -> float:
    """MosaicML llm-foundry: (6*N + 12*L*d*s) per token for MFU, (8*N + 16*L*d*s) for HFU with
    activation checkpointing; N = all parameters incl. embeddings (the NumParams column).

    Source: mosaicml/llm-foundry scripts/train/benchmarking/collect_results.py, as summarised in
    workloads/data/README.md (flops_definition of the MosaicML rows).
    """
    n, l, d, s = model.num_params(), model.num_layers, model.hidden_size, training.seq_len
    if activation_checkpointing:
        per_token = 8.0 * n + 16.0 * l * d * s
    else:
        per_token = 6.0 * n + 12.0 * l * d * s
    return per_token * training.tokens_per_step
