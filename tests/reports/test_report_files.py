"""write_scaling_report: every file exists, is valid, self-contained, atomic and deterministic."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Callable

import matplotlib.image
import pandas as pd
import pytest
from typer import Typer
from typer.testing import CliRunner

from clustersim.simulator.cli.report import register
from clustersim.reports.report import write_scaling_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = ("throughput_per_gpu", "scaling_efficiency", "lost_time", "lost_time_naive_dp", "mfu",
           "hardware", "waterfall_0", "waterfall_1")  # a waterfall per cluster
CSVS = ("results", "scaling", "lost_time", "plan_table", "hardware", "errors", "compute", "pareto")
TABLE_IDS = ("scaling-table", "plan-table", "compute-table", "pareto-table", "hardware-table", "errors-table")


@pytest.fixture(scope="module")
def two_cluster_report(tmp_path_factory: pytest.TempPathFactory,
                       results_factory: Callable[..., pd.DataFrame]) -> Path:
    """One report over two clusters (so the hardware figure exists), written once."""
    out = tmp_path_factory.mktemp("report") / "nested" / "out"  # parent does not exist yet
    return write_scaling_report(results_factory(clusters=("h100", "a100")), out,
                                title="Two clusters <test>",
                                cost_per_gpu_hour={"h100": 2.5, "a100": 1.2})


def test_every_png_is_a_decodable_image(two_cluster_report: Path) -> None:
    for name in FIGURES:
        data = (two_cluster_report.parent / f"{name}.png").read_bytes()
        assert data.startswith(PNG_SIGNATURE), name
        image = matplotlib.image.imread(io.BytesIO(data), format="png")
        assert image.shape[0] > 200 and image.shape[1] > 300, name


def test_csvs_round_trip(two_cluster_report: Path) -> None:
    out = two_cluster_report.parent
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 2 * 4 * 3 + 1  # 2 clusters x 4 scales x 3 series + 1 failed point
    for name in CSVS:
        assert (out / f"{name}.csv").stat().st_size > 0, name
    plans = pd.read_csv(out / "plan_table.csv")
    assert len(plans) == 2 * 4 * 3  # every ok plan, none of the failed ones
    assert pd.read_csv(out / "errors.csv")["point_id"].tolist() == ["oom-1"]
    hardware = pd.read_csv(out / "hardware.csv").set_index("cluster")
    assert hardware.loc["h100", "cost_per_gpu_hour"] == 2.5


def test_html_is_self_contained_with_every_figure_and_table(two_cluster_report: Path) -> None:
    page = two_cluster_report.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert len(re.findall(r'src="data:image/png;base64,', page)) == len(FIGURES)
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from anywhere
    assert "http://" not in page and "https://" not in page
    for table_id in TABLE_IDS:
        assert f'id="{table_id}"' in page
    assert "Two clusters &lt;test&gt;" in page  # the title is escaped
    assert "OutOfMemoryError" in page


def test_no_temporary_files_left(two_cluster_report: Path) -> None:
    names = [p.name for p in two_cluster_report.parent.iterdir()]
    assert not [n for n in names if n.endswith(".tmp") or n.startswith(".")]


def test_same_input_same_bytes(tmp_path: Path,
                               results_factory: Callable[..., pd.DataFrame]) -> None:
    frame = results_factory(counts=(8, 64))
    first = write_scaling_report(frame, tmp_path / "a", title="t").read_bytes()
    second = write_scaling_report(frame, tmp_path / "b", title="t").read_bytes()
    assert first == second
    assert not (tmp_path / "a" / "hardware.png").exists()  # one cluster: no hardware figure


def test_cli_register_writes_report(tmp_path: Path,
                                   results_factory: Callable[..., pd.DataFrame]) -> None:
    results_factory(counts=(8, 64)).to_csv(tmp_path / "results.csv", index=False)
    app = Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:
        """A second command so that typer keeps `report` as a named subcommand."""

    outcome = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r"),
                                       "--cost-per-gpu-hour", "2"])
    assert outcome.exit_code == 0, outcome.output
    assert (tmp_path / "r" / "report.html").is_file()
    assert (pd.read_csv(tmp_path / "r" / "hardware.csv")["cost_per_gpu_hour"] == 2.0).all()


def test_cli_prices_each_cluster_on_its_own(tmp_path: Path, results_factory: Callable[..., pd.DataFrame]) -> None:
    """--cost-per-gpu-hour NAME=PRICE per cluster; a malformed price is one line naming the fix, exit 2."""
    results_factory(clusters=("h100", "a100"), counts=(8, 64)).to_csv(tmp_path / "results.csv", index=False)
    app = Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:
        """A second command so that typer keeps `report` as a named subcommand."""

    outcome = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r"),
                                       "--cost-per-gpu-hour", "h100=2.5", "--cost-per-gpu-hour", "a100=1.2"])
    assert outcome.exit_code == 0, outcome.output
    hardware = pd.read_csv(tmp_path / "r" / "hardware.csv").set_index("cluster")
    assert hardware["cost_per_gpu_hour"].to_dict() == {"a100": 1.2, "h100": 2.5}
    assert (hardware["kwh_per_million_tokens"] > 0).all()
    bad = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r2"), "--cost-per-gpu-hour", "h100=cheap"])
    assert bad.exit_code != 0 and "NAME=PRICE" not in str(bad.exception) and "price must be a number" in str(bad.exception)
    assert not (tmp_path / "r2").exists()


def test_report_of_only_failures_still_renders(
        tmp_path: Path, results_factory: Callable[..., pd.DataFrame]) -> None:
    frame = results_factory(counts=(8, 64)).assign(status="error")
    page = write_scaling_report(frame, tmp_path, title="all failed").read_text()
    assert "No point simulated successfully" in page
    assert 'id="errors-table"' in page and "data:image/png" not in page
    assert len(pd.read_csv(tmp_path / "errors.csv")) == len(frame)
