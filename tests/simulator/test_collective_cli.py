"""``clustersim collective``: table, plot, errors (through typer's CliRunner)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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


def test_collective_prints_rich_s_table_without_rich(tmp_path: Path) -> None:
    # Piped, the sweep's table is the plain-text path's (cli.plain), and it is character for character
    # what rich prints for the same grid at rich's width for a console that is no terminal (80).
    import io
    import subprocess
    import sys

    from rich.console import Console

    from clustersim.simulator.cli.collective import _table, parse_sizes
    from clustersim.simulator.network import collective_kind, price_collective
    from clustersim.simulator.profile import default_profile
    from clustersim.topologies.presets import get_cluster

    code = ("import sys, runpy; sys.argv = ['clustersim', 'collective', '--gpus', '16', '--kind', 'all_to_all', "
            "'--sizes', '1KiB..1MiB']; "
            "import clustersim.simulator.cli.app as a\ntry:\n    a.main()\nexcept SystemExit:\n    pass\n"
            "print('RICH' if 'rich' in sys.modules else 'NORICH')")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    table, marker = out.rsplit("\n", 2)[0] + "\n", out.rsplit("\n", 2)[1]
    assert marker == "NORICH"
    clus = get_cluster("dgx-h100", 16)
    prof = default_profile(clus.accelerator.name)
    sizes = parse_sizes("1KiB..1MiB")
    ranks = np.arange(16, dtype=np.int64).reshape(1, 16)
    costs = [price_collective(collective_kind("all_to_all"), s, ranks, clus, prof, None) for s in sizes]
    title = (f"all_to_all on dgx-h100 x16 ({clus.accelerator.name}, {clus.fabric}): 1 group(s) of 16; "
             f"profile {prof.name} (fit {prof.fit_date or 'not recorded'})")
    buf = io.StringIO()
    Console(file=buf, width=80, force_terminal=False, force_jupyter=False, legacy_windows=False).print(
        _table("all_to_all", sizes, costs, title).rich())
    assert table == buf.getvalue()
