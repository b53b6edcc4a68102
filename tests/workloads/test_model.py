"""ModelSpec validation and parameter counts against published model sizes."""

import dataclasses

import pytest

from clustersim.workloads import ModelSpec, WorkloadError, get_model

# (preset, published total, published active or None, source). Each within 2%.
PUBLISHED_SIZES = [
    ("llama3-8b", 8.03e9, None, "Llama 3 Herd of Models, Table 3 / HF model card 8.03B"),
    ("llama3-70b", 70.6e9, None, "HF meta-llama/Meta-Llama-3-70B model card 70.6B"),
    ("llama3-405b", 405.8e9, None, "HF meta-llama/Llama-3.1-405B model card 405.8B"),
    ("gpt3-175b", 174.6e9, None, "Narayanan et al. SC'21 Table 1 (Megatron counting) 174.6B"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, "Jiang et al. 2024, Mixtral of Experts, sec. 2"),
    ("deepseek-v3", 671e9, 37e9, "DeepSeek-V3 Technical Report, abstract (MTP excluded)"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, "Qwen3 Technical Report, Table 2"),
    ("qwen3-235b-a22b", 235e9, 22e9, "Qwen3 Technical Report, Table 2"),
    ("nemotron-4-340b", 341e9, None, "Nemotron-4 340B Technical Report, Table 1 (341B)"),
    ("llama4-scout", 109e9, 17e9, "Meta Llama 4 model card: 17B active, 109B total"),
    ("llama4-maverick", 400e9, 17e9, "Meta Llama 4 model card: 17B active, 400B total"),
    ("kimi-k2", 1.04e12, None, "moonshotai Kimi-K2 model card / tech report: 1.04T total"),
]


@pytest.mark.parametrize(("name", "total", "active", "source"), PUBLISHED_SIZES)
def test_parameter_counts_match_published_sizes(name: str, total: float, active: float | None,
                                                source: str) -> None:
    model = get_model(name)
    assert model.num_params() == pytest.approx(total, rel=0.02), source
    if active is not None:
        assert model.num_active_params() == pytest.approx(active, rel=0.02), source


def test_gpt_oss_counts_match_model_card_convention() -> None:
    # OpenAI gpt-oss model card Table 1: 116.83B total, 5.13B active; the active count there
    # includes the unembedding but not the input embedding lookup.
    model = get_model("gpt-oss-120b")
    assert model.num_params() == pytest.approx(116.83e9, rel=0.02)
    lookup = model.vocab_size * model.hidden_size
    assert model.num_active_params() - lookup == pytest.approx(5.13e9, rel=0.02)


def test_kimi_k2_active_params_match_rounded_model_card() -> None:
    # moonshotai/Kimi-K2-Base model card: "32B activated parameters" (two significant digits)
    assert get_model("kimi-k2").num_active_params() == pytest.approx(32e9, rel=0.03)


def test_deepseek_v3_with_mtp_matches_the_685b_checkpoint() -> None:
    # DeepSeek-V3 report sec. 4.2 / HF card: 685B = 671B main model + 14B MTP module, where the
    # checkpoint stores the MTP module's own copies of embedding and output head.
    model = get_model("deepseek-v3-mtp")
    copies = 2 * model.vocab_size * model.hidden_size
    assert model.num_params() + copies == pytest.approx(685e9, rel=0.01)
    assert model.num_params() - model.mtp_params() == get_model("deepseek-v3").num_params()


def test_dense_active_equals_total_and_moe_active_is_smaller() -> None:
    dense, moe = get_model("llama3-70b"), get_model("deepseek-v3")
    assert dense.num_active_params() == dense.num_params()
    assert moe.num_active_params() < moe.num_params() / 10


def test_total_is_embeddings_plus_layers_plus_head() -> None:
    model = get_model("tiny-moe")
    layers = sum(model.layer_params(i) for i in range(model.num_layers))
    assert model.num_params() == model.embedding_params() + layers + model.head_params()


def test_gpt3_closed_form_megatron_count() -> None:
    # Narayanan et al. SC'21 sec. 5.1: P = 12*l*h^2*(1 + 13/(12h) + (V+s)/(12*l*h)), plus the
    # final LayerNorm (2h) that the closed form omits.
    m = get_model("gpt3-175b")
    l, h, v, s = m.num_layers, m.hidden_size, m.vocab_size, m.max_seq_len
    closed = 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h)) + 2 * h
    assert m.num_params() == pytest.approx(closed, rel=1e-9)


def test_moe_layer_pattern_respects_dense_prefix_and_frequency() -> None:
    m = get_model("deepseek-v3")
    assert [m.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    every_other = dataclasses.replace(m, first_dense_layers=0, moe_layer_freq=2)
    assert every_other.num_moe_layers == (m.num_layers + 1) // 2
    odd = dataclasses.replace(every_other, moe_layer_offset=1)  # Hugging Face's interleave step 2
    assert [odd.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert odd.num_moe_layers == m.num_layers // 2
    assert odd.num_params() == every_other.num_params() - (m.num_layers % 2) * (
        every_other.layer_params(0) - odd.layer_params(0))


def test_llama4_maverick_alternates_dense_and_moe_layers_from_the_second() -> None:
    # NeMo Llama4Experts128Config: moe_layer_freq = [0, 1] * 24
    m = get_model("llama4-maverick")
    assert [m.is_moe_layer(i) for i in range(m.num_layers)] == [False, True] * 24


def _base(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = dict(name="x", num_layers=2, hidden_size=64, num_heads=4,
                                     num_kv_heads=2, ffn_hidden_size=128, vocab_size=100)
    fields.update(overrides)
    return fields


@pytest.mark.parametrize(("overrides", "field"), [
    ({"num_kv_heads": 3}, "num_kv_heads"),
    ({"hidden_size": 0}, "hidden_size"),
    ({"num_experts": 4, "top_k": 0, "moe_ffn_hidden_size": 32}, "top_k"),
    ({"num_experts": 4, "top_k": 2}, "moe_ffn_hidden_size"),
    ({"num_experts": 4, "top_k": 5, "moe_ffn_hidden_size": 32}, "top_k"),
    ({"top_k": 2}, "num_experts"),
    ({"attention": "mla", "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4},
     "v_head_dim"),
    ({"learned_position_embeddings": True}, "max_seq_len"),
    ({"num_experts": 4, "top_k": 1, "moe_ffn_hidden_size": 32, "moe_layer_freq": 2, "moe_layer_offset": 2},
     "moe_layer_offset"),
])
def test_invalid_specs_name_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(WorkloadError, match=field):
        ModelSpec(**_base(**overrides))


def test_layer_index_out_of_range_is_an_error() -> None:
    with pytest.raises(WorkloadError, match="layer_index"):
        get_model("tiny").layer_params(2)


def test_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_model("tiny").num_layers = 3  # type: ignore[misc]
