"""The ``clustersim sweep`` subcommand: a sweep file in, a resumable results folder out.

Owns: the command's options, the summary it prints and its exit codes (0 done, 2 bad input,
1 points lost to dead workers or a lost scheduler, 130 Ctrl-C, 143 SIGTERM). Does not own: grids, files or resume
(``clustersim.simulator.sweep.sweep``), nor executors (``clustersim.simulator.sweep.executors``). ``clustersim.simulator.cli.app`` calls
``register(app)``; ``python -m clustersim.simulator.cli.sweep`` runs the command on its own.
"""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clustersim.simulator.profile import load_profile
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.sweep import SchedulerLost, default_workers, expand_points, load_sweep, make_executor
from clustersim.simulator.cli.output import fail

if TYPE_CHECKING:  # annotations only; sweep.sweep (pandas, pyarrow) loads when the command runs
    from clustersim.simulator.sweep.sweep import SweepInterrupted as Interrupted, SweepReport

EXIT_LOST_POINTS = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell convention
DEFAULT_EVALUATOR = "clustersim.simulator.sweep.points:evaluate_point"
"""``clustersim.simulator.sweep.sweep.DEFAULT_EVALUATOR``, spelled here so --help needs no pandas (a test checks they agree)."""


class _NotRaised(Exception):
    """Stands for ``SweepInterrupted`` until ``clustersim.simulator.sweep.sweep`` is imported."""

    signum: int
    report: SweepReport


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command to the clustersim app."""
    app.command("sweep")(sweep_command)


def sweep_command(
    sweep_file: Annotated[Path, typer.Argument(help="Sweep YAML: base, grid, plan, seed.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Results folder (resumes if it exists).")],
    scheduler: Annotated[str | None, typer.Option(
        help="Dask scheduler address, e.g. tcp://HOST:8786; default: a local process pool.")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", "-j", help="Local worker processes; 0 = min(2, CPUs), 1 = serial here.")] = 0,
    evaluator: Annotated[str, typer.Option(
        help="Point evaluator as package.module:function.")] = DEFAULT_EVALUATOR,
    retry_errors: Annotated[bool, typer.Option(
        help="Recompute points whose stored row has status error.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
    dry_run: Annotated[bool, typer.Option(help="Only count the points and exit.")] = False,
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="Calibration profile YAML for every point (default: the base scenario's).")] = None,
) -> None:
    """Evaluate a grid of scenarios into OUT/results.parquet and OUT/results.csv."""
    SweepInterrupted: type[_NotRaised | Interrupted] = _NotRaised  # bound before the import a Ctrl-C may interrupt
    console, errors = Console(), Console(stderr=True)
    if workers < 0:
        fail(f"--workers {workers}: use 0 (automatic), 1 (serial) or more")
    try:
        from clustersim.simulator.sweep.sweep import SweepInterrupted, run_sweep  # pandas

        spec = load_sweep(sweep_file)
        if calibration is not None:
            load_profile(calibration)  # one clear error before any point runs
            spec = dataclasses.replace(spec, base={**spec.base, "calibration": str(calibration.resolve())})
        if dry_run:
            console.print(f"{len(expand_points(spec))} points in {sweep_file}")
            return
        executor = make_executor(scheduler=scheduler, workers=workers or default_workers())
        report = run_sweep(spec, out, evaluator=evaluator, executor=executor,
                           progress=progress, retry_errors=retry_errors)
    except SchedulerLost as exc:
        fail(exc, EXIT_LOST_POINTS)
    except ClusterSimError as exc:
        fail(exc)
    except SweepInterrupted as stop:
        name = signal.Signals(stop.signum).name
        errors.print(f"[yellow]interrupted ({name}):[/yellow] {len(stop.report.frame)} of "
                     f"{stop.report.total} points saved in {escape(str(out))}; rerun the same command to "
                     f"finish the rest", highlight=False, soft_wrap=True)
        raise typer.Exit(128 + stop.signum) from None
    except KeyboardInterrupt:  # before any point ran: nothing to save
        errors.print("[yellow]interrupted[/yellow] before any point finished")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    console.print(summary_table(report))
    console.print(f"wrote {escape(str(out))}/results.parquet and results.csv")
    if report.lost:
        shown = ", ".join(report.lost[:10]) + (f" and {len(report.lost) - 10} more" if len(report.lost) > 10 else "")
        errors.print(f"[red]lost {len(report.lost)} point(s):[/red] {shown}; rerun the same command to retry "
                     "them (finished points are kept)", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_LOST_POINTS)


def summary_table(report: SweepReport) -> Table:
    """A small table: how many points, done before, computed now, errors, lost, files."""
    table = Table(title=escape(f"sweep -> {report.out_dir}"), show_header=False)
    for label, value in (("points", report.total), ("already done", report.skipped),
                         ("computed now", report.computed), ("error rows", report.errors),
                         ("lost (rerun)", len(report.lost)),
                         ("wall time", f"{report.elapsed_s:.1f} s"),
                         ("tables", "results.parquet, results.csv")):
        table.add_row(label, str(value))
    return table


def _group() -> None:
    """clustersim sweep, standalone."""


def main() -> None:
    """Run the sweep command alone (``python -m clustersim.simulator.cli.sweep``)."""
    app = typer.Typer(add_completion=False)
    app.callback()(_group)  # keep the `sweep` subcommand name, as under `clustersim`
    register(app)
    app()


if __name__ == "__main__":
    main()
