"""The CLI starts without the heavy libraries: they load inside the commands that use them."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pandas", "matplotlib", "dask", "pyarrow", "torch")


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert _loaded_after("import clustersim.simulator.cli.app") == []


def test_help_loads_no_heavy_library() -> None:
    stmt = ("from typer.testing import CliRunner\nfrom clustersim.simulator.cli.app import app\n"
            "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0 and 'simulate' in r.output, r.output")
    assert _loaded_after(stmt) == []


def test_sweep_default_evaluator_matches_the_sweep_module() -> None:
    from clustersim.simulator.cli import sweep as sweep_cli
    from clustersim.simulator.sweep import sweep

    assert sweep_cli.DEFAULT_EVALUATOR == sweep.DEFAULT_EVALUATOR
