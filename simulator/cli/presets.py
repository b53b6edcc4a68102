"""``clustersim presets``: the model, accelerator and cluster presets by name. Loaded when it runs (``cli.lazy``)."""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.table import Table

from clustersim.topologies import ACCELERATORS, CLUSTER_PRESETS
from clustersim.workloads import MODEL_PRESETS

console = Console(width=None if sys.stdout.isatty() else 140)


def register(app: typer.Typer) -> None:
    """Add ``presets`` to ``app``."""

    @app.command("presets")
    def presets_cmd() -> None:
        """List the model, accelerator and cluster presets."""
        for title, names in (("models", MODEL_PRESETS), ("accelerators", ACCELERATORS), ("clusters", CLUSTER_PRESETS)):
            table = Table(title=title)
            table.add_column("name")
            for name in sorted(names):
                table.add_row(name)
            console.print(table)
