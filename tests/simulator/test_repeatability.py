"""The repeatability floor: what rows measured more than once leave to any model of their inputs."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from clustersim.simulator.calibration.fit_crossval_rows import family_table
from clustersim.simulator.calibration.fit_first_order import row_weights
from clustersim.simulator.calibration.repeatability import best_constant_errors, repeatability_floor, scenario_key
from clustersim.simulator.calibration.validate import load_runs, validate_row, validate_runs
from clustersim.simulator.cli.app import app


def test_two_measurements_closed_form() -> None:
    # p = 1: errors 0 and 50 %; p = 2: 100 and 0 %; anything between is worse than p = 1 in sum
    assert best_constant_errors([1.0, 2.0]).tolist() == pytest.approx([0.0, 50.0])
    assert best_constant_errors([3.0, 3.0, 3.0]).tolist() == [0.0, 0.0, 0.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.1, max_value=100.0, allow_nan=False), min_size=1, max_size=6))
def test_floor_is_the_least_sum_over_every_prediction(measured: list[float]) -> None:
    m = np.asarray(measured)
    best = best_constant_errors(m).sum()
    grid = np.linspace(m.min() * 0.5, m.max() * 1.5, 4001)
    on_grid = (np.abs(grid[:, None] - m[None, :]) / m[None, :] * 100.0).sum(axis=1).min()
    assert best <= on_grid + 1e-9  # no prediction on the grid does better
    assert best == pytest.approx(min((np.abs(p - m) / m * 100.0).sum() for p in m))  # reached at a measurement


def test_bad_measurements_name_the_values() -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        best_constant_errors([1.0, 0.0])


def _frame(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"status": "ok", "scenario": s, "measured_step_time_s": m, "error_pct": e} for s, m, e in rows]
                        + [{"status": "skipped", "scenario": None, "measured_step_time_s": 1.0, "error_pct": None}])


def test_floor_of_a_table() -> None:
    fl = repeatability_floor(_frame([("a", 10.0, 5.0), ("a", 20.0, -30.0), ("b", 7.0, 2.0)]))
    assert (fl.rows, fl.repeated_rows, fl.scenarios) == (3, 2, 1)
    assert fl.floor_mape == pytest.approx(50.0 / 3)  # (0 + 50 + 0) / 3: the single row can be exact
    assert fl.floor_mape_repeated == pytest.approx(25.0)
    assert fl.model_mape_repeated == pytest.approx(17.5)
    assert fl.scenarios_beyond_40 == 0  # 0.6 x 20 = 12 <= 1.4 x 10 = 14: p in [12, 14] keeps both within 40 %


def test_beyond_40_boundary() -> None:
    # feasible iff 0.6 max <= 1.4 min: 10 and 23 (13.8 <= 14) can both be within 40 %, 10 and 24 (14.4) cannot
    assert repeatability_floor(_frame([("a", 10.0, 0.0), ("a", 23.0, 0.0)])).scenarios_beyond_40 == 0
    assert repeatability_floor(_frame([("a", 10.0, 0.0), ("a", 24.0, 0.0)])).scenarios_beyond_40 == 1
    assert np.isnan(repeatability_floor(_frame([("a", 10.0, 1.0)])).floor_mape_repeated)


def test_scenario_key_is_deterministic_and_separates_inputs() -> None:
    assert scenario_key(1, "x", (2.0,)) == scenario_key(1, "x", (2.0,))
    assert scenario_key(1, "x") != scenario_key("x", 1)
    keys = [scenario_key(i) for i in range(200)]
    assert all(len(k) == 13 and k.startswith("s") for k in keys)
    back = pd.read_csv(io.StringIO("scenario\n" + "\n".join(keys))).scenario  # no dtype given
    assert back.tolist() == keys  # a CSV never reads a key back as a number


def test_published_rows_share_a_scenario_exactly_when_the_simulator_sees_the_same_inputs() -> None:
    runs = load_runs().set_index("row_id", drop=False)
    key = {r: validate_row({str(k): v for k, v in runs.loc[r].to_dict().items()})["scenario"] for r in (481, 518, 480, 561, 544)}
    assert key[481] == key[518]  # Qwen3-30B on 16 H100, the same plan in 26.02.01 and 26.02 (28.9 s and 51.3 s)
    assert key[480] != key[544]  # the same model and part at micro-batch 4 against 1
    assert key[561] != key[544]  # the token-drop run pads to capacity: another scenario


def test_validate_prints_the_floor(tmp_path: Path) -> None:
    runs = load_runs()
    small = tmp_path / "two.csv"
    runs[runs.row_id.isin([481, 518, 480])].to_csv(small, index=False)
    res = CliRunner().invoke(app, ["validate", str(small), "--no-progress"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # the console wraps long lines
    # 28.941 and 51.27 s: the best single prediction is 28.941 s (0 and 43.6 %; 51.27 s would be 77.2 % off)
    floor = 100.0 * (51.27 - 28.941) / 51.27 / 3  # over the three rows (480 is alone: 0)
    assert "2 rows in 1 scenarios measured more than once" in text
    assert f"below {floor:.2f} % MAPE over all rows" in text


def test_cross_validation_family_table_carries_the_floor() -> None:
    frame = pd.DataFrame({"family": ["a", "a", "a", "b"], "scenario": ["s", "s", "t", "s"],
                          "measured_s": [10.0, 20.0, 5.0, 40.0], "error_in_pct": [1.0, -1.0, 2.0, 0.0],
                          "error_out_pct": [5.0, -45.0, 2.0, 10.0]})
    table = family_table(frame).set_index("family")
    assert table.loc["a", "floor_mape"] == pytest.approx(50.0 / 3)  # s: 10 and 20 -> 0 and 50 %; t alone
    assert table.loc["b", "floor_mape"] == 0.0  # one row of s in family b: nothing to disagree with
    assert table.loc["all", "floor_mape"] == pytest.approx((0.0 + 50.0 + 0.0 + 75.0) / 4)  # s: 10, 20, 40 -> p = 10


def test_one_scenario_one_prediction_and_the_model_above_the_floor() -> None:
    runs = load_runs()
    some = runs[runs.model.astype(str).str.contains("Qwen3_30B|LLAMA3_70B", regex=True)]
    out = validate_runs(some)
    ok = out[out.status == "ok"]
    assert ok.groupby("scenario").predicted_step_time_s.nunique().max() == 1  # the key holds everything simulated
    fl = repeatability_floor(out)
    assert fl.scenarios >= 5
    assert fl.floor_mape_repeated <= fl.model_mape_repeated + 1e-9  # a constant per scenario cannot beat the floor


def _sens(rows: list[tuple[str, str | None]]) -> pd.DataFrame:
    return pd.DataFrame([{"row_id": i, "source_id": src, "status": "ok", "scenario": sc} for i, (src, sc) in enumerate(rows)])


def test_fit_weights_one_unit_per_scenario_and_per_family() -> None:
    # family A (megatron-bridge): scenario x published three times, y once; family B (mosaicml): two rows
    sens = _sens([("megatron-bridge-25.09", "x"), ("megatron-bridge-25.11", "x"), ("megatron-bridge-26.02", "x"),
                  ("megatron-bridge-26.02", "y"), ("mosaicml-llmfoundry", "p"), ("mosaicml-llmfoundry", "q")])
    w = row_weights(sens)
    assert w.mean() == pytest.approx(1.0)
    assert w[:4].sum() == pytest.approx(w[4:].sum())  # each family the same total
    assert w[0] == pytest.approx(w[1]) == pytest.approx(w[2]) == pytest.approx(w[3] / 3)  # x's three rows share one unit
    assert w[4] == pytest.approx(w[5])


def test_fit_weights_without_scenarios_are_the_family_weights_of_before() -> None:
    sens = _sens([("megatron-bridge-25.09", "x"), ("megatron-bridge-25.11", "x"), ("mosaicml-llmfoundry", "p")])
    old = row_weights(sens.drop(columns="scenario"))
    assert old.tolist() == pytest.approx([0.75, 0.75, 1.5])  # 3 rows / 2 families / rows in the family
    missing = row_weights(sens.assign(scenario=[None, None, "p"]))  # a missing key is its own scenario
    assert missing.tolist() == pytest.approx(old.tolist())
