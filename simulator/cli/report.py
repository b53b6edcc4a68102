"""`clustersim report RESULTS --out DIR`: the typer command over ``reports.report_command``.

``register(app)`` adds the ``report`` subcommand. Errors stay ``ReportError`` (a ``ValueError``);
turning them into one red line and exit code 2 is ``app.main``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from clustersim import files
from clustersim.simulator.cli.options import output_dir


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
        from clustersim.reports.report import report_command  # heavy (pandas/matplotlib): imported when the command runs

        output_dir("--out", out)
        if out.resolve() == results.resolve() or out.resolve() in results.resolve().parents:
            raise ValueError(f"--out {out} holds the results {results}; write the report to another folder")
        page = files.replace_dir(out, lambda folder: report_command(  # the old report goes only as a whole
            results, folder, title=title, cost_per_gpu_hour=cost_per_gpu_hour))
        typer.echo(f"wrote {page}")
