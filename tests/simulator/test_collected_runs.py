"""The published runs this project transcribed from outside the given table (issues 12 and 13).

workloads/data/published_runs_dgxc.csv holds the DGX Cloud Benchmarking recipe READMEs' tables
(SOURCES.md): MoE (Grok-1, DeepSeek-V3, Llama 4 Maverick) and dense (Nemotron-4, Llama 3.1, GPT-3
175B, MaxText, Paxml), a second publication family besides Megatron-Bridge. It is read with
``load_runs(COLLECTED_PATH)``; the default data set is still the given table (docs/VALIDATION.md,
December's twelfth and thirteenth stops).
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from clustersim.simulator.calibration.validate import (
    COLLECTED_PATH, DATA_PATH, family_of, load_runs, reason_group, scenario_for_row, validate_row,
)


@pytest.fixture(scope="module")
def collected() -> pd.DataFrame:
    return pd.read_csv(COLLECTED_PATH)


def test_the_collected_file_extends_the_given_table(collected: pd.DataFrame) -> None:
    given = pd.read_csv(DATA_PATH)
    assert len(load_runs(COLLECTED_PATH)) == len(collected) == 286
    assert pd.concat([given, collected]).row_id.is_unique
    assert collected.row_id.min() > given.row_id.max()
    assert set(given.columns) <= set(collected.columns)  # same columns, plus etp


def test_every_collected_row_names_its_source_at_a_commit(collected: pd.DataFrame) -> None:
    for row in collected.itertuples():
        assert row.source.strip(), row.row_id
        assert re.search(r"^github NVIDIA/dgxc-benchmarking \S+\.md @ [0-9a-f]{40}$", row.source_locator), row.row_id
        assert family_of(row.source_id) == "dgxc-benchmarking"


def test_printed_step_time_and_throughput_agree_unless_the_row_says_not(collected: pd.DataFrame) -> None:
    # tokens/s = seq x GBS / step; a row whose printed throughput breaks it says so in notes
    # a step-time cell that is not a number as printed is left empty and says so
    for row in collected.itertuples():
        if pd.isna(row.iteration_time_s):
            assert "not a number as printed" in row.notes and row.tokens_per_s_total > 0, row.row_id
            continue
        implied = row.seq_len * row.global_batch_seqs / row.iteration_time_s
        agrees = abs(implied / row.tokens_per_s_total - 1) < 0.01
        assert agrees or "not seq*GBS/step" in row.notes, (row.row_id, implied, row.tokens_per_s_total)


def test_collected_plans_are_read_as_printed(collected: pd.DataFrame) -> None:
    rows = {r["row_id"]: r for r in load_runs(COLLECTED_PATH).to_dict("records")}
    grok_gb200 = scenario_for_row(rows[1001])           # TP4 PP1 CP1 EP8 ETP4, 64 layers
    assert (grok_gb200.plan.tp, grok_gb200.plan.ep, grok_gb200.plan.etp, grok_gb200.plan.dp) == (4, 8, 4, 32)
    assert grok_gb200.model.name == "grok-1" and grok_gb200.model.num_layers == 64
    proxy = scenario_for_row(rows[1009])                 # 8 H100, the 2-layer proxy of Grok-1
    assert proxy.model.num_layers == 2 and proxy.plan.etp == 1 and proxy.plan.ep == 2
    ds = scenario_for_row(rows[1028])                    # DeepSeek-V3, 1024 H100, TP2 PP16 EP64
    assert (ds.plan.tp, ds.plan.pp, ds.plan.ep, ds.plan.dp) == (2, 16, 64, 32)


SKIP_FACTS = ("parallel degrees (tp, pp, dp) not published",)
"""The fact a collected row may lack: the Paxml and MaxText-Llama 2 tables print no plan (Llama 4
Maverick, skipped until December's fourteenth stop for want of a preset, now has one)."""


def test_every_collected_moe_row_and_one_row_per_source_is_simulated(collected: pd.DataFrame) -> None:
    # every MoE row of Grok-1 and DeepSeek-V3 and the first row of each source; a skip names a missing
    # fact (SKIP_FACTS), never a spelling
    runs = load_runs(COLLECTED_PATH)
    picked = runs[runs.model.str.contains("grok|deepseek|maverick", case=False) | ~runs.source_id.duplicated()]
    assert len(picked) >= 39 + 14
    simulated = 0
    for row in picked.to_dict("records"):
        out = validate_row(row)
        if out["status"] == "ok":
            assert out["predicted_step_time_s"] > 0
            simulated += 1
        else:
            assert any(f in out["reason"] for f in SKIP_FACTS), (row["row_id"], out["reason"])
            assert "maxtext" in row["source_id"] or "paxml" in row["source_id"], row["row_id"]
    assert simulated >= 39 + 12


def test_the_nemotron_4_15b_rows_read_their_preset(collected: pd.DataFrame) -> None:
    rows = {r["row_id"]: r for r in load_runs(COLLECTED_PATH).to_dict("records")}
    sc = scenario_for_row(rows[1101])                    # 16 H100, TP2 DP8 MBS2 GBS64, 2.746 s
    assert sc.model.name == "nemotron-4-15b" and (sc.plan.tp, sc.plan.dp, sc.plan.micro_batch) == (2, 8, 2)


def test_the_llama4_maverick_rows_read_their_preset_and_plan(collected: pd.DataFrame) -> None:
    rows = {r["row_id"]: r for r in load_runs(COLLECTED_PATH).to_dict("records")}
    sc = scenario_for_row(rows[1348])                    # 128 GB200, TP1 PP2 VP12 EP64 ETP1 GA16
    assert sc.model.name == "llama4-maverick" and sc.model.num_moe_layers == 24
    assert (sc.plan.tp, sc.plan.pp, sc.plan.vpp, sc.plan.ep, sc.plan.dp) == (1, 2, 12, 64, 64)


def test_skip_reasons_count_together_but_keep_the_quoted_value() -> None:
    a = reason_group("degrees disagree: tp4*pp2*cp1*dp8 != num_gpus 128 (source quirk)")
    assert a == reason_group("degrees disagree: tp8*pp1*cp1*dp4 != num_gpus 64 (source quirk)")
    assert reason_group("model 'DeepSeekV4 Flash': MoE without a preset") == "model 'DeepSeekV4 Flash': MoE without a preset"


def test_the_deepseek_v3_llmb_rows_read_their_recompute_modules(collected: pd.DataFrame) -> None:
    # deepseek_v3/pretraining/launch.sh at the README's commit: mla_up_proj on H100, core_attn on GB200
    rows = {r["row_id"]: r for r in load_runs(COLLECTED_PATH).to_dict("records")}
    expected = {1027: ("mla_up_proj",), 1028: ("mla_up_proj",), 1029: ("core_attn",), 1031: ("core_attn",)}
    for rid, modules in expected.items():
        sc = scenario_for_row(rows[rid])
        assert (sc.plan.recompute, sc.plan.recompute_modules) == ("selective", modules), rid
    out = validate_row(rows[1028])                         # 1,024 H100, PP 16: fits with the recipe's recompute
    assert out["status"] == "ok" and "memory check lifted" not in out["inferred"]
