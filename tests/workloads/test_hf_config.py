"""Tests of workloads.hf_config: a config.json per architecture (tests/workloads/data/hf_configs,
sources in its SOURCES.md) gives the preset built from the same config, or the published parameter
count; unknown model types and inexpressible features are errors naming them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from clustersim.workloads import get_model, load_model
from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.hf_config import model_from_hf_config

DATA = Path(__file__).parent / "data" / "hf_configs"
SHAPE = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "attn_head_dim",
         "num_experts", "top_k", "moe_ffn_hidden_size", "num_shared_experts", "first_dense_layers", "attention",
         "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "gated_mlp", "tied_embeddings")


@pytest.mark.parametrize(("folder", "preset"), [("Meta-Llama-3-8B", "llama3-8b"), ("Mixtral-8x7B-v0.1", "mixtral-8x7b"),
                                                ("Qwen3-30B-A3B", "qwen3-30b-a3b"), ("DeepSeek-V3", "deepseek-v3")])
def test_config_gives_the_preset_of_the_same_config(folder: str, preset: str) -> None:
    got, want = model_from_hf_config(DATA / folder / "config.json"), get_model(preset)
    assert {k: getattr(got, k) for k in SHAPE} == {k: getattr(want, k) for k in SHAPE}
    assert got.num_params() == want.num_params()


@pytest.mark.parametrize(("folder", "billions", "rel"), [
    ("Mistral-7B-v0.1", 7.24, 0.01),   # model card: 7.24B params
    ("Qwen2.5-32B", 32.5, 0.01),       # model card: 32.5B (31.0B non-embedding)
    ("gpt-neox-20b", 20.55, 0.01),     # Black et al. 2022, Table 1: 20,554,567,680
    ("gemma-2-9b", 9.24, 0.01),        # model card: 9.24B
    ("gpt-oss-20b", 20.91, 0.005),     # OpenAI, gpt-oss-120b & gpt-oss-20b Model Card (Aug 2025), Table 1: 20.91B total
    ("OLMo-2-0425-1B", 1.48, 0.01),    # 1.48B params (whatmodel.sh listing of OLMo 2 1B 0425, from the HF safetensors metadata)
    ("Phi-3-mini-4k-instruct", 3.8, 0.01),  # Abdin et al. 2024, Phi-3 Technical Report: "phi-3-mini, a 3.8 billion parameter language model"
    ("gemma-3-12b", 11.771, 0.005),    # Gemma 3 Technical Report (arXiv:2503.19786) Table 1, 12B: 1,012M embedding + 10,759M non-embedding (text decoder; vision tower not modelled)
    ("falcon-40b-instruct", 40.0, 0.05),  # model card: "a 40B parameters causal decoder-only model" (rounded figure, hence 5 %)
])
def test_config_gives_the_published_parameter_count(folder: str, billions: float, rel: float) -> None:
    model = model_from_hf_config(DATA / folder / "config.json")
    assert model.num_params() / 1e9 == pytest.approx(billions, rel=rel)


def test_family_features_are_read_not_assumed() -> None:
    neox = model_from_hf_config(DATA / "gpt-neox-20b" / "config.json")
    assert (neox.gated_mlp, neox.norm, neox.linear_bias) == (False, "layernorm", True)
    gemma = model_from_hf_config(DATA / "gemma-2-9b" / "config.json")
    assert (gemma.tied_embeddings, gemma.attn_head_dim, gemma.sliding_window, gemma.full_attention_freq) == (True, 256, 4096, 2)


def test_load_model_reads_hf_config_with_overrides() -> None:
    m = load_model({"hf_config": str(DATA / "Meta-Llama-3-8B" / "config.json"), "name": "mine", "max_seq_len": 4096})
    assert (m.name, m.max_seq_len, m.num_layers) == ("mine", 4096, 32)


def test_unknown_model_type_and_inexpressible_features_are_named(tmp_path: Path) -> None:
    cfg = json.loads((DATA / "Qwen3-30B-A3B" / "config.json").read_text())
    with pytest.raises(WorkloadError, match="'t5'"):
        model_from_hf_config({**cfg, "model_type": "t5"})
    with pytest.raises(WorkloadError, match="mlp_only_layers"):
        model_from_hf_config({**cfg, "mlp_only_layers": [0, 1]})
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(WorkloadError, match="not JSON"):
        model_from_hf_config(bad)
    with pytest.raises(WorkloadError, match="'hidden_size' missing"):
        model_from_hf_config({k: v for k, v in cfg.items() if k != "hidden_size"})
    assert dataclasses.is_dataclass(model_from_hf_config(cfg))


def test_sparse_step_puts_moe_on_every_step_th_layer_counted_from_one() -> None:
    # transformers Qwen2-MoE / Qwen3-MoE: layer i is sparse when (i + 1) % decoder_sparse_step == 0
    cfg = json.loads((DATA / "Qwen3-30B-A3B" / "config.json").read_text())
    every = model_from_hf_config(cfg)
    assert all(every.is_moe_layer(i) for i in range(every.num_layers))
    third = model_from_hf_config({**cfg, "decoder_sparse_step": 3})
    assert [third.is_moe_layer(i) for i in range(6)] == [False, False, True, False, False, True]


def test_new_family_features_are_read_not_assumed() -> None:
    oss = model_from_hf_config(DATA / "gpt-oss-20b" / "config.json")
    assert (oss.num_experts, oss.top_k, oss.moe_ffn_hidden_size, oss.linear_bias, oss.attn_head_dim) == (32, 4, 2880, True, 64)
    assert (oss.sliding_window, oss.full_attention_freq, oss.tied_embeddings) == (128, 2, False)
    # the 20b config maps onto the cited gpt-oss-120b preset's fields (same family, fewer layers and experts)
    big = get_model("gpt-oss-120b")
    assert {k: getattr(oss, k) for k in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                                          "vocab_size", "top_k", "linear_bias", "sliding_window", "full_attention_freq")} == \
        {k: getattr(big, k) for k in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                                       "vocab_size", "top_k", "linear_bias", "sliding_window", "full_attention_freq")}
    falcon = model_from_hf_config(DATA / "falcon-40b-instruct" / "config.json")
    assert (falcon.num_kv_heads, falcon.ffn_hidden_size, falcon.gated_mlp, falcon.norm, falcon.linear_bias,
            falcon.tied_embeddings) == (8, 4 * 8192, False, "layernorm", False, True)
    gemma = model_from_hf_config(DATA / "gemma-3-12b" / "config.json")  # the image-text wrapper: its text_config
    assert (gemma.num_layers, gemma.attn_head_dim, gemma.sliding_window, gemma.full_attention_freq, gemma.tied_embeddings) == \
        (48, 256, 1024, 6, True)
    olmo = model_from_hf_config(DATA / "OLMo-2-0425-1B" / "config.json")
    phi = model_from_hf_config(DATA / "Phi-3-mini-4k-instruct" / "config.json")
    assert (olmo.gated_mlp, olmo.tied_embeddings, phi.gated_mlp, phi.num_kv_heads, phi.attn_head_dim) == (True, False, True, 32, 96)


def test_layer_schedules_modelspec_cannot_express_are_named() -> None:
    cfg = json.loads((DATA / "gpt-oss-20b" / "config.json").read_text())
    with pytest.raises(WorkloadError, match="every 2-th layer"):
        model_from_hf_config({**cfg, "layer_types": ["sliding_attention", "full_attention", "full_attention"] +
                              ["sliding_attention", "full_attention"] * 10 + ["full_attention"]})
    with pytest.raises(WorkloadError, match="slides on every layer"):
        model_from_hf_config({**cfg, "layer_types": ["sliding_attention"] * 24})
    with pytest.raises(WorkloadError, match="need one 'sliding_attention' or 'full_attention' per layer"):
        model_from_hf_config({**cfg, "layer_types": ["chunked_attention"] * 24})
    falcon = json.loads((DATA / "falcon-40b-instruct" / "config.json").read_text())
    with pytest.raises(WorkloadError, match="'num_kv_heads' missing"):
        model_from_hf_config({k: v for k, v in falcon.items() if k != "num_kv_heads"})
    # Falcon-7B's older layout: one KV head (multi_query) without the new decoder architecture
    seven = model_from_hf_config({**falcon, "new_decoder_architecture": False, "multi_query": True})
    assert seven.num_kv_heads == 1


def _llama4_text(**overrides: object) -> dict[str, object]:
    """A Llama 4 Maverick text_config written from the NeMo Llama4Experts128Config values the
    llama4-maverick preset cites (Hugging Face field names; not a shipped file)."""
    text: dict[str, object] = {
        "model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048,
        "max_position_embeddings": 8192, "tie_word_embeddings": False}
    text.update(overrides)
    return text


def test_llama4_reads_its_decoder_from_text_config_and_matches_the_preset() -> None:
    preset = get_model("llama4-maverick")
    for cfg in (_llama4_text(), {"model_type": "llama4", "text_config": _llama4_text()}):
        m = model_from_hf_config(cfg, name="llama4-maverick")
        assert m.num_params() == preset.num_params() and m.num_active_params() == preset.num_active_params()
        assert [m.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
        assert (m.ffn_hidden_size, m.moe_ffn_hidden_size, m.num_shared_experts) == (16384, 8192, 1)
    scout = model_from_hf_config(_llama4_text(num_local_experts=16, interleave_moe_layer_step=1))
    assert scout.num_moe_layers == 48
    with pytest.raises(WorkloadError, match="moe_layers"):
        model_from_hf_config(_llama4_text(moe_layers=[0, 2]))
    with pytest.raises(WorkloadError, match="'text_config'"):
        model_from_hf_config({"model_type": "llama4"})


@pytest.mark.parametrize(("folder", "edits", "expected"), [
    # spellings of each family (the shipped configs all train without dropout: 0.0 or absent)
    ("gpt-neox-20b", {"attention_dropout": 0.1, "hidden_dropout": 0.2}, (0.2, 0.1)),
    ("Phi-3-mini-4k-instruct", {"attention_dropout": 0.05, "resid_pdrop": 0.1}, (0.1, 0.05)),
    ("Meta-Llama-3-8B", {"attention_dropout": 0.1}, (0.0, 0.1)),
    ("Meta-Llama-3-8B", {}, (0.0, 0.0)),
    ("falcon-40b-instruct", {}, (0.0, 0.0)),
])
def test_dropout_is_read_from_each_spelling(folder: str, edits: dict[str, float], expected: tuple[float, float]) -> None:
    cfg = {**json.loads((DATA / folder / "config.json").read_text()), **edits}
    m = model_from_hf_config(cfg)
    assert (m.hidden_dropout, m.attention_dropout) == expected


def test_dbrx_nested_attention_dropout_is_read_and_a_bad_one_named() -> None:
    cfg = json.loads((DATA / "dbrx-instruct" / "config.json").read_text())
    cfg["attn_config"] = {**cfg["attn_config"], "attn_pdrop": 0.1}
    assert model_from_hf_config(cfg).attention_dropout == 0.1
    with pytest.raises(WorkloadError, match="hidden_dropout = 1.5: must be a probability"):
        model_from_hf_config({**cfg, "resid_pdrop": 1.5})


HYBRID = ("layer_pattern", "mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups", "mamba_conv_kernel",
          "mamba_chunk_size", "shared_expert_ffn_hidden_size", "moe_latent_size", "mtp_layers", "mtp_layer_pattern")


def test_nemotron_h_config_gives_the_nano_preset() -> None:
    got, want = model_from_hf_config(DATA / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" / "config.json"), get_model("nemotron-3-nano")
    assert {k: getattr(got, k) for k in SHAPE + HYBRID} == {k: getattr(want, k) for k in SHAPE + HYBRID}
    assert got.num_params() == want.num_params()
    assert "mtp" in got.source.lower()  # what the mapping leaves out is said


def test_nemotron_h_reads_latent_moe_mtp_and_the_block_list() -> None:
    nano = json.loads((DATA / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" / "config.json").read_text())
    blocks = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    listed = {k: v for k, v in nano.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [blocks[c] for c in nano["hybrid_override_pattern"]]
    assert model_from_hf_config(listed).layer_pattern == nano["hybrid_override_pattern"]
    latent = model_from_hf_config({**nano, "moe_latent_size": 512, "num_nextn_predict_layers": 1,
                                   "mtp_layers_block_type": ["attention", "moe"]})
    assert (latent.moe_latent_size, latent.expert_width, latent.mtp_layers, latent.mtp_layer_pattern) == (512, 512, 1, "*E")
    h, lat, f, experts = 2688, 512, 1856, 128  # each MoE layer: experts at the latent width, two h x latent projections
    base = model_from_hf_config(nano)
    assert latent.moe_block_params() - base.moe_block_params() == experts * 2 * f * (lat - h) + 2 * h * lat
    assert latent.num_params() - latent.mtp_params() == base.num_params() + 23 * (latent.moe_block_params() - base.moe_block_params())
    with pytest.raises(WorkloadError, match="mlp_hidden_act"):
        model_from_hf_config({**nano, "mlp_hidden_act": "silu"})
    with pytest.raises(WorkloadError, match="layers_block_type"):
        model_from_hf_config({**listed, "layers_block_type": ["mamba", "gdn"] * 26})
