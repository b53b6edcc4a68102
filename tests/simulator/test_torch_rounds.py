"""The check script's acceptance table (``torch_backend.rounds``) on hand-written check summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustersim.simulator.calibration.torch_backend.rounds import BOUNDS, load_rounds, main, met, overall, table

GOOD = {"median_abs_error": 0.05, "max_abs_error": 0.15, "rank_correlation": 0.9, "fastest_gap": 0.0,
        "misordered_pairs": 1.0, "mean_error": 0.0, "plans": 7.0}


def _write(out: Path, run: int, model: str, **changes: float) -> None:
    (out / f"run{run}").mkdir(parents=True, exist_ok=True)
    (out / f"run{run}" / f"{model}-check.json").write_text(json.dumps({"summary": {**GOOD, **changes}}))


def test_each_bound_alone_fails_a_round() -> None:
    assert met(GOOD)
    for key, bound in BOUNDS.items():
        worse = bound - 0.01 if key == "rank_correlation" else bound + 0.01
        assert not met({**GOOD, key: worse}), key
        assert met({**GOOD, key: bound}), key  # the bound itself is within
    assert not met({**GOOD, "rank_correlation": float("nan")})


def test_overall_is_the_worst_round_and_needs_every_round(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for run in (1, 2, 3):
        _write(tmp_path, run, "small", max_abs_error=0.1 + 0.02 * run)
        _write(tmp_path, run, "holdout", rank_correlation=0.95 - 0.04 * run)
    rows = load_rounds(tmp_path, 3)
    assert [(r["round"], r["model"]) for r in rows][:2] == [(1, "small"), (1, "holdout")]
    small, holdout = overall(rows)
    assert small["max_abs_error"] == pytest.approx(0.16) and small["met_every_round"]
    assert holdout["rank_correlation"] == pytest.approx(0.83) and holdout["met_every_round"]
    assert main([str(tmp_path), "3"]) == 0
    printed = capsys.readouterr().out
    assert "every round of every model met the bounds" in printed and printed.count("\n    all ") == 2
    _write(tmp_path, 2, "holdout", median_abs_error=0.11)  # one model-round misses: the whole run misses
    assert main([str(tmp_path), "3"]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [t["met_every_round"] for t in summary["overall"]] == [True, False]
    assert "NOT met" in table(load_rounds(tmp_path, 3), summary["overall"])
    # the plans outside the profile's own interval: printed per round, the worst round overall, never a bound
    _write(tmp_path, 3, "small", outside_interval=4.0, with_interval=7.0)
    rows = load_rounds(tmp_path, 3)
    assert overall(rows)[0]["outside_interval"] == 4.0 and rows[4]["met"]
    lines = table(rows, overall(rows)).splitlines()
    assert [ln.split()[-2] for ln in (lines[1], lines[5])] == ["0", "4"]  # round 1 small, round 3 small


def test_a_missing_round_or_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, 1, "small")
    assert main([str(tmp_path), "1"]) == 2
    assert "holdout-check.json missing" in capsys.readouterr().err
    assert main([str(tmp_path), "zero"]) == 2
    assert main([str(tmp_path)]) == 2
    assert not (tmp_path / "summary.json").exists()
