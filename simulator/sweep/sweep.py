"""Sweeps: a grid over scenario fields, evaluated point by point into one DataFrame, resumable.

A sweep file (YAML) reads::

    base: scenarios/llama3_8b.yaml      # or an inline scenario mapping; a path is relative
    grid:                               # to the sweep file
      cluster.num_gpus: [64, 128, 256]  # dotted key -> list of values (outer product)
      model: [llama3-8b, llama3-70b]
      cluster.num_gpus,plan.dp: [[64, 8], [128, 16]]   # comma-joined keys vary together (zip)
    plan: fixed                         # or best: search for the best plan at every point
    seed: 0

A point is the base mapping with the overrides applied (a mapping over a mapping merges key by
key; anything else replaces), plus ``plan_mode`` ("fixed"/"best") and ``seed`` at the top level.
Its ``point_id`` is the first 12 hex digits of the sha256 of its canonical JSON, so the same point
has the same id in every run and on every machine.

Results: each finished point is written at once to ``OUT/parts/<point_id>.json`` (temp file, then
rename: a part is whole or absent); ``OUT/results.parquet`` and ``OUT/results.csv`` are rebuilt
from the parts at the end, every ``consolidate_every_s`` and on Ctrl-C. Rerunning skips points that
have a part. The tables hold each point of this sweep exactly once, in grid order.

Owns: the sweep file, grid expansion, point ids, the parts store and the driver loop with its
progress bar. Does not own: evaluating a point (the evaluator, ``clustersim.simulator.sweep.points.evaluate_point`` by
default) nor where it runs (``clustersim.simulator.sweep.executors``); the CLI lives in ``clustersim.simulator.cli.sweep``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.progress import TimeRemainingColumn

from clustersim.files import write_atomic
from clustersim.simulator.sweep.executors import Executor, Outcomes, SchedulerLost, SweepError, Task, make_executor
from clustersim.simulator.sweep.executors import default_workers
from clustersim.simulator.scenario import with_override

DEFAULT_EVALUATOR = "clustersim.simulator.sweep.points:evaluate_point"
"""Dotted spec of the function that turns a point mapping into a result row."""

PlanMode = Literal["fixed", "best"]
SWEEP_KEYS = ("base", "grid", "plan", "seed", "name")
"""Top-level keys a sweep file may have."""
PATH_KEYS = ("model", "calibration")
"""Scenario keys whose value may be a YAML file path, relative to the scenario file."""


@dataclass(frozen=True, kw_only=True)
class GridAxis:
    """One axis of the grid: one or more dotted keys that take their values together."""

    keys: tuple[str, ...]
    """Dotted paths into the scenario mapping, e.g. ("cluster.num_gpus",)."""
    values: tuple[tuple[object, ...], ...]
    """One tuple per grid step, aligned with ``keys``."""


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A parsed sweep file. Never mutated; points are built as fresh dicts."""

    base: Mapping[str, object]
    """The scenario mapping every point starts from."""
    axes: tuple[GridAxis, ...]
    """Grid axes; the outer product of their steps, first axis outermost."""
    plan_mode: PlanMode = "fixed"
    """"fixed" simulates the plan in the point; "best" searches for the best plan per point."""
    seed: int | None = None
    """Seed written into every point; None keeps the base scenario's own (or 0)."""
    name: str = "sweep"
    """Label for progress and reports."""


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


# ---------------------------------------------------------------- sweep file and grid

def load_sweep(source: str | Path | Mapping[str, object]) -> SweepSpec:
    """Parse a sweep YAML file (or an already-loaded mapping) into a SweepSpec."""
    if isinstance(source, Mapping):
        return _spec_from_mapping(source, Path.cwd())
    path = Path(source)
    return _spec_from_mapping(_read_yaml(path, "sweep file"), path.parent)


def _read_yaml(path: Path, what: str) -> Mapping[str, object]:
    """A YAML mapping from a file, or a SweepError naming the file."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SweepError(f"{what} {path}: cannot read ({exc.strerror}); check the path") from exc
    except yaml.YAMLError as exc:
        raise SweepError(f"{what} {path}: malformed YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, Mapping):
        raise SweepError(f"{what} {path}: expected a mapping at the top, got {type(data).__name__}")
    return data


def _spec_from_mapping(data: Mapping[str, object], folder: Path) -> SweepSpec:
    """Validate the top-level keys and build the spec; relative base paths resolve in folder."""
    unknown = sorted(set(data) - set(SWEEP_KEYS))
    if unknown:
        raise SweepError(f"sweep key(s) {unknown}: unknown; valid keys are {list(SWEEP_KEYS)}")
    base = data.get("base", {})
    if isinstance(base, (str, Path)):
        folder = (folder / base).parent
        base = _read_yaml(folder / Path(base).name, "base scenario")
    if not isinstance(base, Mapping):
        raise SweepError(f"base: expected a scenario mapping or a path, got {type(base).__name__}")
    base = _absolute_paths(base, folder)
    plan_mode = data.get("plan", "fixed")
    if plan_mode not in ("fixed", "best"):
        raise SweepError(f"plan: {plan_mode!r} is not valid; use 'fixed' or 'best'")
    seed = data.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise SweepError(f"seed: {seed!r} is not an integer; use e.g. seed: 0")
    return SweepSpec(base=base, axes=_parse_grid(data.get("grid") or {}), plan_mode=plan_mode,
                     seed=seed, name=str(data.get("name", "sweep")))


def _absolute_paths(base: Mapping[str, object], folder: Path) -> dict[str, object]:
    """Copy of a scenario whose relative YAML paths (model, calibration) are made absolute
    from the folder of the file that holds them, so they resolve wherever the point runs."""
    result = dict(base)
    for key in PATH_KEYS:
        value = result.get(key)
        if isinstance(value, str) and value.endswith((".yaml", ".yml")):
            result[key] = str((folder / value).resolve())
    return result


def _parse_grid(grid: object) -> tuple[GridAxis, ...]:
    """Grid mapping -> axes; "a.b,c.d" keys zip their per-step value lists."""
    if not isinstance(grid, Mapping):
        raise SweepError(f"grid: expected a mapping of dotted key -> list, got {type(grid).__name__}")
    return tuple(_parse_axis(str(key), values) for key, values in grid.items())


def _parse_axis(key: str, values: object) -> GridAxis:
    """One grid entry -> GridAxis, checking it is a non-empty list of the right arity."""
    keys = tuple(part.strip() for part in key.split(","))
    if not isinstance(values, list) or not values:
        raise SweepError(f"grid.{key}: expected a non-empty list of values, got {values!r}")
    if len(keys) == 1:
        return GridAxis(keys=keys, values=tuple((value,) for value in values))
    for step in values:
        if not isinstance(step, list) or len(step) != len(keys):
            raise SweepError(f"grid.{key}: each step must list {len(keys)} values (one per key), "
                             f"got {step!r}")
    return GridAxis(keys=keys, values=tuple(tuple(step) for step in values))


def point_id(point: Mapping[str, object]) -> str:
    """Stable 12-hex-digit id: sha256 of the point's canonical JSON."""
    canonical = json.dumps(point, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def expand_points(spec: SweepSpec) -> list[Task]:
    """Every (point_id, point) of the grid in grid order, each distinct point once."""
    start: dict[str, object] = dict(spec.base)
    start["plan_mode"] = spec.plan_mode
    start["seed"] = spec.seed if spec.seed is not None else spec.base.get("seed", 0)
    tasks: dict[str, Mapping[str, object]] = {}
    for steps in itertools.product(*(axis.values for axis in spec.axes)):
        point = start
        for axis, step in zip(spec.axes, steps):
            for key, value in zip(axis.keys, step):
                point = with_override(point, key, value)
        tasks.setdefault(point_id(point), point)
    return list(tasks.items())


# ---------------------------------------------------------------- the parts store

def parts_dir(out_dir: Path) -> Path:
    """Folder of the per-point JSON parts."""
    return Path(out_dir) / "parts"


def _json_default(value: object) -> object:
    """JSON for numpy scalars/arrays and paths that evaluators may return."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def write_part(out_dir: Path, pid: str, point: Mapping[str, object],
               row: Mapping[str, object]) -> Path:
    """Write one finished point atomically: temp file in the same folder, then rename."""
    final = parts_dir(out_dir) / f"{pid}.json"
    payload = {"point_id": pid, "point": point, "row": row}
    return write_atomic(final, json.dumps(payload, default=_json_default))  # keeps the row's column order


def read_parts(out_dir: Path) -> dict[str, dict[str, object]]:
    """point_id -> row of every whole part on disk; unreadable files are skipped (recomputed)."""
    rows: dict[str, dict[str, object]] = {}
    folder = parts_dir(out_dir)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            payload = json.loads(path.read_text())
            if payload["point_id"] == path.stem and isinstance(payload["row"], dict):
                rows[path.stem] = payload["row"]
    return rows


def _prepare(out_dir: Path) -> None:
    """Create OUT/parts and drop temp files a killed run left behind."""
    if out_dir.exists() and not out_dir.is_dir():
        raise SweepError(f"--out {out_dir}: is a file; give a folder (created if missing)")
    parts_dir(out_dir).mkdir(parents=True, exist_ok=True)
    for stale in parts_dir(out_dir).glob(".*.tmp"):
        stale.unlink(missing_ok=True)


def _dotted(mapping: Mapping[str, object], dotted_key: str) -> object:
    """The value at a dotted key, or None."""
    value: object = mapping
    for part in dotted_key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def results_frame(rows: Mapping[str, Mapping[str, object]], tasks: Sequence[Task],
                  grid_keys: Iterable[str] = ()) -> pd.DataFrame:
    """One row per task that has a row, in task order, with the grid values as extra columns.

    Columns: point_id, status, error, the evaluator's columns, then each grid key (dotted name)
    and plan_mode unless the evaluator already returned a column of that name.
    """
    records = []
    extra = [*grid_keys, "plan_mode"]
    for pid, point in tasks:
        if pid not in rows:
            continue
        record = {"point_id": pid, "status": "ok", "error": "", **rows[pid]}
        for key in extra:
            record.setdefault(key, _scalar(_dotted(point, key)))
        records.append(record)
    return pd.DataFrame.from_records(records, columns=_columns(records))


def _columns(records: Sequence[Mapping[str, object]]) -> list[str]:
    """point_id, status, error first, then every other key in order of first appearance."""
    seen = dict.fromkeys(["point_id", "status", "error"])
    for record in records:
        seen.update(dict.fromkeys(record))
    return list(seen)


def _scalar(value: object) -> object:
    """A table cell: containers become canonical JSON text."""
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _arrow_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Copy where object columns of mixed types become text, so Parquet accepts them."""
    safe = frame.copy()
    for column in safe.columns[safe.dtypes == object]:
        kinds = {type(v) for v in safe[column] if v is not None and not pd.isna(v)}
        if len(kinds) > 1 or (kinds and not kinds <= {str, bool}):
            safe[column] = [None if v is None or pd.isna(v) else str(_scalar(v))
                            for v in safe[column]]
    return safe


def write_tables(out_dir: Path, frame: pd.DataFrame) -> tuple[Path, Path]:
    """Write OUT/results.parquet and OUT/results.csv, each via temp file + rename."""
    parquet, csv = Path(out_dir) / "results.parquet", Path(out_dir) / "results.csv"
    write_atomic(parquet, lambda temp: _arrow_safe(frame).to_parquet(temp, index=False))
    write_atomic(csv, frame.to_csv(index=False))
    return parquet, csv


def consolidate(spec: SweepSpec, out_dir: Path) -> pd.DataFrame:
    """Rebuild the result tables of a sweep from the parts on disk (e.g. after a crash)."""
    frame = results_frame(read_parts(out_dir), expand_points(spec), _grid_keys(spec))
    write_tables(out_dir, frame)
    return frame


def _grid_keys(spec: SweepSpec) -> list[str]:
    """Every dotted key the grid sets, in grid order."""
    return [key for axis in spec.axes for key in axis.keys]


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
