"""The published runs this project transcribed from outside the given table (issues 12 and 13).

workloads/data/published_runs_dgxc.csv holds the DGX Cloud Benchmarking recipe READMEs' MoE
tables (Grok-1, DeepSeek-V3; SOURCES.md): a second publication family with MoE rows. It is read
with ``load_runs(COLLECTED_PATH)``; the default data set is still the given table
(docs/VALIDATION.md, December's twelfth stop).
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from clustersim.simulator.calibration.validate import (
    COLLECTED_PATH, DATA_PATH, family_of, load_runs, scenario_for_row, validate_row,
)


@pytest.fixture(scope="module")
def collected() -> pd.DataFrame:
    return pd.read_csv(COLLECTED_PATH)


def test_the_collected_file_extends_the_given_table(collected: pd.DataFrame) -> None:
    given = pd.read_csv(DATA_PATH)
    assert len(load_runs(COLLECTED_PATH)) == len(collected) == 31
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
    for row in collected.itertuples():
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


def test_every_collected_row_is_simulated(collected: pd.DataFrame) -> None:
    for row in load_runs(COLLECTED_PATH).to_dict("records"):
        out = validate_row(row)
        assert out["status"] == "ok", (row["row_id"], out["reason"])
        assert out["predicted_step_time_s"] > 0
