"""ModelSpec from a Hugging Face ``config.json`` (``model: {hf_config: path/to/config.json}``).

Owns the field mapping per ``model_type`` (``ARCHITECTURES``): the shape fields every decoder
config shares (``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
``num_key_value_heads``, ``intermediate_size``, ``vocab_size``, ``head_dim``,
``max_position_embeddings``, ``tie_word_embeddings``) and each family's own (MoE experts, MLA ranks,
GeGLU vs plain MLP, LayerNorm and biases, sliding-window layers from ``layer_types``; DBRX's
nested ``attn_config`` / ``ffn_config``). An unknown ``model_type`` or a
feature the ModelSpec cannot express (Qwen3-MoE ``mlp_only_layers``) is an error naming it, never a
fallback; Llama 4 reads its decoder from ``text_config``. What is knowingly left out is said per family (``NOT_MODELLED``). It reads files and
builds a ModelSpec; it simulates nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.model import ModelSpec

Config = Mapping[str, Any]


def _req(cfg: Config, key: str, where: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise WorkloadError(f"hf_config {where}: field {key!r} missing; it is required for model_type {cfg.get('model_type')!r}")
    return cfg[key]


def _common(cfg: Config, where: str, *, tied_default: bool = False) -> dict[str, Any]:
    heads = int(_req(cfg, "num_attention_heads", where))
    hidden = int(_req(cfg, "hidden_size", where))
    out: dict[str, Any] = {
        "num_layers": int(_req(cfg, "num_hidden_layers", where)), "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": int(cfg.get("num_key_value_heads") or heads),
        "ffn_hidden_size": int(_req(cfg, "intermediate_size", where)), "vocab_size": int(_req(cfg, "vocab_size", where)),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", tied_default)),
    }
    if cfg.get("head_dim") and int(cfg["head_dim"]) != hidden // heads:
        out["head_dim"] = int(cfg["head_dim"])
    if cfg.get("max_position_embeddings"):
        out["max_seq_len"] = int(cfg["max_position_embeddings"])
    return out


def _llama(cfg: Config, where: str) -> dict[str, Any]:
    """Llama, Mistral, Qwen2/2.5, Qwen3: SwiGLU, RMSNorm, RoPE, no biases."""
    return _common(cfg, where)


def _mixtral(cfg: Config, where: str) -> dict[str, Any]:
    """Mixtral: every layer MoE, ``num_local_experts`` experts of ``intermediate_size``."""
    out = _common(cfg, where)
    return {**out, "num_experts": int(_req(cfg, "num_local_experts", where)),
            "top_k": int(_req(cfg, "num_experts_per_tok", where)), "moe_ffn_hidden_size": out["ffn_hidden_size"]}


def _qwen3_moe(cfg: Config, where: str) -> dict[str, Any]:
    """Qwen3-MoE (and Qwen2-MoE without shared experts): experts of ``moe_intermediate_size``."""
    if cfg.get("mlp_only_layers"):
        raise WorkloadError(f"hf_config {where}: mlp_only_layers = {cfg['mlp_only_layers']} (dense layers at chosen "
                            "positions) cannot be expressed; ModelSpec has a dense prefix only")
    if cfg.get("shared_expert_intermediate_size"):
        raise WorkloadError(f"hf_config {where}: a gated shared expert (shared_expert_intermediate_size) is not modelled")
    return {**_common(cfg, where), "num_experts": int(_req(cfg, "num_experts", where)),
            "top_k": int(_req(cfg, "num_experts_per_tok", where)),
            "moe_ffn_hidden_size": int(_req(cfg, "moe_intermediate_size", where)),
            **_sparse_step(int(cfg.get("decoder_sparse_step") or 1))}


def _sparse_step(step: int) -> dict[str, int]:
    """Hugging Face's every-``step``-th-layer MoE (Qwen2-MoE ``decoder_sparse_step``, Llama 4
    ``interleave_moe_layer_step``): layer i is MoE when (i + 1) % step == 0."""
    return {"moe_layer_freq": step, "moe_layer_offset": step - 1}


def _deepseek(cfg: Config, where: str) -> dict[str, Any]:
    """DeepSeek-V2/V3: MLA attention, routed + shared experts, a dense prefix (first_k_dense_replace)."""
    out = _common(cfg, where)
    out["num_kv_heads"] = out["num_heads"]  # MLA: every head has its own (decompressed) K and V
    return {**out, "attention": "mla", "q_lora_rank": cfg.get("q_lora_rank"),
            "kv_lora_rank": int(_req(cfg, "kv_lora_rank", where)),
            "qk_nope_head_dim": int(_req(cfg, "qk_nope_head_dim", where)),
            "qk_rope_head_dim": int(_req(cfg, "qk_rope_head_dim", where)), "v_head_dim": int(_req(cfg, "v_head_dim", where)),
            "num_experts": int(_req(cfg, "n_routed_experts", where)), "top_k": int(_req(cfg, "num_experts_per_tok", where)),
            "moe_ffn_hidden_size": int(_req(cfg, "moe_intermediate_size", where)),
            "num_shared_experts": int(cfg.get("n_shared_experts") or 0),
            "first_dense_layers": int(cfg.get("first_k_dense_replace") or 0), "moe_layer_freq": int(cfg.get("moe_layer_freq", 1)),
            "expert_groups": int(cfg.get("n_group") or 0), "expert_groups_per_token": int(cfg.get("topk_group") or 0)}


def _gpt_neox(cfg: Config, where: str) -> dict[str, Any]:
    """GPT-NeoX / Pythia: plain GELU MLP, LayerNorm, biases, untied by default."""
    return {**_common(cfg, where), "gated_mlp": False, "norm": "layernorm", "linear_bias": True}


def _window(cfg: Config, where: str, num_layers: int) -> dict[str, Any]:
    """Sliding-window layers from ``sliding_window`` and the layer schedule: HF ``layer_types``
    (each "sliding_attention" or "full_attention") or ``sliding_window_pattern`` (every n-th layer
    full). The schedule must be ModelSpec's: layer i full when (i + 1) % f == 0, else an error
    naming it. No window, or no schedule: every layer full ({})."""
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if not window:
        return {}
    if types:
        unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
        if unknown or len(types) != num_layers:
            raise WorkloadError(f"hf_config {where}: layer_types has {len(types)} entries {unknown or ''} for "
                                f"{num_layers} layers; need one 'sliding_attention' or 'full_attention' per layer")
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        if not full:
            raise WorkloadError(f"hf_config {where}: layer_types slides on every layer (window {window}); "
                                "ModelSpec needs at least one full-attention layer per period")
        freq = full[0] + 1
        if full != [i for i in range(num_layers) if (i + 1) % freq == 0]:
            raise WorkloadError(f"hf_config {where}: layer_types full-attention layers {full} are not every "
                                f"{freq}-th layer; ModelSpec cannot express this schedule")
        return {"sliding_window": int(window), "full_attention_freq": freq}
    pattern = cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern")
    return {"sliding_window": int(window), "full_attention_freq": int(pattern)} if pattern else {}


def _gpt_oss(cfg: Config, where: str) -> dict[str, Any]:
    """GPT-OSS: every layer MoE (``num_local_experts`` experts of ``intermediate_size``, top
    ``num_experts_per_tok``), attention and expert biases (``attention_bias``), sliding-window
    layers from ``layer_types``, the experts' gate and up clamped at ``swiglu_limit``."""
    out = _common(cfg, where)
    top_k = cfg.get("num_experts_per_tok") or _req(cfg, "experts_per_token", where)
    return {**out, "num_experts": int(_req(cfg, "num_local_experts", where)), "top_k": int(top_k),
            "moe_ffn_hidden_size": out["ffn_hidden_size"], "linear_bias": bool(cfg.get("attention_bias", False)),
            **_window(cfg, where, out["num_layers"]), **_swiglu_limit(cfg, where)}


def _swiglu_limit(cfg: Config, where: str) -> dict[str, Any]:
    """``activation_clamp`` from ``swiglu_limit`` when the config sets one (ModelSpec checks its sign)."""
    limit = cfg.get("swiglu_limit")
    if limit is None:
        return {}
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        raise WorkloadError(f"hf_config {where}: swiglu_limit = {limit!r}: must be a number (gpt-oss: 7.0)")
    return {"activation_clamp": float(limit)}


def _olmo2(cfg: Config, where: str) -> dict[str, Any]:
    """OLMo 2: the Llama shape (SwiGLU, RMSNorm, no biases), norms after attention and MLP and on
    queries and keys."""
    if cfg.get("attention_bias"):
        raise WorkloadError(f"hf_config {where}: attention_bias = true is not an OLMo 2 shape; check model_type")
    return _common(cfg, where)


def _phi3(cfg: Config, where: str) -> dict[str, Any]:
    """Phi-3: the Llama shape with fused qkv and gate_up projections (same GEMM FLOPs)."""
    return _common(cfg, where)


def _falcon(cfg: Config, where: str) -> dict[str, Any]:
    """Falcon: plain GELU MLP (``ffn_hidden_size``, else 4 x hidden), LayerNorm, biases from
    ``bias``, tied embeddings; KV heads ``num_kv_heads`` with ``new_decoder_architecture``
    (Falcon-40B/180B), else 1 with ``multi_query`` (Falcon-7B), else one per head."""
    heads, hidden = int(_req(cfg, "num_attention_heads", where)), int(_req(cfg, "hidden_size", where))
    if cfg.get("new_decoder_architecture"):
        kv = int(_req(cfg, "num_kv_heads", where))
    else:
        kv = 1 if cfg.get("multi_query", True) else heads
    ffn = int(cfg.get("ffn_hidden_size") or 4 * hidden)
    out: dict[str, Any] = {
        "num_layers": int(_req(cfg, "num_hidden_layers", where)), "hidden_size": hidden, "num_heads": heads,
        "num_kv_heads": kv, "ffn_hidden_size": ffn, "vocab_size": int(_req(cfg, "vocab_size", where)),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", True)), "gated_mlp": False, "norm": "layernorm",
        "linear_bias": bool(cfg.get("bias", False))}
    if cfg.get("max_position_embeddings"):
        out["max_seq_len"] = int(cfg["max_position_embeddings"])
    return out


def _gemma3(cfg: Config, where: str) -> dict[str, Any]:
    """Gemma 3 (``gemma3_text``, or the ``gemma3`` image-text wrapper read through its
    ``text_config``): GeGLU, tied embeddings, sliding-window layers from ``layer_types`` or
    ``sliding_window_pattern`` (5 local : 1 global)."""
    text = cfg.get("text_config") if cfg.get("model_type") == "gemma3" else cfg
    if not isinstance(text, Mapping):
        raise WorkloadError(f"hf_config {where}: model_type gemma3 without a text_config mapping; give the gemma3_text config")
    text = {"model_type": "gemma3_text", **text}
    out = _common(text, where, tied_default=True)
    return {**out, **_window(text, where, out["num_layers"])}


def _gemma2(cfg: Config, where: str) -> dict[str, Any]:
    """Gemma 2: GeGLU (gated), tied embeddings, every second layer a sliding window (HF Gemma2:
    layer i slides when i is even, so (i + 1) % 2 == 0 attends fully)."""
    out = _common(cfg, where, tied_default=True)
    if cfg.get("sliding_window"):
        out.update(sliding_window=int(cfg["sliding_window"]), full_attention_freq=2)
    return out


def _block(cfg: Config, key: str, where: str) -> Config:
    """A nested block of the config (DBRX ``attn_config`` / ``ffn_config``), required."""
    block = _req(cfg, key, where)
    if not isinstance(block, Mapping):
        raise WorkloadError(f"hf_config {where}: field {key!r} is {type(block).__name__}, not a mapping; "
                            f"model_type {cfg.get('model_type')!r} keeps its shape fields in it")
    return block


def _dbrx(cfg: Config, where: str) -> dict[str, Any]:
    """DBRX: its own field names (``n_layers``, ``d_model``, ``n_heads``, ``max_seq_len``), the
    key-value heads in ``attn_config.kv_n_heads``, every layer MoE with ``ffn_config.moe_num_experts``
    gated experts (w1 gate, v1 up, w2 down) of ``ffn_config.ffn_hidden_size``, ``moe_top_k`` per token;
    LayerNorm; untied head unless ``tie_word_embeddings``."""
    attn, ffn = _block(cfg, "attn_config", where), _block(cfg, "ffn_config", where)
    act = ffn.get("ffn_act_fn", {"name": "silu"})
    act_name = act.get("name") if isinstance(act, Mapping) else act
    if act_name != "silu":
        raise WorkloadError(f"hf_config {where}: ffn_config.ffn_act_fn {act_name!r} not supported for model_type "
                            "'dbrx'; only the gated 'silu' experts of the published DBRX are modelled")
    heads = int(_req(cfg, "n_heads", where))
    expert = int(_req(ffn, "ffn_hidden_size", where))
    out: dict[str, Any] = {
        "num_layers": int(_req(cfg, "n_layers", where)), "hidden_size": int(_req(cfg, "d_model", where)),
        "num_heads": heads, "num_kv_heads": int(attn.get("kv_n_heads") or heads), "ffn_hidden_size": expert,
        "vocab_size": int(_req(cfg, "vocab_size", where)), "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "num_experts": int(_req(ffn, "moe_num_experts", where)), "top_k": int(_req(ffn, "moe_top_k", where)),
        "moe_ffn_hidden_size": expert, "norm": "layernorm"}
    if cfg.get("max_seq_len"):
        out["max_seq_len"] = int(cfg["max_seq_len"])
    return out


def _llama4(cfg: Config, where: str) -> dict[str, Any]:
    """Llama 4 (``llama4``: the image-text wrapper, decoder fields in ``text_config``; ``llama4_text``):
    routed experts of ``intermediate_size`` (``num_local_experts``, ``num_experts_per_tok``) plus one
    shared expert of the same width on every ``interleave_moe_layer_step``-th layer counted from one
    (transformers' default ``moe_layers``), dense MLPs of ``intermediate_size_mlp`` on the others."""
    text = _block(cfg, "text_config", where) if cfg.get("model_type") == "llama4" else cfg
    step = int(text.get("interleave_moe_layer_step") or 1)
    layers = int(_req(text, "num_hidden_layers", where))
    listed = text.get("moe_layers")
    if listed is not None and list(listed) != list(range(step - 1, layers, step)):
        raise WorkloadError(f"hf_config {where}: moe_layers = {list(listed)} is not every {step}-th layer "
                            "(interleave_moe_layer_step); MoE layers at chosen positions cannot be expressed")
    expert = int(_req(text, "intermediate_size", where))
    out = _common(text, where)
    return {**out, "ffn_hidden_size": int(text.get("intermediate_size_mlp") or expert),
            "num_experts": int(_req(text, "num_local_experts", where)),
            "top_k": int(_req(text, "num_experts_per_tok", where)), "moe_ffn_hidden_size": expert,
            "num_shared_experts": 1, **_sparse_step(step)}


_BLOCK_CHARS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""Hugging Face ``layers_block_type`` names -> hybrid-pattern characters (NemotronHConfig)."""


def _block_pattern(cfg: Config, pattern_key: str, list_key: str, where: str) -> str | None:
    """A Nemotron-H layer pattern: the ``pattern_key`` string, or the ``list_key`` list of block names
    that later configs write instead; None when the config has neither."""
    if cfg.get(pattern_key):
        return str(cfg[pattern_key])
    blocks = cfg.get(list_key)
    if not blocks:
        return None
    unknown = sorted({str(b) for b in blocks} - set(_BLOCK_CHARS))
    if unknown:
        raise WorkloadError(f"hf_config {where}: {list_key} has block types {unknown}; known: {sorted(_BLOCK_CHARS)}")
    return "".join(_BLOCK_CHARS[str(b)] for b in blocks)


def _nemotron_h(cfg: Config, where: str) -> dict[str, Any]:
    """Nemotron-H / Nemotron 3 (NemotronHForCausalLM): a hybrid pattern of Mamba-2, attention, squared-ReLU
    MLP and MoE layers (``hybrid_override_pattern`` or ``layers_block_type``); routed experts of
    ``moe_intermediate_size`` with shared experts, a LatentMoE width (``moe_latent_size``) and MTP modules
    (``num_nextn_predict_layers``, each ``mtp_hybrid_override_pattern`` / ``mtp_layers_block_type``)."""
    pattern = _block_pattern(cfg, "hybrid_override_pattern", "layers_block_type", where)
    if pattern is None:
        raise WorkloadError(f"hf_config {where}: field 'hybrid_override_pattern' (or 'layers_block_type') missing; "
                            "it is required for model_type 'nemotron_h'")
    act = str(cfg.get("mlp_hidden_act", "relu2"))
    if act != "relu2":
        raise WorkloadError(f"hf_config {where}: mlp_hidden_act = {act!r}: only Nemotron-H's squared ReLU (relu2, "
                            "a non-gated MLP) is modelled")
    layers = int(cfg.get("num_hidden_layers") or len(pattern))
    out = {**_common({**cfg, "num_hidden_layers": layers,
                      "intermediate_size": cfg.get("intermediate_size") or cfg.get("moe_intermediate_size")}, where),
           "layer_pattern": pattern, "gated_mlp": False, "mamba_num_heads": int(_req(cfg, "mamba_num_heads", where)),
           "mamba_head_dim": int(_req(cfg, "mamba_head_dim", where)), "mamba_state_dim": int(_req(cfg, "ssm_state_size", where)),
           "mamba_num_groups": int(_req(cfg, "n_groups", where)), "mamba_conv_kernel": int(cfg.get("conv_kernel") or 4),
           "mamba_chunk_size": int(cfg.get("chunk_size") or 128)}
    if "E" in pattern:
        shared = int(cfg.get("n_shared_experts") or 0)
        out.update(num_experts=int(_req(cfg, "n_routed_experts", where)), top_k=int(_req(cfg, "num_experts_per_tok", where)),
                   moe_ffn_hidden_size=int(_req(cfg, "moe_intermediate_size", where)), num_shared_experts=shared,
                   moe_latent_size=int(cfg["moe_latent_size"]) if cfg.get("moe_latent_size") else None)
        if shared and cfg.get("moe_shared_expert_intermediate_size"):
            out["shared_expert_ffn_hidden_size"] = int(cfg["moe_shared_expert_intermediate_size"])
        if int(cfg.get("n_group") or 1) > 1:
            out.update(expert_groups=int(cfg["n_group"]), expert_groups_per_token=int(cfg.get("topk_group") or 0))
    depths = int(cfg.get("num_nextn_predict_layers") or 0)
    if depths:
        out.update(mtp_layers=depths,
                   mtp_layer_pattern=_block_pattern(cfg, "mtp_hybrid_override_pattern", "mtp_layers_block_type", where))
    return out


ARCHITECTURES: Mapping[str, Callable[[Config, str], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "qwen2": _llama, "qwen3": _llama, "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe, "qwen2_moe": _qwen3_moe, "deepseek_v3": _deepseek, "deepseek_v2": _deepseek,
    "gpt_neox": _gpt_neox, "gemma2": _gemma2, "gpt_oss": _gpt_oss, "olmo2": _olmo2, "phi3": _phi3, "falcon": _falcon,
    "gemma3": _gemma3, "gemma3_text": _gemma3, "dbrx": _dbrx, "llama4": _llama4, "llama4_text": _llama4,
    "nemotron_h": _nemotron_h,
}
"""``model_type`` -> field mapping."""

NOT_MODELLED: Mapping[str, str] = {
    "qwen2": "the q/k/v projection biases (3 vectors per layer, < 0.01 % of the parameters)",
    "mistral": "a sliding window on every layer (Mistral 7B v0.1): attention is taken as full",
    "gpt_neox": "the parallel attention+MLP residual (same FLOPs and bytes, one fewer norm dependency)",
    "gemma2": "logit soft-capping and the pre/post feed-forward norms' extra elementwise passes",
    "deepseek_v3": "the multi-token-prediction module (num_nextn_predict_layers); use the -mtp preset",
    "gpt_oss": "the attention sinks (one learned logit per head)",
    "olmo2": "the query/key RMSNorms and the post-attention/post-MLP norm placement (elementwise passes, no GEMM)",
    "phi3": "a sliding window on every layer (sliding_window 2047 in Phi-3-mini-4k): attention is taken as full",
    "falcon": "the parallel attention+MLP block and its second LayerNorm (new_decoder_architecture); ALiBi",
    "gemma3": "the vision tower of the image-text wrapper (text decoder only), query/key norms, pre/post feed-forward norms",
    "gemma3_text": "query/key norms and the pre/post feed-forward norms' extra elementwise passes",
    "llama4": ("the vision tower of the image-text wrapper (text decoder only); chunked attention "
               "(attention_chunk_size) and the NoPE layers (taken as full attention: the same for sequences up to "
               "the chunk); query/key L2 norms"),
    "llama4_text": ("chunked attention (attention_chunk_size) and the NoPE layers (taken as full attention: the "
                    "same for sequences up to the chunk); query/key L2 norms"),
    "nemotron_h": ("the MTP modules as the config counts them (num_nextn_predict_layers, each its own weights): "
                   "Megatron-Bridge's Nemotron 3 Super pre-training recipe runs its one module twice "
                   "(mtp_num_layers 2, mtp_use_repeated_layer; the nemotron-3-super preset); the Mamba-2 "
                   "time-step and the router's score-correction bias (a few vectors per layer)"),
    "dbrx": ("the QKV clamp (attn_config.clip_qkv, one elementwise pass); its LayerNorms have no bias, "
             "counted with one (2 x d_model per layer, < 0.001 % of the parameters)"),
}
"""What each mapping knowingly leaves out."""


DROPOUT_KEYS: dict[str, tuple[str, ...]] = {
    "attention_dropout": ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob"),
    "hidden_dropout": ("hidden_dropout", "resid_pdrop", "hidden_dropout_prob"),
}
"""ModelSpec dropout field -> the config.json spellings of it (transformers' LlamaConfig, Qwen, DeepSeek,
Gemma, OLMo 2 ``attention_dropout``; GPT-NeoX and Falcon ``hidden_dropout``; GPT-2, Phi-3 and DBRX
``attn_pdrop`` / ``resid_pdrop``; BERT-style ``*_dropout_prob``), first found wins; absent = 0."""


def _dropout(cfg: Config) -> dict[str, float]:
    """The dropout probabilities a config sets (nested ``attn_config`` too, as DBRX); ModelSpec checks
    they are in [0, 1)."""
    out: dict[str, float] = {}
    scopes = [cfg, *(v for v in cfg.values() if isinstance(v, Mapping))]
    for field, keys in DROPOUT_KEYS.items():
        found = next((scope[k] for k in keys for scope in scopes if scope.get(k) is not None), None)
        if found is not None:
            out[field] = float(found)
    return out


def model_from_hf_config(source: str | Path | Config, name: str | None = None) -> ModelSpec:
    """The ModelSpec of a ``config.json`` (a path or the parsed mapping)."""
    if isinstance(source, Mapping):
        cfg, where = source, "mapping"
    else:
        path = Path(source)
        if not path.is_file():
            raise WorkloadError(f"hf_config {str(path)!r} does not exist: give the path of a config.json")
        try:
            cfg = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"hf_config {str(path)!r} is not JSON ({exc.msg} at line {exc.lineno})") from None
        where = str(path)
    kind = str(cfg.get("model_type", ""))
    if kind not in ARCHITECTURES:
        raise WorkloadError(f"hf_config {where}: model_type {kind!r} not supported; use one of {sorted(ARCHITECTURES)}")
    fields = {**ARCHITECTURES[kind](cfg, where), **_dropout(cfg)}
    label = name or str(cfg.get("_name_or_path") or Path(where).parent.name or kind)
    note = f"; not modelled: {NOT_MODELLED[kind]}" if kind in NOT_MODELLED else ""
    return ModelSpec(name=label, source=f"Hugging Face config.json {where} (model_type {kind}){note}", **fields)
