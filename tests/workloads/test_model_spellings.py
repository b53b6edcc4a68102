"""Tests of workloads.presets.resolve_model_name on the spellings model cards, hub ids and papers use,
and of the refusal to read a known family as a GPT-style model."""

from __future__ import annotations

import dataclasses

import pytest

from clustersim.simulator.calibration.validate_rules import SkipRow, model_for_row
from clustersim.workloads import TrainingSpec, get_model
from clustersim.workloads.presets import resolve_model_name


@pytest.mark.parametrize(("text", "preset"), [
    ("meta-llama/Llama-3.1-8B", "llama3-8b"), ("Llama-3.1-8B", "llama3-8b"), ("Llama 3 8B", "llama3-8b"),
    ("meta-llama/Meta-Llama-3-70B-Instruct", "llama3-70b"), ("Llama-3.3-70B-Instruct", "llama3-70b"),
    ("LLAMA3.1_405B", "llama3-405b"), ("meta-llama/Llama-3.1-405B", "llama3-405b"), ("Llama 2 70B", "llama2-70b"),
    ("Llama-2-70b-hf", "llama2-70b"), ("meta-llama/Llama-2-7b-hf", "llama2-7b"), ("Llama 2 13B", "llama2-13b"),
    ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"), ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("Qwen3_235B_a22B (tokendrop)", "qwen3-235b-a22b"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
    ("DeepSeekV3 (w/ MTP)", "deepseek-v3-mtp"), ("openai/gpt-oss-120b", "gpt-oss-120b"), ("GPT OSS 120B", "gpt-oss-120b"),
    ("nvidia/Nemotron-4-340B-Base", "nemotron-4-340b"), ("moonshotai/Kimi-K2-Base", "kimi-k2"),
    ("mosaicml/mpt-7b", "mpt-7b"), ("MPT-70b", "mpt-70b"),
])
def test_model_spelling(text: str, preset: str) -> None:
    assert resolve_model_name(text) == preset


def test_known_family_without_preset_is_a_named_skip_not_gpt_style() -> None:
    # (Llama-3.2-3B played this part until it got its preset; Falcon has none)
    row = {"model": "tiiuae/falcon-180B", "arch_type": "dense", "num_layers": 80, "hidden_size": 14848,
           "num_heads": 232, "vocab_size": 65024}
    with pytest.raises(SkipRow, match="'tiiuae/falcon-180B'"):
        model_for_row(row, [])


@pytest.mark.parametrize(("name", "published"), [("llama3.2-1b", 1_235_746_816), ("llama3.2-3b", 3_212_574_720)])
def test_llama32_presets_match_the_published_parameter_count(name: str, published: int) -> None:
    # torchtitan's Llama 3.2 note (code-search index id 35120692988) counts the tied-embedding model
    # without its RMSNorm weights; the preset counts them too: (2 per layer + final) x hidden
    m = get_model(name)
    assert m.num_params() - (2 * m.num_layers + 1) * m.hidden_size == published
    assert resolve_model_name(f"meta-llama/Llama-3.2-{name[-2:].upper()}-Instruct") == name


def test_mqa_with_tp_above_kv_heads_replicates_kv() -> None:
    from clustersim.simulator.plan.plan import ParallelPlan
    from clustersim.simulator.step.simulate import simulate
    from clustersim.topologies import get_cluster
    mqa = dataclasses.replace(get_model("llama3-8b"), num_kv_heads=1, name="mqa")
    t = TrainingSpec(seq_len=2048, global_batch_size=16)
    c = get_cluster("dgx-h100", 8)
    r1 = simulate(mqa, t, c, ParallelPlan(tp=1, dp=8, zero=1))
    r4 = simulate(mqa, t, c, ParallelPlan(tp=4, dp=2, zero=1))
    # each tp rank holds its query heads and the one (replicated) KV head: weights per GPU shrink < 4x
    w1, w4 = r1.memory[0].weights, r4.memory[0].weights
    assert w1 / 4 < w4 < w1 / 3.5
    assert r4.model_flops == pytest.approx(r1.model_flops)
