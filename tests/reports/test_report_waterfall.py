"""The compute-loss waterfall of one result: closed-form bars and a valid image."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest

from clustersim.reports.errors import ReportError
from clustersim.reports.waterfall import plot_waterfall, waterfall_steps, write_waterfall

RESULT = {
    "ideal_compute_s": 4.0, "t_compute": 6.0, "t_exposed_tp": 0.5, "t_exposed_cp": 0.0,
    "t_exposed_ep": 0.0, "t_exposed_pp": 0.1, "t_bubble": 1.0, "t_exposed_dp": 0.3,
    "t_optimizer": 0.1, "t_other": 0.0, "mfu": 0.5, "hfu": 0.6,
}
STEP = 8.0  # 6.0 + 0.5 + 0.1 + 1.0 + 0.3 + 0.1


def test_bars_start_at_peak_and_end_at_mfu() -> None:
    steps = waterfall_steps(RESULT)
    assert steps[0][1] == 1.0
    assert steps[-1][1] == pytest.approx(4.0 / STEP)  # MFU = ideal / step
    # peak minus every loss lands on the achieved share exactly
    assert 1.0 + sum(v for _, v, _ in steps[1:-1]) == pytest.approx(steps[-1][1], abs=1e-12)


def test_recompute_split_from_hfu() -> None:
    bars = {label: value for label, value, _ in waterfall_steps(RESULT)}
    # recompute share = ideal share x (HFU / MFU - 1) = 0.5 x 0.2
    assert bars["recompute"] == pytest.approx(-0.5 * 0.2)
    assert bars["compute inefficiency"] == pytest.approx(-(2.0 / STEP - 0.1))
    assert bars["pipeline bubble"] == pytest.approx(-1.0 / STEP)
    without = {label for label, _, _ in waterfall_steps({**RESULT, "hfu": None})}
    assert "recompute" not in without


def test_missing_breakdown_is_named() -> None:
    partial = {k: v for k, v in RESULT.items() if k != "t_bubble"}
    with pytest.raises(ReportError, match="t_bubble"):
        waterfall_steps(partial)


def test_write_waterfall_png(tmp_path: Path) -> None:
    path = write_waterfall(RESULT, tmp_path / "sub" / "waterfall.png")
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 200
    ax = plot_waterfall(RESULT)
    assert len(ax.patches) == len(waterfall_steps(RESULT))


def test_nested_breakdown_reads_like_flat_row() -> None:
    nested = {"ideal_compute_s": 4.0, "mfu": 0.5, "hfu": 0.6,
              "breakdown_s": {k[2:]: v for k, v in RESULT.items() if k.startswith("t_")}}
    assert waterfall_steps(nested) == waterfall_steps(RESULT)
