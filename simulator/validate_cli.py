"""The ``clustersim validate`` subcommand: re-predict published runs and print the error.

Owns the command's options, the tables it prints (counts, MAPE, median and worst absolute error,
by source and by GPU type, skip reasons) and its exit codes (0 done, 2 bad input). Does not own
the row mapping, the inference rules or the statistics (``simulator.validate``).
``simulator.cli`` calls ``register(app)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from simulator.calibration import load_profile
from simulator.errors import ClusterSimError
from simulator.validate import error_stats, load_runs, megatron_lm_rows, summarise, validate_runs

EXIT_BAD_INPUT = 2


def register(app: typer.Typer) -> None:
    """Add the ``validate`` command to the clustersim app."""
    app.command("validate")(validate_command)


def stats_table(title: str, key: str, frame: pd.DataFrame) -> Table:
    """One row per group: rows, MAPE, median, worst absolute and mean signed error (percent)."""
    table = Table(title=title)
    for col in (key, "rows", "MAPE %", "median |err| %", "worst |err| %", "bias %"):
        table.add_column(col, justify="left" if col == key else "right")
    for rec in frame.to_dict("records"):
        table.add_row(str(rec[key]), str(rec["rows"]), *(f"{rec[k]:.1f}" for k in ("mape", "median_abs", "worst_abs", "bias")))
    return table


def _overall_line(name: str, stats: dict[str, Any]) -> str:
    return (f"{name}: {stats['rows']} rows, MAPE {stats['mape']:.2f} %, median |err| {stats['median_abs']:.1f} %, "
            f"worst |err| {stats['worst_abs']:.1f} %, bias {stats['bias']:+.1f} %")


def print_summary(console: Console, results: pd.DataFrame) -> None:
    """The summary the issue asks for: counts, overall error, by source, by GPU type, skips."""
    s = summarise(results)
    console.print(f"simulated {s['simulated']} rows, skipped {s['skipped']}")
    if s["simulated"]:
        console.print(_overall_line("all simulated rows", s["overall"]))
        meg = megatron_lm_rows(results[results.status == "ok"])
        if len(meg):
            console.print(_overall_line("Megatron-LM rows", error_stats(meg.error_pct)))
        console.print(stats_table("error by source", "source_id", s["by_source"]))
        console.print(stats_table("error by GPU type", "gpu_type", s["by_gpu"]))
    if s["skipped"]:
        table = Table(title="skipped rows by reason")
        table.add_column("reason")
        table.add_column("rows", justify="right")
        for reason, count in s["skip_reasons"].items():
            table.add_row(escape(str(reason)), str(count))
        console.print(table)


def validate_command(
    runs: Annotated[Path | None, typer.Argument(
        help="CSV with the columns of published_runs.csv; default: the bundled data set.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write one row per input row here (CSV).")] = None,
    calibration: Annotated[Path | None, typer.Option(
        help="Calibration profile YAML for every row; default: the bundled profile of each GPU type.")] = None,
    fidelity: Annotated[str, typer.Option(help="Collective model: analytic (fast) or flow.")] = "analytic",
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
) -> None:
    """Re-predict published training runs and report the step-time error."""
    console, errors = Console(), Console(stderr=True)
    try:
        if fidelity not in ("analytic", "flow"):
            raise ClusterSimError(f"--fidelity {fidelity!r}: use analytic or flow")
        table = load_runs(runs)
        profile = load_profile(calibration) if calibration is not None else None
        with Progress(console=errors, disable=not progress, transient=True) as bar:
            task = bar.add_task("validating", total=len(table))
            results = validate_runs(table, profile=profile, fidelity=fidelity,  # type: ignore[arg-type]
                                    progress=lambda done, _total: bar.update(task, completed=done))
    except ClusterSimError as exc:
        errors.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        results.to_csv(out, index=False)
    print_summary(console, results)
