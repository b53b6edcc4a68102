"""Step FLOP conventions against published statements and published tables."""

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from clustersim.workloads import (
    TrainingSpec,
    WorkloadError,
    get_model,
    megatron_flops_per_step,
    model_flops_per_step,
    mosaic_flops_per_step,
)
from clustersim.workloads.flops import attention_width

RUNS = Path(__file__).resolve().parents[2] / "workloads" / "data" / "published_runs.csv"
DAY = 86400.0


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return pd.read_csv(RUNS)


def _training(row: pd.Series) -> TrainingSpec:
    return TrainingSpec(seq_len=int(row.seq_len), global_batch_size=int(row.global_batch_seqs))


@pytest.mark.parametrize(("model", "tokens", "gpus", "tflops", "days"), [
    # Narayanan et al. SC'21 sec. 5.1: GPT-3 175B, 300B tokens, 1024 A100 at 140 TFLOP/s/GPU
    # -> "34 days"; the 1T model, 450B tokens, 3072 A100 at 163 TFLOP/s -> "84 days".
    ("gpt3-175b", 300e9, 1024, 140e12, 34.0),
    ("gpt-1008.0b", 450e9, 3072, 163e12, 84.0),
])
def test_megatron_formula_reproduces_sc21_training_times(model: str, tokens: float, gpus: int,
                                                         tflops: float, days: float) -> None:
    spec = get_model(model)
    step = TrainingSpec(seq_len=2048, global_batch_size=1536)
    per_token = megatron_flops_per_step(spec, step, recompute_full=True) / step.tokens_per_step
    assert per_token * tokens / (gpus * tflops) / DAY == pytest.approx(days, rel=0.03)


def test_megatron_formula_without_recompute_is_three_quarters() -> None:
    spec, step = get_model("gpt3-175b"), TrainingSpec(seq_len=2048, global_batch_size=8)
    ratio = megatron_flops_per_step(spec, step, False) / megatron_flops_per_step(spec, step, True)
    assert ratio == pytest.approx(0.75)


def test_megatron_and_palm_agree_for_gpt3_without_recompute() -> None:
    # Both count 6 FLOP per param per token plus attention; for a GPT shape they differ only by
    # biases, norms and position embeddings (< 1%).
    spec, step = get_model("gpt3-175b"), TrainingSpec(seq_len=2048, global_batch_size=8)
    assert model_flops_per_step(spec, step) == pytest.approx(
        megatron_flops_per_step(spec, step, recompute_full=False), rel=0.01)


def test_mosaic_formula_reproduces_llm_foundry_table(runs: pd.DataFrame) -> None:
    # MosaicML llm-foundry benchmark README: Model TFLOP/s per GPU = (6N + 12*L*d*s) * tokens/s
    # per GPU, and HFU uses 8N + 16*L*d*s with activation checkpointing.
    rows = runs[runs.source_id == "mosaicml-llmfoundry"]
    assert len(rows) > 20
    for _, row in rows.iterrows():
        # NumParams includes learned positions for the benchmark's max_seq_len (= seq_len)
        spec = dataclasses.replace(get_model(row.model), max_seq_len=int(row.seq_len))
        step = _training(row)
        per_token = mosaic_flops_per_step(spec, step) / step.tokens_per_step
        assert per_token * row.tokens_per_s_per_gpu / 1e12 == pytest.approx(
            row.tflops_per_gpu, rel=0.01, abs=1.0), row.row_id
        if str(row.recompute).startswith("full"):
            hfu = mosaic_flops_per_step(spec, step, activation_checkpointing=True)
            per_gpu = hfu / step.tokens_per_step * row.tokens_per_s_per_gpu
            pct = per_gpu / (row.peak_tflops_basis * 1e12) * 100
            assert pct == pytest.approx(row.hfu_pct, rel=0.01, abs=0.1), row.row_id


def test_mosaic_num_params_match_the_numparams_column(runs: pd.DataFrame) -> None:
    rows = runs[runs.source_id == "mosaicml-llmfoundry"].drop_duplicates(["model", "seq_len"])
    for _, row in rows.iterrows():
        spec = dataclasses.replace(get_model(row.model), max_seq_len=int(row.seq_len))
        assert spec.num_params() == pytest.approx(row.params_reported, rel=0.005), row.model


def _tflops_ratio(runs: pd.DataFrame, source_prefix: str, causal: bool) -> pd.Series:
    rows = runs[runs.source_id.str.startswith(source_prefix) & runs.iteration_time_s.notna()
                & runs.tflops_per_gpu.notna()]
    ratios = {}
    for _, row in rows.iterrows():
        try:
            spec = get_model(row.model)
        except WorkloadError:
            continue
        flops = model_flops_per_step(spec, _training(row), include_input_embedding=False,
                                     causal_attention=causal)
        ratios[(row.row_id, row.model)] = flops / row.iteration_time_s / row.num_gpus / 1e12 \
            / row.tflops_per_gpu
    return pd.Series(ratios)


def test_nemo_table_model_tflops_are_palm_without_input_embedding(runs: pd.DataFrame) -> None:
    # NeMo 24.07 performance_summary.md 'Model TFLOP/sec/GPU' (GPT3, Llama 2/3, Nemotron rows):
    # recomputed from iteration time with our presets, within 1%.
    ratios = _tflops_ratio(runs, "nemo-perf", causal=False)
    assert len(ratios) >= 15
    assert ratios.between(0.99, 1.01).all(), ratios[~ratios.between(0.99, 1.01)]


def test_bridge_table_model_tflops_use_causal_attention(runs: pd.DataFrame) -> None:
    # Megatron-Bridge performance summaries: Llama 3/3.1 and Qwen3 rows within 3% when the
    # attention term is halved for the causal mask (DeepSeek-V3 rows include MTP, gpt-oss
    # sliding windows; neither is modelled, so they are left out).
    ratios = _tflops_ratio(runs, "megatron-bridge", causal=True)
    kept = ratios[[("LLAMA" in m or "Qwen3" in m) for _, m in ratios.index]]
    assert len(kept) >= 100
    assert kept.between(0.97, 1.03).all(), kept[~kept.between(0.97, 1.03)]


def test_bridge_moe_rows_match_with_mla_and_sliding_window(runs: pd.DataFrame) -> None:
    # Megatron-Bridge tables for DeepSeek-V3 with and without MTP and Kimi-K2 (MLA, 256/384
    # experts; the MTP module runs one more MoE block and the output head again), and
    # gpt-oss-120b from the 26.06 tables on (sliding window 128 on alternate layers; earlier
    # tables used another formula, ratio ~1.2), within 1.5%.
    ratios = _tflops_ratio(runs, "megatron-bridge", causal=True)
    keep = []
    for row_id, model in ratios.index:
        source = runs.loc[runs.row_id == row_id, "source_id"].iloc[0]
        newer_oss = model == "GPT OSS 120B" and source >= "megatron-bridge-26.06"
        mla = ("DeepSeekV3 (w/o MTP)", "DeepSeekV3 (w/ MTP)", "Kimi_K2")
        keep.append(model in mla or newer_oss)
    kept = ratios[keep]
    assert len(kept) >= 10
    assert kept.between(0.985, 1.015).all(), kept[~kept.between(0.985, 1.015)]


def test_sliding_window_layers_count_their_band() -> None:
    spec = get_model("gpt-oss-120b")
    assert [spec.attention_window(i) for i in range(4)] == [128, None, 128, None]
    full = dataclasses.replace(spec, sliding_window=None)
    step = TrainingSpec(seq_len=4096, global_batch_size=1)
    # half the layers drop from 12*h_attn*s to 12*h_attn*w per token
    saved = 18 * 12 * attention_width(spec) * (4096 - 128) * step.tokens_per_step
    difference = model_flops_per_step(full, step) - model_flops_per_step(spec, step)
    assert difference == pytest.approx(saved)


def test_palm_flops_scale_linearly_with_batch_and_count_active_params() -> None:
    spec = get_model("mixtral-8x7b")
    one, two = (TrainingSpec(seq_len=4096, global_batch_size=b) for b in (1, 2))
    assert model_flops_per_step(spec, two) == pytest.approx(2 * model_flops_per_step(spec, one))
    attention = 12 * spec.num_layers * spec.hidden_size * 4096 * 4096
    # the input-embedding lookup (untied word table) runs no FLOPs and is not counted (PaLM 6N)
    assert model_flops_per_step(spec, one) == pytest.approx(
        6 * (spec.num_active_params() - spec.vocab_size * spec.hidden_size) * 4096 + attention)
