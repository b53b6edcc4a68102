"""Sweeps: a grid over scenario fields, evaluated point by point into one DataFrame, resumable.

A sweep file (YAML: a base scenario, a grid of dotted keys, ``plan: fixed|best``, ``seed``) is
expanded into points with stable ids by ``clustersim.simulator.sweep.sweep_spec``, which documents its format.

Results: each finished point is written at once to ``OUT/parts/<point_id>.json`` (temp file, then
rename: a part is whole or absent); ``OUT/results.parquet`` and ``OUT/results.csv`` are rebuilt
from the parts at the end, every ``consolidate_every_s`` and on Ctrl-C. Rerunning skips points that
have a part. The tables hold each point of this sweep exactly once, in grid order.

Owns: the driver loop with its progress bar, signals and report (``run_sweep``, ``sweep``,
``consolidate``). The sweep file, grid expansion and point ids are
``clustersim.simulator.sweep.sweep_spec``; the parts store and the result tables are
``clustersim.simulator.sweep.sweep_store``. Does not own: evaluating a point (the evaluator, ``clustersim.simulator.sweep.points.evaluate_point`` by
default) nor where it runs (``clustersim.simulator.sweep.executors``); the CLI lives in ``clustersim.simulator.cli.sweep``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.progress import TimeRemainingColumn

from clustersim.simulator.sweep.executors import Executor, Outcomes, SchedulerLost, Task, make_executor
from clustersim.simulator.sweep.executors import default_workers
from clustersim.simulator.sweep.sweep_spec import SweepSpec, _grid_keys, expand_points, load_sweep
from clustersim.simulator.sweep.sweep_store import _prepare, read_parts, results_frame, write_part, write_tables

DEFAULT_EVALUATOR = "clustersim.simulator.sweep.points:evaluate_point"
"""Dotted spec of the function that turns a point mapping into a result row."""


@dataclass(frozen=True, kw_only=True)
class SweepReport:
    """What a sweep run did."""

    frame: pd.DataFrame = field(repr=False)
    """One row per point of the sweep found on disk, in grid order."""
    out_dir: Path
    """Folder holding parts/, results.parquet and results.csv."""
    total: int
    """Points in the grid."""
    skipped: int
    """Points already done by an earlier run (resumed)."""
    computed: int
    """Points evaluated by this run."""
    errors: int
    """Rows with status "error" in ``frame`` (invalid plan, out of memory, ...)."""
    lost: tuple[str, ...]
    """Point ids whose worker died for good; a rerun retries them."""
    elapsed_s: float
    """Wall time of this run, seconds."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a sweep, raised after the finished points were consolidated
    on disk; ``signum`` is the signal that stopped it (SIGINT when raised by the code)."""

    def __init__(self, report: SweepReport, signum: int = signal.SIGINT) -> None:
        super().__init__(f"sweep interrupted: {len(report.frame)} of {report.total} points on disk")
        self.report = report
        self.signum = signum


class _Stop:
    """What stopped the driver: the first SIGINT/SIGTERM (later ones are ignored while saving)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            return  # already stopping: let the workers die and the tables be written
        self.signum = signum
        raise KeyboardInterrupt


@contextlib.contextmanager
def _stop_signals() -> Iterator[_Stop]:
    """SIGINT and SIGTERM stop the driver once (a KeyboardInterrupt, so the executors kill their
    workers and the tables are written); repeated signals are ignored until that is done.
    Outside the main thread signals cannot be handled and the process defaults apply."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            # once stopping, a late repeat (Ctrl-C pressed three times) must not interrupt the
            # report on its way out: it stays ignored; the caller is about to end the sweep
            signal.signal(signum, signal.SIG_IGN if stop.signum is not None else handler)


def consolidate(spec: SweepSpec, out_dir: Path) -> pd.DataFrame:
    """Rebuild the result tables of a sweep from the parts on disk (e.g. after a crash)."""
    frame = results_frame(read_parts(out_dir), expand_points(spec), _grid_keys(spec))
    write_tables(out_dir, frame)
    return frame


# ---------------------------------------------------------------- the driver

def _progress(enabled: bool) -> Progress:
    """A progress bar on stderr: done/total, errors, elapsed, remaining."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(),
               TimeRemainingColumn())
    return Progress(*columns, console=Console(stderr=True), disable=not enabled)


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, evaluator: str = DEFAULT_EVALUATOR,
              executor: Executor | None = None, progress: bool = True,
              retry_errors: bool = False, consolidate_every_s: float = 30.0) -> SweepReport:
    """Evaluate every point of the sweep not yet on disk; return the whole sweep's table.

    Raises SweepInterrupted (a KeyboardInterrupt) on Ctrl-C, after writing the tables from
    the finished points. ``retry_errors`` recomputes points whose stored row has status error.
    """
    started, out_dir = time.monotonic(), Path(out_dir)
    _prepare(out_dir)
    tasks = expand_points(spec)
    rows = {pid: row for pid, row in read_parts(out_dir).items()
            if not (retry_errors and row.get("status") == "error")}
    todo = [(pid, point) for pid, point in tasks if pid not in rows]
    skipped = len(tasks) - len(todo)
    executor = executor or make_executor(scheduler=None, workers=default_workers())
    lost: list[str] = []
    interrupted, failure = False, None
    with _stop_signals() as stop:
        try:
            _drain(executor.run(evaluator, todo) if todo else _no_outcomes(), spec, out_dir, tasks, rows,
                   lost, progress=progress, consolidate_every_s=consolidate_every_s)
        except KeyboardInterrupt:
            interrupted = True
        except SchedulerLost as exc:  # the scheduler went away: keep what finished, then say so
            failure = exc
        frame = results_frame(rows, tasks, _grid_keys(spec))
        write_tables(out_dir, frame)
    report = SweepReport(frame=frame, out_dir=out_dir, total=len(tasks), skipped=skipped,
                         computed=len(frame) - skipped, errors=int((frame["status"] == "error").sum()),
                         lost=tuple(lost), elapsed_s=time.monotonic() - started)
    if interrupted:
        raise SweepInterrupted(report, stop.signum or signal.SIGINT)
    if failure is not None:
        raise failure
    return report


def sweep(source: str | Path | Mapping[str, object], out_dir: str | Path, *,
          scheduler: str | None = None, workers: int = 0, evaluator: str = DEFAULT_EVALUATOR,
          progress: bool = True) -> pd.DataFrame:
    """Load a sweep file (or mapping), run it (resuming), return its table.

    ``scheduler`` is a Dask address; otherwise a local pool of ``workers`` processes
    (0 = min(2, CPUs), 1 = serial in this process).
    """
    executor = make_executor(scheduler=scheduler, workers=workers or default_workers())
    return run_sweep(load_sweep(source), out_dir, evaluator=evaluator, executor=executor,
                     progress=progress).frame


def _no_outcomes() -> Outcomes:
    """An empty outcome generator (closable, like an executor's) for a sweep already done."""
    yield from ()


def _drain(outcomes: Outcomes, spec: SweepSpec, out_dir: Path, tasks: Sequence[Task],
           rows: dict[str, dict[str, object]], lost: list[str], *, progress: bool,
           consolidate_every_s: float) -> None:
    """Write each outcome's part as it arrives and add it to rows (a lost point to lost)."""
    point_of = dict(tasks)
    last_write = time.monotonic()
    with _progress(progress) as bar, contextlib.closing(outcomes):
        done = [rows[pid] for pid in point_of if pid in rows]
        errors = sum(row.get("status") == "error" for row in done)
        bar_id = bar.add_task(escape(spec.name), total=len(tasks), completed=len(done), errors=errors)
        for pid, row, note in outcomes:
            if row is None:  # say why once; a broken pool loses every remaining point
                lost.append(pid)
                if len(lost) == 1:
                    bar.console.print(f"[yellow]point {pid} lost:[/yellow] {escape(note)}; "
                                      f"rerun to retry lost points", highlight=False)
                continue
            write_part(out_dir, pid, point_of[pid], row)
            rows[pid] = row
            errors += row.get("status") == "error"
            bar.update(bar_id, advance=1, errors=errors)
            if time.monotonic() - last_write >= consolidate_every_s:
                write_tables(out_dir, results_frame(rows, tasks, _grid_keys(spec)))
                last_write = time.monotonic()
