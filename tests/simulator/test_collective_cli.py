"""``clustersim collective``: table, plot, errors (through typer's CliRunner)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from clustersim.simulator.cli.collective import make_groups, parse_sizes, register


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps "collective" a named subcommand
    return app


def test_sizes_parse_ranges_and_lists() -> None:
    assert parse_sizes("1KiB..16KiB") == [1024, 2048, 4096, 8192, 16384]
    assert parse_sizes("1MB,2MiB") == [10**6, 2**21]


def test_dp_groups_take_one_gpu_per_node() -> None:
    groups = make_groups(32, 8, None, "dp")
    assert len(groups) == 8 and groups[1] == [1, 9, 17, 25]


def test_collective_table_and_plot(app: typer.Typer, tmp_path: Path) -> None:
    out = tmp_path / "busbw.png"
    res = CliRunner().invoke(app, ["collective", "--cluster", "dgx-h100", "--gpus", "16", "--kind", "all_reduce",
                                   "--axis", "dp", "--sizes", "1MiB..1GiB", "--plot", str(out)])
    assert res.exit_code == 0, res.output
    assert "busbw" in res.output and "1073741824" in res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*"))  # the temporary file was renamed


def test_bad_input_is_one_line_and_exit_2(app: typer.Typer) -> None:
    res = CliRunner().invoke(app, ["collective", "--gpus", "8", "--sizes", "lots"])
    assert res.exit_code == 2
    assert "--sizes" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["collective", "--gpus", "8", "--kind", "all_to_all", "--algorithm", "ring"])
    assert res.exit_code == 2 and "does not implement" in res.output
