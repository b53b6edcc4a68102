"""The CLI starts without the heavy libraries: they load inside the commands that use them."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import typer

from clustersim.simulator import cli
from clustersim.simulator.cli.lazy import COMMANDS, load_command

HEAVY = ("pandas", "matplotlib", "dask", "pyarrow", "torch")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama3_70b_h100.yaml"


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


def test_simulate_loads_no_heavy_library_and_no_other_command(tmp_path: Path) -> None:
    """``clustersim simulate`` imports neither pandas (the interval lookup reads YAML) nor the
    modules of the other commands (fitting, sweeps, search)."""
    others = [f"clustersim.simulator.cli.{module}" for module, _ in COMMANDS.values() if module != "simulate"]
    stmt = ("from typer.testing import CliRunner\nfrom clustersim.simulator.cli.app import app\n"
            f"r = CliRunner().invoke(app, ['simulate', {str(EXAMPLE)!r}])\n"
            "assert r.exit_code == 0 and 'step time' in r.output, r.output\n"
            f"print(' '.join(m for m in {others!r} if m in sys.modules))")
    assert _loaded_after(stmt) == []


def test_the_lazy_table_names_every_command_with_its_own_help() -> None:
    """Each lazily loaded command is the one its module registers, and ``--help`` shows its docstring's line."""
    for name in COMMANDS:
        command = load_command(name)
        assert command.name == name
        assert command.get_short_help_str(limit=1000) == COMMANDS[name][1], name


def test_the_lazy_table_misses_no_registered_command() -> None:
    """Every module with a ``register(app)`` in the CLI package is in the table, with all it registers."""
    package = Path(cli.__file__).parent
    registering = {p.stem for p in package.glob("*.py") if "\ndef register(app" in p.read_text()}
    assert registering == {module for module, _ in COMMANDS.values()}
    for module in registering:
        scratch = typer.Typer()
        importlib.import_module(f"clustersim.simulator.cli.{module}").register(scratch)
        added = {c.name for c in scratch.registered_commands} | {g.name for g in scratch.registered_groups}
        assert added <= set(COMMANDS), (module, added)


def test_a_lazy_command_runs_and_fails_like_an_eager_one() -> None:
    from typer.testing import CliRunner

    from clustersim.simulator.cli.app import app

    ok = CliRunner().invoke(app, ["collective", "--gpus", "8", "--sizes", "1MiB"])
    assert ok.exit_code == 0 and "1048576" in ok.output, ok.output
    bad = CliRunner().invoke(app, ["collective", "--gpus", "8", "--kind", "all_to_al"])
    assert bad.exit_code != 0


def test_a_mistyped_lazy_command_is_suggested() -> None:
    from typer.testing import CliRunner

    from clustersim.simulator.cli.app import app

    out = CliRunner().invoke(app, ["sweeep"])
    assert out.exit_code != 0 and "Did you mean 'sweep'?" in out.output, out.output


def test_collective_loads_neither_the_plan_room_nor_the_step_pricer() -> None:
    """``clustersim collective`` prices one collective on a preset: the plan room (models, plans,
    their checks) and the step's ``CommPricer`` are the simulate path's, not its (issue 18: ~0.1 s
    of its start); the network face still hands the pricer to whoever reads it."""
    rooms = ("clustersim.simulator.plan", "clustersim.workloads", "clustersim.simulator.network.pricing")
    stmt = ("from typer.testing import CliRunner\nfrom clustersim.simulator.cli.app import app\n"
            "r = CliRunner().invoke(app, ['collective', '--gpus', '16', '--kind', 'all_to_all', '--sizes', '1MiB'])\n"
            "assert r.exit_code == 0 and '1048576' in r.output, r.output\n"
            f"print(' '.join(m for m in {rooms!r} if m in sys.modules))")
    assert _loaded_after(stmt) == []
    from clustersim.simulator import network
    from clustersim.simulator.network.pricing import CommPricer

    assert network.CommPricer is CommPricer
