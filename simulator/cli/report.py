"""`clustersim report RESULTS --out DIR`: the typer command over ``reports.report_command``.

``register(app)`` adds the ``report`` subcommand. Errors stay ``ReportError`` (a ``ValueError``);
turning them into one red line and exit code 2 is ``app.main``'s.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from clustersim import files
from clustersim.simulator.cli.options import output_dir


def parse_prices(given: list[str] | None) -> float | dict[str, float] | None:
    """``--cost-per-gpu-hour``: None, one price for all clusters, or {cluster or accelerator: price}."""
    if not given:
        return None
    if len(given) == 1 and "=" not in given[0]:
        return _price(given[0], given[0])
    prices: dict[str, float] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--cost-per-gpu-hour {item!r}: give one price (2.5) or NAME=PRICE per cluster, "
                             "e.g. --cost-per-gpu-hour dgx-h100=2.5 --cost-per-gpu-hour dgx-b200=4")
        prices[name.strip()] = _price(value, item)
    return prices


def _price(text: str, item: str) -> float:
    """A price >= 0 in $ per GPU-hour."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"--cost-per-gpu-hour {item!r}: the price must be a number >= 0 ($ per GPU-hour)")
    return value


def register(app: typer.Typer) -> None:
    """Add the ``report`` subcommand to ``app``."""

    @app.command("report")
    def report(
        results: Annotated[Path, typer.Argument(help="results.parquet/.csv or a sweep directory")],
        out: Annotated[Path, typer.Option("--out", help="output directory (created)")] = Path(
            "report"),
        title: Annotated[Optional[str], typer.Option(help="page title")] = None,
        cost_per_gpu_hour: Annotated[Optional[list[str]], typer.Option(
            "--cost-per-gpu-hour", help="$ per GPU-hour for cost per million tokens: one price for every "
            "cluster (2.5), or NAME=PRICE per cluster or accelerator name, repeated")] = None,
    ) -> None:
        """Scaling-efficiency report: PNG plots, CSV tables and one self-contained HTML page."""
        from clustersim.reports.report import report_command  # heavy (pandas/matplotlib): imported when the command runs

        prices = parse_prices(cost_per_gpu_hour)
        output_dir("--out", out)
        if out.resolve() == results.resolve() or out.resolve() in results.resolve().parents:
            raise ValueError(f"--out {out} holds the results {results}; write the report to another folder")
        page = files.replace_dir(out, lambda folder: report_command(  # the old report goes only as a whole
            results, folder, title=title, cost_per_gpu_hour=prices))
        typer.echo(f"wrote {page}")
