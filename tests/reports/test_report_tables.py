"""Input contract, loading and the derived tables of reports/ (synthetic rows, see conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from clustersim.reports.errors import ReportError
from clustersim.reports.tables import (
    hardware_table, load_results, plan_label, plan_table, with_costs,
)

Factory = Callable[..., pd.DataFrame]


def test_missing_columns_named_in_error(results_factory: Factory) -> None:
    frame = results_factory().drop(columns=["t_bubble", "mfu"])
    with pytest.raises(ReportError, match="missing columns") as info:
        load_results(frame)
    assert "t_bubble" in str(info.value) and "mfu" in str(info.value)
    assert "ARCHITECTURE" in str(info.value)  # the fix is named


def test_breakdown_that_does_not_sum_is_rejected(results_factory: Factory) -> None:
    frame = results_factory()
    frame.loc[0, "t_other"] += 0.5 * frame.loc[0, "step_time_s"]
    with pytest.raises(ReportError, match="sums to"):
        load_results(frame)


def test_mfu_above_one_is_rejected(results_factory: Factory) -> None:
    frame = results_factory()
    frame.loc[0, "ideal_compute_s"] = 2.0 * frame.loc[0, "t_compute"]
    with pytest.raises(ReportError, match="MFU > 1"):
        load_results(frame)


def test_csv_parquet_and_directory_load_alike(results_factory: Factory, tmp_path: Path) -> None:
    frame = results_factory()
    frame.to_csv(tmp_path / "a.csv", index=False)
    frame.to_parquet(tmp_path / "b.parquet")
    (tmp_path / "sweep").mkdir()
    frame.to_parquet(tmp_path / "sweep" / "results.parquet")
    loaded = [load_results(p) for p in (frame, tmp_path / "a.csv", tmp_path / "b.parquet",
                                         tmp_path / "sweep")]
    for other in loaded[1:]:
        assert len(other) == len(loaded[0])
        np.testing.assert_allclose(other["step_time_s"], loaded[0]["step_time_s"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="results.parquet or results.csv"):
        load_results(tmp_path / "empty")
    with pytest.raises(ReportError, match="does not exist"):
        load_results(tmp_path / "nothing_here.csv")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ReportError, match="unknown file type"):
        load_results(tmp_path / "x.json")


def test_cost_per_million_tokens_closed_form(results_factory: Factory) -> None:
    frame = load_results(results_factory(clusters=("h100", "a100"), with_error=False))
    priced = with_costs(frame, {"h100": 2.5, "a100": 1.2})
    # $/M tokens = ($/GPU-h / 3600) / (tokens/s/GPU) * 1e6
    price = frame["cluster"].map({"h100": 2.5, "a100": 1.2})
    expected = price / 3600.0 / frame["tokens_per_s_per_gpu"] * 1e6
    np.testing.assert_allclose(priced["cost_per_million_tokens"], expected, rtol=1e-12)
    flat = with_costs(frame, 2.0)
    assert (flat["cost_per_gpu_hour"] == 2.0).all()
    unpriced = with_costs(frame, None)  # data says 0 $/GPU-h: unknown, not free
    assert unpriced["cost_per_million_tokens"].isna().all()
    for negative in (-1.0, {"h100": -1.0}):
        with pytest.raises(ReportError, match="cost_per_gpu_hour"):
            with_costs(frame, negative)


def test_plan_table_is_fastest_first_and_naive_speedup_is_one(results_factory: Factory) -> None:
    table = plan_table(load_results(results_factory()))
    for _, group in table.groupby(["cluster", "num_gpus"]):
        assert group["tokens_per_s_per_gpu"].is_monotonic_decreasing
    naive = table[table["series"] == "naive_dp"]
    np.testing.assert_allclose(naive["speedup_vs_naive_dp"], 1.0)
    assert (table[table["series"] == "best"]["speedup_vs_naive_dp"] >= 1.0).all()
    assert "error" not in set(table["series"])


def test_hardware_table_compares_at_common_largest_scale(results_factory: Factory) -> None:
    frame = pd.concat([results_factory(clusters=("h100",), counts=(8, 64, 512)),
                       results_factory(clusters=("a100",), counts=(8, 64), with_error=False)])
    table = hardware_table(load_results(frame))
    assert sorted(table["cluster"]) == ["a100", "h100"]
    assert set(table["num_gpus"]) == {64}


def test_hardware_table_shows_energy_and_cost_per_cluster_each_at_its_own_price(results_factory: Factory) -> None:
    """kWh per million tokens = mean W/GPU x GPUs / (tokens/s) / 3.6e6 x 1e6 on each cluster's own
    rows; $ per million tokens at each cluster's own price ($/GPU-h / 3600 / tokens/s/GPU x 1e6)."""
    prices = {"h100": 2.5, "a100": 1.2}
    table = hardware_table(with_costs(load_results(results_factory(clusters=("h100", "a100"))), prices))
    for row in table.to_dict("records"):
        tokens_per_s = row["tokens_per_s_per_gpu"] * row["num_gpus"]
        assert row["kwh_per_million_tokens"] == pytest.approx(row["mean_gpu_power_w"] * row["num_gpus"] / tokens_per_s / 3.6)
        assert row["cost_per_gpu_hour"] == prices[row["cluster"]]
        assert row["cost_per_million_tokens"] == pytest.approx(prices[row["cluster"]] / 3600 / row["tokens_per_s_per_gpu"] * 1e6)
    old = load_results(results_factory(clusters=("h100", "a100")).drop(columns=["kwh_per_million_tokens", "mean_gpu_power_w"]))
    assert "kwh_per_million_tokens" not in hardware_table(old).columns  # rows from before the energy model


def test_plan_label_names_degrees() -> None:
    row = {"tp": 8, "pp": 4, "dp": 32, "cp": 2, "ep": 1, "vpp": 1, "micro_batch": 2,
           "schedule": "interleaved", "recompute": "selective", "zero": 1, "fsdp": "none"}
    assert plan_label(row) == "tp8 pp4 dp32 cp2 mb2 interleaved rc=selective zero1"


def test_bad_values_in_ok_rows_are_named(results_factory: Factory) -> None:
    frame = results_factory()
    frame.loc[2, "tokens_per_s_per_gpu"] = float("nan")
    with pytest.raises(ReportError, match=r"tokens_per_s_per_gpu .* at point h100-tp4-pp1-8"):
        load_results(frame)
    fractional = results_factory()
    fractional["tp"] = fractional["tp"].astype(float)
    fractional.loc[0, "tp"] = 2.5
    with pytest.raises(ReportError, match="tp must hold whole numbers"):
        load_results(fractional)


def test_without_series_each_plan_is_a_series(results_factory: Factory) -> None:
    frame = results_factory().drop(columns=["series"])
    loaded = load_results(frame)
    ok = loaded[loaded["status"] == "ok"]
    assert set(ok["series"]) == {"tp8 pp1 mb1 1f1b zero1", "tp8 pp2 mb1 1f1b zero1",
                                 "tp4 pp1 mb1 1f1b zero1"}
    assert (hardware_table(loaded)["plan"] == "tp8 pp2 dp256 mb1 1f1b zero1").all()
