"""Commands loaded when they run: the top-level click group that imports a command's module on first use.

Owns ``COMMANDS`` (command name -> the module whose ``register(app)`` adds it, and its one-line
help for ``clustersim --help``) and ``LazyGroup``, the group class of the ``clustersim`` Typer app:
``clustersim simulate`` imports none of the other commands' modules (fitting, sweeps, search,
goodput, torch checks), and ``clustersim --help`` lists every command from the table without
importing any. ``tests/test_cli_startup.py`` checks that the table's names and help lines are the
ones the modules register. It does not define any command.
"""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING, Any, Mapping

import typer
import typer.core
import typer.main

from clustersim.collector import paused

if TYPE_CHECKING:  # typer vendors click; its classes are only named in the signatures it overrides
    from typer import _click as click

COMMANDS: Mapping[str, tuple[str, str]] = {
    "simulate": ("simulate", "Simulate one training step of a scenario."),
    "scale": ("scale", "Scaling-efficiency report (strong scaling: fixed global batch): the best plan at every scale "
                       "vs naive DP replicas."),
    "colocate": ("colocate", "Jobs side by side on one cluster: each one's step alone and with the others' traffic."),
    "presets": ("presets", "List the model, accelerator and cluster presets."),
    "sweep": ("sweep", "Evaluate a grid of scenarios into OUT/results.parquet and OUT/results.csv."),
    "search": ("search", "The engine's best plan, proven: every valid plan bounded, the engine prices best bound "
                         "first until none can win."),
    "collective": ("collective", "Sweep one collective over message sizes on a cluster preset (nccl-tests style)."),
    "goodput": ("goodput", "Goodput distribution, best checkpoint interval and lost hours over a long run."),
    "stragglers": ("stragglers", "Step-time distribution (p50, p99, max) and per-rank wait with stragglers."),
    "validate": ("validate", "Re-predict published training runs and report the step-time error."),
    "report": ("report", "Scaling-efficiency report: PNG plots, CSV tables and one self-contained HTML page."),
    "schema": ("schema", "Print the JSON Schema of a scenario file (model, training, cluster, plan, ...)."),
    "import-run": ("import_run", "Turn a job's configuration and log into a scenario and its measured steady-state "
                                 "step time."),
    "watch": ("watch", "Compare every logged step with the prediction: on plan, slower by X%, drift, spikes, tail; "
                       "the cause."),
    "calibrate": ("calibrate", "Measure this machine with PyTorch, fit a profile, check it."),
}
"""Command -> (module under ``clustersim.simulator.cli``, its help line), in ``--help`` order."""

PACKAGE = "clustersim.simulator.cli"


def load_command(name: str) -> click.Command:
    """The click command ``name``, built from its module's ``register`` on a scratch Typer app (its
    modules imported with the cyclic garbage collector paused: ``clustersim.collector``)."""
    with paused():
        module = importlib.import_module(f"{PACKAGE}.{COMMANDS[name][0]}")
    scratch = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    module.register(scratch)
    command = typer.main.get_group(scratch).commands.get(name)
    if command is None:
        raise LookupError(f"{PACKAGE}.{COMMANDS[name][0]}.register adds no command {name!r}; fix lazy.COMMANDS")
    return command


class LazyGroup(typer.core.TyperGroup):
    """A TyperGroup whose ``COMMANDS`` are imported on first use; while it formats its own help it
    lists them from the table (placeholders carrying the help line) without importing them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
        self.commands[cmd_name] = load_command(cmd_name)
        return self.commands[cmd_name]

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in self.list_commands(ctx):
            close = difflib.get_close_matches(name, self.list_commands(ctx))  # as click does, over the lazy names too
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {', '.join(repr(c) for c in close)}?")
        return super().resolve_command(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
