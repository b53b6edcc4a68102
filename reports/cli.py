"""CLI glue for `clustersim report RESULTS --out DIR`: a plain function and a typer registrar.

``report_command`` is what the command does (the lead's ``simulator/cli.py`` may call it
directly); ``register(app)`` adds the ``report`` subcommand to a typer app, per
docs/ARCHITECTURE.md ("other modules contribute subcommands via register(app)"). Errors stay
``ReportError`` (a ``ValueError``); turning them into one red line and exit code 2 is the CLI's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from reports.report import write_scaling_report


def report_command(results: str | Path, out_dir: str | Path, *, title: str | None = None,
                   cost_per_gpu_hour: float | None = None) -> Path:
    """Write the scaling report of ``results`` (file or sweep directory) into ``out_dir``."""
    name = Path(results).stem if Path(results).is_file() else Path(results).name
    return write_scaling_report(results, out_dir, title=title or f"Scaling report: {name}",
                                cost_per_gpu_hour=cost_per_gpu_hour)


def register(app: typer.Typer) -> None:
    """Add the ``report`` subcommand to ``app``."""

    @app.command("report")
    def report(
        results: Annotated[Path, typer.Argument(help="results.parquet/.csv or a sweep directory")],
        out: Annotated[Path, typer.Option("--out", help="output directory (created)")] = Path(
            "report"),
        title: Annotated[Optional[str], typer.Option(help="page title")] = None,
        cost_per_gpu_hour: Annotated[Optional[float], typer.Option(
            "--cost-per-gpu-hour", help="$ per GPU-hour for cost per million tokens")] = None,
    ) -> None:
        """Scaling-efficiency report: PNG plots, CSV tables and one self-contained HTML page."""
        page = report_command(results, out, title=title, cost_per_gpu_hour=cost_per_gpu_hour)
        typer.echo(f"wrote {page}")
