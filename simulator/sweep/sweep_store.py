"""The parts store of a sweep and its result tables.

Results: each finished point is written at once to ``OUT/parts/<point_id>.json`` (temp file, then
rename: a part is whole or absent); ``OUT/results.parquet`` and ``OUT/results.csv`` are rebuilt
from the parts at the end, every ``consolidate_every_s`` and on Ctrl-C. Rerunning skips points that
have a part. The tables hold each point of this sweep exactly once, in grid order.

Owns: the per-point parts (``write_part``, ``read_parts``, ``parts_dir``), the table built from
them (``results_frame``: one row per point, grid values as extra columns) and writing it
(``write_tables``: Parquet and CSV). Does not own: the sweep file and its grid
(``clustersim.simulator.sweep.sweep_spec``) nor the driver (``clustersim.simulator.sweep.sweep``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from clustersim.files import write_atomic
from clustersim.simulator.sweep.executors import SweepError, Task

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
