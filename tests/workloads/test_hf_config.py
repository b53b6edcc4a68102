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
