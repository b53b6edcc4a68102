"""Activation memory a layer keeps for its backward pass, after Korthikanti et al. 2022.

Owns `layer_activation_bytes`, `embedding_activation_bytes`, `head_activation_bytes` and the
per-tensor list they sum (`layer_activation_terms`). Source: Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", sec. 4 and Table 2: per layer
s*b*h*(34 + 5*a*s/h) bytes without parallelism, s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tp,
s*b*h*(34/t + 5*a*s/(h*t)) with tp and sp; selective recompute drops the 5*a*s/h term; full
recompute keeps only the layer input 2*s*b*h (/t with sp).

Generalisation (same tensor list, each tensor's true width): GQA/MLA widths for Q, K, V and the
output-projection input; gated MLP stores both fc1 outputs (2*ffn) and the fc2 input (ffn); MoE
stores the routed token copies (top_k per token) at the expert width, router probabilities in
fp32, and shared experts like a dense MLP; context parallelism shards the sequence (s -> s/cp,
keys stay s long in the s^2 term). With `flash_attention` (default, as Megatron-core with
Transformer Engine runs) the s^2 softmax tensors are never stored; the fused kernel keeps its
fp32 log-sum-exp (a*s*b*4 bytes) instead, which selective recompute also drops.
Dropout: Korthikanti's 34 and 5 count the masks of a model trained with dropout (Megatron-LM's
default, 0.1: the two residual masks, 2 of 34, and the attention dropout's mask and output, 3 of 5).
A dropout of p = 0 returns its input and keeps no mask (ATen Dropout.cpp: ``p == 0`` returns the
input; Megatron's bias-dropout-add calls it), so a model without dropout (``ModelSpec.hidden_dropout``,
``attention_dropout`` = 0, every config.json model here) keeps 32 and 2.
Masks are 1 byte per element. FP8 runs (Transformer Engine: `transformer_engine/pytorch/module/linear.py`
and `layernorm_linear.py` save the quantised input, column-wise usage only, for the wgrad GEMM) keep the
tensors saved only as a linear layer's input at 1 byte (`gemm_input_bytes`); tensors another kernel also
saves (Q/K/V and the attention output, kept by the fused attention kernel; the residual stream; the
activation-function input) stay at the activation dtype. The routed experts' grouped linears
(TE ``GroupedLinear``, same save rule) keep their inputs, the permuted tokens (fc1) and the activation
output (fc2), at 1 byte too; the activation input stays. The router probabilities reach the experts
permuted with the tokens (fp32, one per token-expert pair) and are applied inside the activation
(Megatron-Core ``TEGroupedMLP.forward``: ``activation_func_with_probs(fc1_output, permuted_probs)``,
the weighted SwiGLU, which saves its input and the probabilities); the unpermute after the combine takes
no probabilities (``MoEAlltoAllTokenDispatcher.combine_postprocess``, ``_DeepepManager.
get_restored_hidden_states_by_experts``: ``unpermute(..., routing_map=...)``), an index scatter whose
backward is a gather, so the expert output is not kept (megatron/core/transformer/moe/experts.py and
token_dispatcher.py, NVIDIA/Megatron-LM 0014f13713bf). Does not place activations on pipeline stages
(simulator/).

Per-module recompute (Megatron-Core ``TransformerConfig.recompute_modules``,
megatron/core/transformer/transformer_config.py; ``recompute_modules`` argument) drops, per layer:
'core_attn' the attention core's state (as selective recompute); 'mla_up_proj' (output-discarding)
the up-projected Q, K, V of MLA; 'layernorm' (output-discarding) the outputs of input_layernorm and
pre_mlp_layernorm where they are separate modules (MLA's input, every MoE layer's input; GQA/MHA and
dense MLPs fuse the norm into TE's LayerNormLinear, which the option leaves alone); 'mlp' (normal
checkpoint, dense layers only) everything inside the dense MLP but its input; 'moe' (normal checkpoint)
everything inside the MoE block but its input; 'moe_act' (output-discarding) the routed experts'
activation output (and, with ``activation_clamp``, the clamped copy of its input); 'shared_experts'
(normal checkpoint) the shared experts' tensors.

Hybrid layers (`layer_pattern`): one pre-norm input, the block's tensors and one dropout mask.
A Mamba-2 mixer (Megatron-Core mamba_mixer.py with the mamba_ssm chunked-scan kernels) keeps:
the in_proj input (s*b*h, sp-sharded), its output z|xBC|dt (2*d_inner + 2*G*N + H wide, the
conv1d input and the gate), the conv1d+SiLU output x|B|C (d_inner + 2*G*N, the scan input), the
per-chunk SSM states in fp32 (s/Q chunks x d_inner x N, the scan saves them for backward), the
scan output y (d_inner, the gated-norm input) and the out_proj input (d_inner); all tp-sharded.
"""

from dataclasses import dataclass
from typing import Any, Literal

from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.model import LayerKind, ModelSpec
from clustersim.workloads.op_primitives import LocalShape, split, split_padded

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "mla_up_proj", "layernorm", "mlp", "moe", "moe_act",
                                      "shared_experts")
"""Megatron-Core ``recompute_modules`` choices modelled here (transformer_config.py, module docstring)."""
SAVED_OUTPUTS: dict[str, tuple[str, ...]] = {"qkv_proj": ("query", "key", "value")}
"""Outputs a full recompute may keep (``recompute_saved``; JAX ``jax.checkpoint_policies.
save_only_these_names``, MaxText ``remat_policy``: 'save_qkv_proj' saves query_proj, key_proj,
value_proj, i.e. the QKV projection's output) -> the activation terms that stay on the device."""
Sharding = Literal["tp", "sp", "device"]
MASK_BYTES = 1  # dropout masks are stored as bytes (Korthikanti et al. 2022, sec. 4.1)
FP32_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class ActivationTerm:
    """One stored tensor of a layer."""

    name: str
    """What the tensor is (e.g. 'qkv_input', 'softmax')."""
    bytes: float
    """Bytes for the device's sequence shard before tensor-parallel sharding ('device': final)."""
    sharding: Sharding
    """'tp': always split over tp; 'sp': split over tp only with sequence parallelism;
    'device': already per device."""
    attention_core: bool = False
    """Dropped by selective recompute (softmax/dropout of the attention core)."""
    gemm_input: bool = False
    """Saved only as the input of a linear layer's weight-gradient GEMM (the fused norm's output
    feeding QKV or fc1, the fc2 input, the Mamba in/out-projection inputs). In an FP8 run Transformer
    Engine keeps it quantised, 1 byte per element (``layer_activation_bytes(gemm_input_bytes=)``)."""
    dropped_by: frozenset[str] = frozenset()
    """The ``RECOMPUTE_MODULES`` whose recompute frees this tensor (module docstring)."""
    act_input: bool = False
    """The input of an MLP's activation function (the fc1 output), which Megatron-Core's
    ``activation_func_fp8_input_store`` keeps in FP8 (``layer_activation_bytes(act_input_fp8=)``)."""



def _required(value: int | None, name: str) -> int:
    """A field the model kind needs (``ModelSpec`` fills it for every valid model)."""
    if value is None:
        raise WorkloadError(f"{name} must be set for this model")
    return value

def layer_activation_terms(model: ModelSpec, layer_index: int, shape: LocalShape, *,
                           flash_attention: bool = True, kind: LayerKind | None = None) -> tuple[ActivationTerm, ...]:
    """The tensors layer `layer_index` stores for backward, per Korthikanti et al. sec. 4.1; with
    ``kind``, a hybrid layer of that kind (an MTP depth's pattern layer, full attention)."""
    n, h, dt = shape.micro_batch * shape.seq_len // shape.cp, model.hidden_size, shape.dtype_bytes
    if kind is not None or model.layer_pattern is not None:
        return _hybrid_terms(model, layer_index, shape, n, flash_attention, kind)
    window = model.attention_window(layer_index)
    attention = _attention_terms(model, shape, n, flash_attention, window)
    moe = model.is_moe_layer(layer_index)
    if moe:
        mlp = _moe_terms(model, shape, n)
    else:
        mlp = _mlp_terms(model, n, model.ffn_hidden_size, "mlp", dt, frozenset({"mlp"}))
    # the MoE block's input is a separate pre_mlp_layernorm output (router and experts read it);
    # a dense MLP's is saved inside TE's fused LayerNormLinear, freed only by recomputing the MLP
    mlp_input = frozenset({"layernorm"}) if moe else frozenset({"mlp"})
    return (
        ActivationTerm(name="attn_norm_input", bytes=dt * n * h, sharding="sp"),
        *attention,
        *_hidden_mask(model, "attn", n),
        ActivationTerm(name="mlp_norm_input", bytes=dt * n * h, sharding="sp"),
        ActivationTerm(name="mlp_input", bytes=dt * n * h, sharding="sp", gemm_input=True, dropped_by=mlp_input),
        *mlp,
        *_hidden_mask(model, "mlp", n),
    )


def _hidden_mask(model: ModelSpec, kind: str, n: float) -> tuple[ActivationTerm, ...]:
    """The 1-byte mask of a residual-stream dropout (bias-dropout-add), kept only when
    ``model.hidden_dropout`` > 0 (module docstring)."""
    if model.hidden_dropout <= 0.0:
        return ()
    return (ActivationTerm(name=f"{kind}_dropout_mask", bytes=MASK_BYTES * n * model.hidden_size, sharding="sp"),)


def layer_activation_bytes(model: ModelSpec, layer_index: int, *, micro_batch: int,
                           seq_len: int, tp: int = 1, cp: int = 1, sp: bool = False,
                           recompute: Recompute = "none", dtype_bytes: int = 2, ep: int = 1,
                           etp: int = 1, flash_attention: bool = True,
                           gemm_input_bytes: int | None = None,
                           recompute_modules: tuple[str, ...] = (),
                           recompute_saved: tuple[str, ...] = (), act_input_fp8: bool = False,
                           kind: LayerKind | None = None) -> float:
    """Bytes of activations layer `layer_index` keeps on one device for one micro-batch (with ``kind``:
    a hybrid layer of that kind, ``layer_activation_terms``).

    ``gemm_input_bytes`` (default ``dtype_bytes``): bytes per element of the tensors saved only as
    a linear layer's input (1 in FP8 runs, ``TrainingSpec.gemm_input_bytes``).
    ``recompute_modules``: Megatron-Core modules recomputed in backward (``RECOMPUTE_MODULES``);
    their tensors are not kept (module docstring).
    ``recompute_saved``: with full recompute, the outputs kept besides the layer input
    (``SAVED_OUTPUTS``: 'qkv_proj' keeps Q, K and V, as MaxText's remat policy save_qkv_proj).
    ``act_input_fp8``: the SwiGLU inputs (``ActivationTerm.act_input``) kept at 1 byte, Megatron-Core's
    ``activation_func_fp8_input_store`` (``ParallelPlan.activation_fp8_input_store``); gated MLPs whose
    activation is not clamped only (the fused SwiGLU kernels are the ones that take the option)."""
    shape = LocalShape(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp,
                       sp=sp, dtype_bytes=dtype_bytes)
    if recompute == "full":
        layer_input = dtype_bytes * shape.tokens * model.hidden_size / (tp if sp else 1)
        return layer_input + _saved_bytes(model, layer_index, shape, flash_attention, recompute_saved, kind)
    terms = layer_activation_terms(model, layer_index, shape, flash_attention=flash_attention, kind=kind)
    kept = [t for t in terms if not _recomputed(t, recompute, recompute_modules)]
    narrow = 1.0 if gemm_input_bytes is None else gemm_input_bytes / dtype_bytes
    fp8_act = 1.0 / dtype_bytes if act_input_fp8 and model.gated_mlp and model.activation_clamp is None else 1.0
    return sum(_per_device(t, tp, sp) * (narrow if t.gemm_input else fp8_act if t.act_input else 1.0)
               for t in kept)


def _recomputed(term: ActivationTerm, recompute: Recompute, modules: tuple[str, ...]) -> bool:
    """Whether recompute frees ``term``; selective recompute without modules is Megatron-Core's
    default, ['core_attn']."""
    mods = (modules or ("core_attn",)) if recompute == "selective" else modules
    if term.attention_core and "core_attn" in mods:
        return True
    return not term.dropped_by.isdisjoint(mods)


def embedding_activation_bytes(model: ModelSpec, *, micro_batch: int, seq_len: int,
                               tp: int = 1, cp: int = 1, sp: bool = False) -> float:
    """The embedding dropout mask, s*b*h bytes (/t with sp) (Korthikanti et al. sec. 4.3); 0 when the
    model trains without hidden dropout (Megatron's embedding dropout takes ``hidden_dropout``)."""
    if model.hidden_dropout <= 0.0:
        return 0.0
    tokens = micro_batch * seq_len / cp
    return MASK_BYTES * tokens * model.hidden_size / (tp if sp else 1)


def head_activation_bytes(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                          cp: int = 1, sp: bool = False, dtype_bytes: int = 2,
                          te_cross_entropy: bool = False) -> float:
    """Final norm input and output-projection input (2*s*b*h each, /t with sp) plus the logits kept
    for the cross-entropy backward: 4*s*b*V/t, the fp32 softmax Megatron's cross entropy keeps
    (Korthikanti et al. sec. 4.3; Megatron-Core's ``calculate_logits_max`` upcasts with ``.float()``),
    or ``dtype_bytes`` per element with ``te_cross_entropy``: Transformer Engine's
    ``parallel_cross_entropy`` keeps the logits themselves and forms the gradient in place
    (transformer_engine/pytorch/cross_entropy.py @ 02965d2e: ``CrossEntropyFunction.forward`` saves
    ``_input``)."""
    tokens = micro_batch * seq_len / cp
    hidden = 2 * dtype_bytes * tokens * model.hidden_size / (tp if sp else 1)
    logits_bytes = dtype_bytes if te_cross_entropy else FP32_BYTES
    return hidden + logits_bytes * tokens * split_padded(model.vocab_size, tp)


def mtp_activation_bytes(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1, cp: int = 1,
                         sp: bool = False, dtype_bytes: int = 2, te_cross_entropy: bool = False,
                         **layer_kw: Any) -> float:
    """Activations the MTP depths keep on the last stage for one micro-batch: per depth, the input of
    its 2h -> h projection (the two normed halves, 2*s*b*h, /t with sp), its block's layers (the last
    layer's shape, or each ``mtp_layer_pattern`` layer with full attention; ``layer_activation_bytes``
    with ``layer_kw``, the plan's recompute and dtypes) and its own pass of the shared output head
    (``head_activation_bytes``); 0 without MTP. Depths that share one module's weights still keep
    their own activations (each is a separate forward)."""
    if not model.mtp_layers:
        return 0.0
    last = model.num_layers - 1
    kinds: tuple[LayerKind | None, ...] = (None,) if model.mtp_layer_pattern is None else model.mtp_block_kinds
    block = sum(layer_activation_bytes(model, last, kind=k, dtype_bytes=dtype_bytes, micro_batch=micro_batch,
                                       seq_len=seq_len, tp=tp, cp=cp, sp=sp, **layer_kw) for k in kinds)
    proj = 2 * dtype_bytes * micro_batch * seq_len / cp * model.hidden_size / (tp if sp else 1)
    head = head_activation_bytes(model, dtype_bytes=dtype_bytes, te_cross_entropy=te_cross_entropy,
                                 micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, sp=sp)
    return model.mtp_layers * (proj + block + head)


def moe_dispatch_buffer_bytes(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                              cp: int = 1, etp: int = 1, dtype_bytes: int = 2,
                              gemm_input_bytes: int | None = None) -> float:
    """Transient bytes of one MoE layer's token dispatch on one device, beyond what it keeps: the
    permuted send copy of its (T/tp)*etp*top_k token-expert pairs (width h, activation dtype), freed
    once the all-to-all has run (Megatron-Core's alltoall dispatcher, token_dispatcher.py); in FP8 runs
    also the received copy, whose quantised copy is what the experts keep (otherwise the received
    tokens are the kept ``expert_fc1_input``). One layer dispatches at a time: a stage holds this
    once, not per micro-batch; 0 without MoE."""
    if not model.is_moe:
        return 0.0
    pairs = micro_batch * seq_len / cp / tp * etp * model.top_k
    narrow = gemm_input_bytes is not None and gemm_input_bytes < dtype_bytes
    return (2.0 if narrow else 1.0) * dtype_bytes * pairs * model.expert_width


def _saved_bytes(model: ModelSpec, layer_index: int, shape: LocalShape, flash_attention: bool,
                 saved: tuple[str, ...], kind: LayerKind | None = None) -> float:
    """Bytes of the ``SAVED_OUTPUTS`` a full recompute keeps on one device."""
    unknown = [s for s in saved if s not in SAVED_OUTPUTS]
    if unknown:
        raise WorkloadError(f"recompute_saved = {list(saved)}: unknown {unknown}; choose from {list(SAVED_OUTPUTS)}")
    if not saved:
        return 0.0
    names = {n for s in saved for n in SAVED_OUTPUTS[s]}
    terms = layer_activation_terms(model, layer_index, shape, flash_attention=flash_attention, kind=kind)
    return sum(_per_device(t, shape.tp, shape.sp) for t in terms if t.name in names)


def _per_device(term: ActivationTerm, tp: int, sp: bool) -> float:
    match term.sharding:
        case "tp":
            return term.bytes / tp
        case "sp":
            return term.bytes / tp if sp else term.bytes
        case _:
            return term.bytes


def _hybrid_terms(model: ModelSpec, layer_index: int, shape: LocalShape, n: int,
                  flash: bool, kind_override: LayerKind | None = None) -> tuple[ActivationTerm, ...]:
    """Pre-norm input, the layer's one block, its dropout mask (module docstring)."""
    kind = kind_override or model.layer_kind(layer_index)
    h, dt = model.hidden_size, shape.dtype_bytes
    if kind == "mamba":
        block = _mamba_terms(model, shape, n)
    elif kind == "attention":
        window = None if kind_override else model.attention_window(layer_index)
        block = _attention_terms(model, shape, n, flash, window)
    elif kind == "mlp":
        dense = frozenset({"mlp"})
        block = [ActivationTerm(name="mlp_input", bytes=dt * n * h, sharding="sp", gemm_input=True,
                                dropped_by=dense),
                 *_mlp_terms(model, n, model.ffn_hidden_size, "mlp", dt, dense)]
    else:
        block = [ActivationTerm(name="mlp_input", bytes=dt * n * h, sharding="sp",
                                dropped_by=frozenset({"layernorm"})),
                 *_moe_terms(model, shape, n)]
    return (
        ActivationTerm(name=f"{kind}_norm_input", bytes=dt * n * h, sharding="sp"),
        *block,
        *_hidden_mask(model, kind, n),
    )


def _mamba_terms(model: ModelSpec, shape: LocalShape, n: int) -> list[ActivationTerm]:
    """The Mamba-2 mixer's stored tensors (module docstring)."""
    h, dt, d_in = model.hidden_size, shape.dtype_bytes, model.mamba_d_inner
    conv = model.mamba_conv_dim
    chunks = n / model.mamba_chunk_size
    return [
        ActivationTerm(name="mamba_in_proj_input", bytes=dt * n * h, sharding="sp", gemm_input=True),
        ActivationTerm(name="mamba_in_proj_output", bytes=dt * n * (d_in + conv + model.mamba_num_heads),
                       sharding="tp"),
        ActivationTerm(name="mamba_conv_output", bytes=dt * n * conv, sharding="tp"),
        ActivationTerm(name="mamba_chunk_states", bytes=FP32_BYTES * chunks * d_in * model.mamba_state_dim,
                       sharding="tp"),
        ActivationTerm(name="mamba_scan_output", bytes=dt * n * d_in, sharding="tp"),
        ActivationTerm(name="mamba_out_proj_input", bytes=dt * n * d_in, sharding="tp", gemm_input=True),
    ]


def _attention_terms(model: ModelSpec, shape: LocalShape, n: int, flash: bool,
                     window: int | None) -> list[ActivationTerm]:
    """QKV (or MLA latents) inputs, Q/K/V, the core's softmax state and the out-proj input."""
    h, dt, heads = model.hidden_size, shape.dtype_bytes, model.num_heads
    kv_heads = heads if model.attention == "mla" else model.num_kv_heads
    d_qk, d_v = model.attn_head_dim, model.value_head_dim
    mla = model.attention == "mla"
    # MLA's input_layernorm is its own module (the down-projections read it); GQA fuses it into QKV
    terms = [ActivationTerm(name="qkv_input", bytes=dt * n * h, sharding="sp", gemm_input=True,
                            dropped_by=frozenset({"layernorm"}) if mla else frozenset())]
    up = frozenset({"mla_up_proj"}) if mla else frozenset()
    if mla:
        latent = (model.q_lora_rank or 0) + _required(model.kv_lora_rank, "kv_lora_rank")
        # latents are gathered over tp and kept whole on every rank: norm input and up-proj input
        terms.append(ActivationTerm(name="mla_latents", bytes=2 * dt * n * latent * shape.tp,
                                    sharding="tp"))
    terms += [
        ActivationTerm(name="query", bytes=dt * n * heads * d_qk, sharding="tp", dropped_by=up),
        ActivationTerm(name="key", bytes=dt * n * kv_heads * d_qk, sharding="tp", dropped_by=up),
        ActivationTerm(name="value", bytes=dt * n * kv_heads * d_v, sharding="tp", dropped_by=up),
        _core_term(model, shape, n, flash, window),
        ActivationTerm(name="out_proj_input", bytes=dt * n * heads * d_v, sharding="tp"),
    ]
    return terms


def _core_term(model: ModelSpec, shape: LocalShape, n: int, flash: bool,
               window: int | None) -> ActivationTerm:
    """Softmax output (2), its dropout mask (1) and dropout output (2) per score: 5*a*s_q*s_k*b
    (s_k = the window in sliding-window layers); without attention dropout the softmax output only
    (2*a*s_q*s_k*b); with a fused (flash) kernel only the fp32 log-sum-exp per query and head."""
    a = model.num_heads
    s_k = shape.seq_len if window is None else min(window, shape.seq_len)
    if flash:
        return ActivationTerm(name="softmax_lse", bytes=FP32_BYTES * a * n, sharding="tp",
                              attention_core=True)
    scores = a * n * s_k
    per_score = shape.dtype_bytes  # the softmax output
    if model.attention_dropout > 0.0:
        per_score += MASK_BYTES + shape.dtype_bytes  # the dropout's mask and output
    return ActivationTerm(name="softmax", bytes=per_score * scores, sharding="tp",
                          attention_core=True)


def _mlp_terms(model: ModelSpec, n: float, ffn: int, prefix: str, dt: int,
               dropped_by: frozenset[str] = frozenset()) -> list[ActivationTerm]:
    """Activation input (fc1 outputs: 2*ffn gated, ffn plain) and the fc2 input (ffn)."""
    n_in = 2 if model.gated_mlp else 1
    return [
        ActivationTerm(name=f"{prefix}_act_input", bytes=dt * n * n_in * ffn, sharding="tp",
                       dropped_by=dropped_by, act_input=True),
        ActivationTerm(name=f"{prefix}_fc2_input", bytes=dt * n * ffn, sharding="tp", gemm_input=True,
                       dropped_by=dropped_by),
    ]


def _moe_terms(model: ModelSpec, shape: LocalShape, n: int) -> list[ActivationTerm]:
    """Router probabilities (fp32), routed token copies at the experts, expert MLP tensors; a
    LatentMoE's tokens at the latent width, and the combined latent output its up-projection keeps."""
    h, dt, k = model.expert_width, shape.dtype_bytes, model.top_k
    f = split(_required(model.moe_ffn_hidden_size, "moe_ffn_hidden_size"), shape.etp, "moe_ffn_hidden_size", "etp")
    n_in = 2 if model.gated_mlp else 1
    pairs = n / shape.tp * shape.etp * k  # token-expert pairs on this device (see blocks.py)
    moe = frozenset({"moe"})
    terms = [
        ActivationTerm(name="router_probs", bytes=FP32_BYTES * n * model.num_experts,
                       sharding="sp", dropped_by=moe),
        ActivationTerm(name="expert_fc1_input", bytes=dt * pairs * h, sharding="device", gemm_input=True,
                       dropped_by=moe),
        ActivationTerm(name="expert_act_input", bytes=dt * pairs * n_in * f, sharding="device", dropped_by=moe,
                       act_input=True),
        ActivationTerm(name="expert_fc2_input", bytes=dt * pairs * f, sharding="device", gemm_input=True,
                       dropped_by=moe | {"moe_act"}),
        ActivationTerm(name="expert_probs", bytes=FP32_BYTES * pairs, sharding="device", dropped_by=moe),
    ]
    if model.moe_latent_size:  # the down-projection's input is the block's input, kept anyway
        terms.append(ActivationTerm(name="latent_up_input", bytes=dt * n * model.moe_latent_size, sharding="sp",
                                    gemm_input=True, dropped_by=moe))
    if model.activation_clamp is not None and not shape.fused_grouped_mlp:
        # the clamped, concatenated gate|up that the fused GLU saves, beside the fc1 output the
        # clamps save (workloads/blocks.py expert_act_op); inside moe_act's output-discarding checkpoint
        terms.append(ActivationTerm(name="expert_act_clamped", bytes=dt * pairs * n_in * f, sharding="device",
                                    dropped_by=moe | {"moe_act"}))
    if model.num_shared_experts:
        shared = model.num_shared_experts * model.shared_ffn
        terms += _mlp_terms(model, n, shared, "shared", dt, moe | {"shared_experts"})
    return terms
