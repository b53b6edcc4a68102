"""The validity checks of a ``ModelSpec``, run by its ``__post_init__``.

Owns ``check_model``: every field of its declared type and range, divisible head counts, a coherent
MoE (experts, top-k, expert widths, layer frequency, clamp), MLA dims, a hybrid layer pattern, dropout
probabilities. Each failure is one ``WorkloadError`` naming the model, the field, the value and the fix.
Does not describe or count anything (``workloads.model``).
"""

import math
import typing
from typing import Literal

from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.model import MAX_SIZE, PATTERN_KINDS, SIZE_LIMITS, ModelSpec, field_kinds

_MLA_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
"""The MLA dims a model with ``attention = 'mla'`` must set."""


def check_model(m: ModelSpec) -> None:
    """Every check of this module, in the order the errors are most useful in."""
    _check_types(m)
    _check_sizes(m)
    _check_moe(m)
    _check_mla(m)
    _check_pattern(m)
    _check_mtp(m)
    _check_dropout(m)


def _check_types(m: ModelSpec) -> None:
    """Every field has its declared type: int (never bool or float), bool, finite float, str."""
    for name, kind, default in field_kinds():
        value = getattr(m, name)
        if value is None and default is None:
            continue
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and -1 < value <= SIZE_LIMITS.get(name, MAX_SIZE)
            want = f"an integer in 0..{SIZE_LIMITS.get(name, MAX_SIZE):,}"
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            want = "a finite number"
        elif kind is bool:
            ok, want = isinstance(value, bool), "true or false"
        elif typing.get_origin(kind) is Literal:
            ok, want = value in typing.get_args(kind) and isinstance(value, str), "one of " + ", ".join(typing.get_args(kind))
        else:
            ok, want = isinstance(value, str), "a string"
        if not ok:
            shown = str(value) if isinstance(value, float) else repr(value)
            raise WorkloadError(f"{getattr(m, 'name', '?')}: {name} = {shown}: must be {want}")


def _check_dropout(m: ModelSpec) -> None:
    """Dropout probabilities in [0, 1)."""
    for name in ("hidden_dropout", "attention_dropout"):
        p = getattr(m, name)
        if not 0.0 <= p < 1.0:
            raise WorkloadError(f"{m.name}: {name} = {p}: must be a probability in [0, 1) "
                                "(0 = no dropout, as modern pretraining runs; Megatron-LM's default is 0.1)")


def _check_sizes(m: ModelSpec) -> None:
    for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
                  "vocab_size"):
        value = getattr(m, field)
        if not isinstance(value, int) or value <= 0:
            raise WorkloadError(f"{m.name}: {field} = {value!r}: must be a positive integer")
    if m.num_heads % m.num_kv_heads:
        raise WorkloadError(
            f"{m.name}: num_heads = {m.num_heads} is not divisible by num_kv_heads = "
            f"{m.num_kv_heads}: choose num_kv_heads dividing num_heads"
        )
    if m.head_dim is not None and m.head_dim <= 0:
        raise WorkloadError(f"{m.name}: head_dim = {m.head_dim}: must be positive or None")
    if m.learned_position_embeddings and not m.max_seq_len:
        raise WorkloadError(
            f"{m.name}: learned_position_embeddings needs max_seq_len (got {m.max_seq_len}): set it"
        )
    if (m.sliding_window is not None and m.sliding_window <= 0) or m.full_attention_freq < 1:
        raise WorkloadError(
            f"{m.name}: sliding_window = {m.sliding_window}, full_attention_freq = "
            f"{m.full_attention_freq}: need a positive window (or None) and a frequency >= 1"
        )
    if m.mtp_layers < 0:
        raise WorkloadError(f"{m.name}: mtp_layers = {m.mtp_layers}: must be >= 0")
    if m.norm not in ("rmsnorm", "layernorm"):
        raise WorkloadError(f"{m.name}: norm = {m.norm!r}: use rmsnorm or layernorm")


def _check_moe(m: ModelSpec) -> None:
    if m.num_experts < 0:
        raise WorkloadError(f"{m.name}: num_experts = {m.num_experts}: must be >= 0 (0 = dense)")
    _check_clamp(m)
    if m.num_experts == 0:
        if m.top_k or m.num_shared_experts or m.moe_latent_size:
            raise WorkloadError(
                f"{m.name}: top_k = {m.top_k}, num_shared_experts = {m.num_shared_experts}, moe_latent_size = "
                f"{m.moe_latent_size} need num_experts > 0: set num_experts or zero them"
            )
        return
    if not 1 <= m.top_k <= m.num_experts:
        raise WorkloadError(
            f"{m.name}: top_k = {m.top_k}: must be in 1..num_experts ({m.num_experts}) for MoE"
        )
    if not m.moe_ffn_hidden_size or m.moe_ffn_hidden_size <= 0:
        raise WorkloadError(
            f"{m.name}: moe_ffn_hidden_size = {m.moe_ffn_hidden_size}: MoE needs a positive value"
        )
    if not 0 <= m.first_dense_layers <= m.num_layers or m.moe_layer_freq < 1 \
            or not 0 <= m.moe_layer_offset < m.moe_layer_freq:
        raise WorkloadError(
            f"{m.name}: first_dense_layers = {m.first_dense_layers}, moe_layer_freq = "
            f"{m.moe_layer_freq}, moe_layer_offset = {m.moe_layer_offset}: need 0 <= first_dense_layers "
            f"<= {m.num_layers}, freq >= 1 and 0 <= offset < freq"
        )
    if m.expert_groups < 0 or not 0 <= m.expert_groups_per_token <= m.expert_groups \
            or (m.expert_groups and m.num_experts % m.expert_groups):
        raise WorkloadError(
            f"{m.name}: expert_groups = {m.expert_groups}, expert_groups_per_token = "
            f"{m.expert_groups_per_token}: need groups dividing num_experts = {m.num_experts} and "
            "0 <= expert_groups_per_token <= expert_groups (0 and 0: no group limit)")
    if m.moe_latent_size is not None and m.moe_latent_size <= 0:
        raise WorkloadError(f"{m.name}: moe_latent_size = {m.moe_latent_size}: must be a positive width "
                            "(Nemotron 3 Super: 1024) or None for experts at hidden_size")
    if m.capacity_factor is not None and m.capacity_factor <= 0:
        raise WorkloadError(f"{m.name}: capacity_factor = {m.capacity_factor}: must be > 0 or None")
    if m.pad_to_capacity and m.capacity_factor is None:
        raise WorkloadError(f"{m.name}: pad_to_capacity = True needs a capacity_factor; set "
                            "capacity_factor (e.g. 1.0) or pad_to_capacity = False")


def _check_clamp(m: ModelSpec) -> None:
    """``activation_clamp``: a positive limit on the gate and up halves of gated routed experts."""
    limit = m.activation_clamp
    if limit is None:
        return
    if limit <= 0:
        raise WorkloadError(f"{m.name}: activation_clamp = {limit}: must be > 0 (HF swiglu_limit; gpt-oss: 7.0), "
                            "or None for no clamp")
    if m.num_experts == 0 or not m.gated_mlp:
        raise WorkloadError(f"{m.name}: activation_clamp = {limit} clamps the gate and up halves of gated routed "
                            f"experts; this model has num_experts = {m.num_experts}, gated_mlp = {m.gated_mlp}: "
                            "set activation_clamp = None")


def _check_pattern(m: ModelSpec) -> None:
    p = m.layer_pattern
    if p is None:
        return
    if len(p) != m.num_layers or set(p) - set(PATTERN_KINDS):
        raise WorkloadError(
            f"{m.name}: layer_pattern has {len(p)} characters for num_layers = {m.num_layers}: "
            f"use exactly one of {''.join(PATTERN_KINDS)} per layer"
        )
    if "M" in p and (m.mamba_num_heads <= 0 or min(m.mamba_head_dim, m.mamba_state_dim,
                                                    m.mamba_num_groups, m.mamba_conv_kernel,
                                                    m.mamba_chunk_size) <= 0):
        raise WorkloadError(f"{m.name}: Mamba layers need mamba_num_heads > 0 (got "
                            f"{m.mamba_num_heads}) and positive mamba_* sizes")
    if "M" in p and m.mamba_num_heads % m.mamba_num_groups:
        raise WorkloadError(f"{m.name}: mamba_num_heads = {m.mamba_num_heads} is not divisible by "
                            f"mamba_num_groups = {m.mamba_num_groups}: choose dividing groups")
    if ("E" in p) != m.is_moe:
        raise WorkloadError(f"{m.name}: layer_pattern has MoE layers: {'E' in p} but num_experts = "
                            f"{m.num_experts}: set num_experts > 0 exactly when 'E' is used")


def _check_mtp(m: ModelSpec) -> None:
    """An MTP block pattern and shared MTP weights need MTP depths; the pattern's layers need
    what the model's own pattern would (Mamba sizes, experts)."""
    p = m.mtp_layer_pattern
    if (p is not None or m.mtp_shared_weights) and m.mtp_layers == 0:
        raise WorkloadError(f"{m.name}: mtp_layer_pattern = {p!r}, mtp_shared_weights = {m.mtp_shared_weights} "
                            "need mtp_layers > 0: set mtp_layers or drop them")
    if p is None:
        return
    if not p or set(p) - set(PATTERN_KINDS):
        raise WorkloadError(f"{m.name}: mtp_layer_pattern = {p!r}: use one or more of {''.join(PATTERN_KINDS)} "
                            "(Megatron-Core mtp_hybrid_override_pattern, e.g. '*E')")
    if ("M" in p and m.mamba_num_heads <= 0) or ("E" in p and not m.is_moe):
        raise WorkloadError(f"{m.name}: mtp_layer_pattern = {p!r} uses a Mamba or MoE layer the model does not "
                            f"have (mamba_num_heads = {m.mamba_num_heads}, num_experts = {m.num_experts})")


def _check_mla(m: ModelSpec) -> None:
    if m.attention not in ("mha", "mla"):
        raise WorkloadError(f"{m.name}: attention = {m.attention!r}: use mha or mla")
    if m.attention != "mla":
        return
    for field in _MLA_FIELDS:
        value = getattr(m, field)
        if value is None or value <= 0:
            raise WorkloadError(f"{m.name}: attention = 'mla' needs {field} > 0 (got {value})")
