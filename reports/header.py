"""What a report simulated, read from its result rows: the scenario header and the title.

Owns ``scenario_header`` (model size and shape, global batch and sequence, precision, clusters with
accelerator, fabric and HBM capacity, calibration profile and fit date, clustersim version, a hash
of the rows' input hashes, the date the report was written), ``scaling_kind`` (strong: the same
global batch at every GPU count; weak: the global batch grows with the GPUs; else mixed) and
``default_title``. Columns a row lacks are reported as "not recorded"; it computes no metric.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import pandas as pd

from clustersim.reports.tables import ok_rows

UNKNOWN = "not recorded"


def _values(frame: pd.DataFrame, column: str) -> list[str]:
    """The distinct values of ``column`` as text, in first-seen order (missing: none)."""
    if column not in frame.columns:
        return []
    return [_text(v) for v in dict.fromkeys(frame[column].dropna().tolist())]


def _text(value: object) -> str:
    """Whole numbers read back as floats (a failed row's NaN) print as integers."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _joined(frame: pd.DataFrame, column: str) -> str:
    values = _values(frame, column)
    return ", ".join(values) if values else UNKNOWN


def scaling_kind(frame: pd.DataFrame) -> str:
    """"strong" (one global batch per cluster at every GPU count), "weak" (batch / GPUs constant), or "mixed"."""
    rows = ok_rows(frame)
    if "global_batch_size" not in rows.columns or rows.empty:
        return "unknown"
    kinds = set()
    for _, g in rows.groupby("cluster"):
        batch = g["global_batch_size"].astype(float)
        per_gpu = batch / g["num_gpus"].astype(float)
        if g["num_gpus"].nunique() < 2 or batch.nunique() == 1:
            kinds.add("strong")
        elif per_gpu.round(9).nunique() == 1:
            kinds.add("weak")
        else:
            kinds.add("mixed")
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _params(frame: pd.DataFrame) -> str:
    if "model_params" not in frame.columns or frame["model_params"].dropna().empty:
        return UNKNOWN
    return ", ".join(f"{float(v) / 1e9:.1f}B" for v in dict.fromkeys(frame["model_params"].dropna()))


def _inputs_hash(frame: pd.DataFrame) -> str:
    """sha256 (16 hex) of the sorted input hashes of the ok rows: the same rows, the same hash."""
    if "input_hash" not in frame.columns:
        return UNKNOWN
    hashes = sorted(str(h) for h in ok_rows(frame)["input_hash"].dropna())
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:16] if hashes else UNKNOWN


def _clusters(frame: pd.DataFrame) -> str:
    """Each cluster as ``name (accelerator, fabric, NIC Gb/s, HBM GiB)``."""
    out = []
    for name, g in frame.groupby("cluster", sort=True):
        bits = [_joined(g, c) for c in ("accelerator", "fabric") if c in g.columns]
        if "nic_bandwidth_gbps" in g.columns and g["nic_bandwidth_gbps"].notna().any():
            bits.append(f"NIC {float(g['nic_bandwidth_gbps'].dropna().iloc[0]):.0f} Gb/s")
        if "hbm_capacity_gib" in g.columns and g["hbm_capacity_gib"].notna().any():
            bits.append(f"{float(g['hbm_capacity_gib'].dropna().iloc[0]):.0f} GiB HBM")
        out.append(f"{name} ({', '.join(bits)})" if bits else str(name))
    return "; ".join(out) if out else UNKNOWN


def scenario_header(frame: pd.DataFrame) -> dict[str, Any]:
    """The scenario of the rows, one entry per fact, values as display text."""
    rows = ok_rows(frame) if not ok_rows(frame).empty else frame
    layers = _joined(rows, "num_layers")
    hidden = _joined(rows, "hidden_size")
    profiles = [f"{p} (fit {d})" for p, d in dict.fromkeys(zip(rows.get("profile", pd.Series(dtype=str)).astype(str),
                                                               rows.get("profile_fit_date", pd.Series(dtype=str)).astype(str)))]
    return {
        "model": f"{_joined(rows, 'model')}: {_params(rows)} parameters, {layers} layers, hidden {hidden}",
        "global batch x sequence": f"{_joined(rows, 'global_batch_size')} sequences x {_joined(rows, 'seq_len')} tokens",
        "precision": _joined(rows, "precision"),
        "scaling": scaling_kind(frame),
        "GPU counts": ", ".join(f"{int(n):,}" for n in sorted(set(rows["num_gpus"].dropna().astype(int)))),
        "clusters": _clusters(rows),
        "calibration profile": ", ".join(profiles) if profiles else UNKNOWN,
        "clustersim version": _joined(rows, "version"),
        "input hash": _inputs_hash(frame),
        "written (UTC date)": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
    }


def default_title(frame: pd.DataFrame) -> str:
    """``<model> on <clusters>: <kind> scaling, <smallest>-<largest> GPUs``."""
    rows = ok_rows(frame) if not ok_rows(frame).empty else frame
    counts = sorted(set(rows["num_gpus"].dropna().astype(int)))
    span = f"{counts[0]:,}-{counts[-1]:,} GPUs" if counts else "no GPU counts"
    clusters = ", ".join(_values(rows, "cluster")) or UNKNOWN
    return f"{_joined(rows, 'model')} on {clusters}: {scaling_kind(frame)} scaling, {span}"
