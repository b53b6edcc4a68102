"""ModelSpec from a Hugging Face ``config.json`` (``model: {hf_config: path/to/config.json}``).

Owns the field mapping per ``model_type`` (``ARCHITECTURES``): the shape fields every decoder
config shares (``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
``num_key_value_heads``, ``intermediate_size``, ``vocab_size``, ``head_dim``,
``max_position_embeddings``, ``tie_word_embeddings``) and each family's own (MoE experts, MLA ranks,
GeGLU vs plain MLP, LayerNorm and biases, sliding-window layers). An unknown ``model_type`` or a
feature the ModelSpec cannot express (Qwen3-MoE ``mlp_only_layers``) is an error naming it, never a
fallback. What is knowingly left out is said per family (``NOT_MODELLED``). It reads files and
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
            "moe_layer_freq": int(cfg.get("decoder_sparse_step", 1))}


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


def _gemma2(cfg: Config, where: str) -> dict[str, Any]:
    """Gemma 2: GeGLU (gated), tied embeddings, every second layer a sliding window (HF Gemma2:
    layer i slides when i is even, so (i + 1) % 2 == 0 attends fully)."""
    out = _common(cfg, where, tied_default=True)
    if cfg.get("sliding_window"):
        out.update(sliding_window=int(cfg["sliding_window"]), full_attention_freq=2)
    return out


ARCHITECTURES: Mapping[str, Callable[[Config, str], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "qwen2": _llama, "qwen3": _llama, "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe, "qwen2_moe": _qwen3_moe, "deepseek_v3": _deepseek, "deepseek_v2": _deepseek,
    "gpt_neox": _gpt_neox, "gemma2": _gemma2,
}
"""``model_type`` -> field mapping."""

NOT_MODELLED: Mapping[str, str] = {
    "qwen2": "the q/k/v projection biases (3 vectors per layer, < 0.01 % of the parameters)",
    "mistral": "a sliding window on every layer (Mistral 7B v0.1): attention is taken as full",
    "gpt_neox": "the parallel attention+MLP residual (same FLOPs and bytes, one fewer norm dependency)",
    "gemma2": "logit soft-capping and the pre/post feed-forward norms' extra elementwise passes",
    "deepseek_v3": "the multi-token-prediction module (num_nextn_predict_layers); use the -mtp preset",
}
"""What each mapping knowingly leaves out."""


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
    fields = ARCHITECTURES[kind](cfg, where)
    label = name or str(cfg.get("_name_or_path") or Path(where).parent.name or kind)
    note = f"; not modelled: {NOT_MODELLED[kind]}" if kind in NOT_MODELLED else ""
    return ModelSpec(name=label, source=f"Hugging Face config.json {where} (model_type {kind}){note}", **fields)
