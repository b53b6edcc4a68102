"""Results as tables: load and check a sweep's result rows, then derive the report's tables.

Owns the input contract of ``reports/`` (the "Sweep/result DataFrame columns" of
docs/ARCHITECTURE.md plus ``series`` and ``status``), loading it from a DataFrame, a CSV/Parquet
file or a directory, the cost arithmetic ($ per million tokens from $ per GPU-hour), and the plan,
hardware and error tables. It does not compute scaling curves or loss fractions
(``reports.scaling``), draw (``reports.plots``) or write files (``reports.report``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from clustersim.reports.errors import ReportError

BREAKDOWN_COLUMNS: tuple[str, ...] = (
    "t_compute", "t_exposed_tp", "t_exposed_cp", "t_exposed_ep", "t_exposed_pp",
    "t_bubble", "t_exposed_dp", "t_exposed_offload", "t_optimizer", "t_other",
)
"""Seconds of one step by cause; they sum to ``step_time_s`` (docs/ARCHITECTURE.md)."""
LATER_BREAKDOWN_COLUMNS: tuple[str, ...] = ("t_exposed_offload",)
"""Breakdown columns added after results were first written: absent, they read as 0 s (a result
written before the cause existed had none of it in its step time)."""

REQUIRED_COLUMNS: tuple[str, ...] = (
    "num_gpus", "cluster", "status", "step_time_s", "tokens_per_s_per_gpu", "mfu",
    "ideal_compute_s", *(c for c in BREAKDOWN_COLUMNS if c not in LATER_BREAKDOWN_COLUMNS),
)
"""The columns every report reads; the other contract columns are shown when present.

``series`` is optional: without it each row's series is its plan label less dp (one series per
plan family across scales) and the best plan per scale is derived, so that a plain
`clustersim sweep` output can be reported as it is."""

PLAN_COLUMNS: tuple[str, ...] = (
    "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "schedule", "recompute", "zero", "fsdp",
)
"""The parallel-plan columns, in the order the plan table shows them."""

INTEGER_COLUMNS: tuple[str, ...] = (
    "num_gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero", "global_batch_size",
    "seq_len",
)
"""Columns holding whole numbers (read back from CSV as floats when a failed row has NaN)."""

NAIVE_SERIES = "naive_dp"
"""Series label of the baseline that only adds DP replicas of the smallest plan that fits."""

BEST_SERIES = "best"
"""Series label of the best plan found at each scale."""

PARETO_SERIES = "pareto"
"""Series label of the engine-priced plans of a search's Pareto front (not a scaling curve)."""

COMPUTE_COLUMNS: dict[str, str] = {
    "c_gemm_ideal": "GEMM at peak", "c_gemm_efficiency_loss": "GEMM efficiency loss",
    "c_attention_kernel": "attention kernel", "c_elementwise": "memory-bound element-wise",
    "c_recompute": "recompute", "c_overhead": "launch/overhead",
}
"""The critical stage's compute seconds by where they go (they sum to ``t_compute``)."""

SUM_TOLERANCE = 1e-3
"""Relative slack allowed between the breakdown's sum and ``step_time_s`` (rounding in files)."""

SECONDS_PER_HOUR = 3600.0

ENERGY_COLUMNS: tuple[str, ...] = ("kwh_per_million_tokens", "mean_gpu_power_w")
"""Energy per million trained tokens (facility kWh, PUE 1) and mean board power per GPU of a row's
step, each on its own cluster's power model; shown where the rows carry them (sweeps since the
energy model; older result files lack them)."""

ResultsInput = pd.DataFrame | str | Path


def read_results(results: ResultsInput) -> pd.DataFrame:
    """The result rows from a DataFrame, a .csv/.parquet file, or a directory holding one."""
    if isinstance(results, pd.DataFrame):
        return results.copy()
    path = Path(results)
    if path.is_dir():
        path = _result_file_in(path)
    if not path.is_file():
        raise ReportError(f"results: {path} does not exist; pass a results.parquet/.csv file "
                          "or the sweep's output directory")
    match path.suffix.lower():
        case ".parquet":
            return pd.read_parquet(path)
        case ".csv":
            return pd.read_csv(path, comment="#")
        case other:
            raise ReportError(f"results: unknown file type {other!r} of {path}; "
                              "use a .csv or .parquet file")


def _result_file_in(directory: Path) -> Path:
    """``results.parquet`` (preferred) or ``results.csv`` inside ``directory``."""
    for name in ("results.parquet", "results.csv"):
        if (directory / name).is_file():
            return directory / name
    raise ReportError(f"results: directory {directory} holds no results.parquet or results.csv; "
                      "point at the sweep's output directory or the file itself")


def check_results(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with required columns present, ``status`` normalised, ok rows consistent."""
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ReportError(f"results: missing columns {missing}; produce the results with "
                          "`clustersim sweep` or add them (see docs/ARCHITECTURE.md, "
                          "'Sweep/result DataFrame columns')")
    if frame.empty:
        raise ReportError("results: no rows; run a sweep first (`clustersim sweep`)")
    out = frame.copy()
    for column in LATER_BREAKDOWN_COLUMNS:
        if column not in out.columns:
            out[column] = 0.0
    out["status"] = out["status"].astype(str).str.strip().str.lower()
    for column in INTEGER_COLUMNS:
        if column in out.columns:
            out[column] = _as_integers(out[column], column)
    for column in ("cluster", "series"):
        if column in out.columns:
            out[column] = out[column].map(lambda v: v if pd.isna(v) else str(v))
    if "series" not in out.columns:
        out["series"] = [plan_label(r, with_dp=False) for r in records(out)]
    if "point_id" not in out.columns:
        out["point_id"] = [f"row{i}" for i in range(len(out))]
    _check_ok_rows(out[out["status"] == "ok"])
    return out.reset_index(drop=True)


def _as_integers(values: pd.Series, column: str) -> pd.Series:
    """A whole-number column as nullable integers (NaN in failed rows stays missing)."""
    numbers = pd.to_numeric(values, errors="coerce")
    unreadable = values[numbers.isna() & values.notna() & (values.astype(str) != "")]
    if not unreadable.empty:
        raise ReportError(f"results: {column} must hold whole numbers, got "
                          f"{unreadable.iloc[0]!r}")
    present = numbers.dropna()
    if not (present == present.round()).all():
        raise ReportError(f"results: {column} must hold whole numbers, got "
                          f"{present[present != present.round()].iloc[0]}")
    return numbers.astype("Int64")


def _check_ok_rows(ok: pd.DataFrame) -> None:
    """Ok rows need finite, positive metrics and a breakdown that sums to the step time."""
    numeric = ["num_gpus", "step_time_s", "tokens_per_s_per_gpu", "ideal_compute_s"]
    for column in numeric:
        values = pd.to_numeric(ok[column], errors="coerce").astype(float)
        bad = ok[~(np.isfinite(values) & (values > 0))]
        if not bad.empty:
            raise ReportError(f"results: {column} must be a positive number in ok rows, got "
                              f"{bad[column].iloc[0]!r} at point {bad['point_id'].iloc[0]}; "
                              "set status='error' for failed points")
    total = ok[list(BREAKDOWN_COLUMNS)].astype(float).sum(axis=1)
    off = (total - ok["step_time_s"]).abs() > SUM_TOLERANCE * ok["step_time_s"]
    if off.any():
        row = ok[off].iloc[0]
        raise ReportError(f"results: breakdown t_* sums to {total[off].iloc[0]:.6g} s but "
                          f"step_time_s = {row['step_time_s']:.6g} s at point {row['point_id']}; "
                          "the breakdown columns must sum to the step time")
    slack = ok["ideal_compute_s"] - ok["t_compute"]
    if (slack > SUM_TOLERANCE * ok["step_time_s"]).any():
        row = ok[slack > SUM_TOLERANCE * ok["step_time_s"]].iloc[0]
        raise ReportError(f"results: ideal_compute_s = {row['ideal_compute_s']:.6g} s exceeds "
                          f"t_compute = {row['t_compute']:.6g} s at point {row['point_id']} "
                          "(MFU > 1); ideal_compute_s must be model FLOPs / (GPUs x peak)")


def load_results(results: ResultsInput) -> pd.DataFrame:
    """Read and check result rows (see ``read_results`` and ``check_results``)."""
    return check_results(read_results(results))


def with_costs(frame: pd.DataFrame,
               cost_per_gpu_hour: float | Mapping[str, float] | None) -> pd.DataFrame:
    """Rows with ``cost_per_gpu_hour`` and ``cost_per_million_tokens`` filled in.

    A float prices every cluster alike; a mapping prices by cluster name, else accelerator name;
    ``None`` keeps the prices in the data. Price 0 or missing means unknown (NaN cost).
    $/M tokens = ($/GPU-h / 3600 s/h) / (tokens/s/GPU) x 1e6.
    """
    out = frame.copy()
    price = _prices(out, cost_per_gpu_hour)
    if (price.dropna() < 0).any():
        raise ReportError(f"cost_per_gpu_hour = {price.min()} $/GPU-hour; prices must be >= 0")
    price = price.where(price > 0)
    throughput = pd.to_numeric(out["tokens_per_s_per_gpu"], errors="coerce")
    out["cost_per_gpu_hour"] = price
    out["cost_per_million_tokens"] = price / SECONDS_PER_HOUR / throughput * 1e6
    return out


def _prices(frame: pd.DataFrame,
            cost_per_gpu_hour: float | Mapping[str, float] | None) -> pd.Series:
    """The $/GPU-hour of each row from the argument, falling back to the data's column."""
    given = (pd.to_numeric(frame["cost_per_gpu_hour"], errors="coerce").astype(float)
             if "cost_per_gpu_hour" in frame.columns
             else pd.Series(np.nan, index=frame.index, dtype=float))
    if cost_per_gpu_hour is None:
        return given
    if isinstance(cost_per_gpu_hour, Mapping):
        by_cluster = frame["cluster"].map(cost_per_gpu_hour)
        if "accelerator" in frame.columns:
            by_cluster = by_cluster.fillna(frame["accelerator"].map(cost_per_gpu_hour))
        return by_cluster.astype(float).fillna(given)
    if cost_per_gpu_hour < 0:
        raise ReportError(f"cost_per_gpu_hour = {cost_per_gpu_hour} must be >= 0 $/GPU-hour")
    return pd.Series(float(cost_per_gpu_hour), index=frame.index, dtype=float)


def plan_label(row: Mapping[str, Any], *, with_dp: bool = True) -> str:
    """A short plan name such as ``tp8 pp4 dp32 cp2 vpp2 mb1 1f1b rc=selective zero1``.

    ``with_dp=False`` drops the dp degree: the name of a plan family across scales.
    """
    axes = ("tp", "pp", "dp", "cp", "ep", "vpp") if with_dp else ("tp", "pp", "cp", "ep", "vpp")
    parts = [f"{axis}{int(row[axis])}" for axis in axes
             if _present(row, axis) and (axis in ("tp", "pp", "dp") or int(row[axis]) > 1)]
    if _present(row, "micro_batch"):
        parts.append(f"mb{int(row['micro_batch'])}")
    if _present(row, "schedule"):
        parts.append(str(row["schedule"]))
    if _present(row, "recompute") and str(row["recompute"]) != "none":
        parts.append(f"rc={row['recompute']}")
    if _present(row, "zero") and int(row["zero"]) > 0:
        parts.append(f"zero{int(row['zero'])}")
    if _present(row, "fsdp") and str(row["fsdp"]) not in ("none", ""):
        parts.append(f"fsdp={row['fsdp']}")
    return " ".join(parts) if parts else str(row.get("series", "?"))


def _present(row: Mapping[str, Any], key: str) -> bool:
    """The row has a non-missing value for ``key``."""
    return key in row and not pd.isna(row[key])


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame's rows as dicts keyed by column name (pandas-stubs type the keys as Hashable)."""
    return [{str(key): value for key, value in row.items()} for row in frame.to_dict("records")]


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows whose point simulated successfully."""
    return frame[frame["status"] == "ok"]


def series_rows(frame: pd.DataFrame, series: str) -> pd.DataFrame:
    """One ok row per (cluster, num_gpus) of ``series``: the highest tokens/s/GPU."""
    rows = ok_rows(frame)
    rows = rows[rows["series"] == series]
    return _top_per_scale(rows)


def best_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The best plan per (cluster, num_gpus): series "best", else the fastest non-naive row."""
    if (ok_rows(frame)["series"] == BEST_SERIES).any():
        return series_rows(frame, BEST_SERIES)
    rows = ok_rows(frame)
    return _top_per_scale(rows[rows["series"] != NAIVE_SERIES])


def _top_per_scale(rows: pd.DataFrame) -> pd.DataFrame:
    """The fastest row of each (cluster, num_gpus), sorted by cluster then GPU count."""
    ordered = rows.sort_values("tokens_per_s_per_gpu", ascending=False, kind="stable")
    top = ordered.drop_duplicates(subset=["cluster", "num_gpus"], keep="first")
    return top.sort_values(["cluster", "num_gpus"], kind="stable").reset_index(drop=True)


def plan_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every ok plan, fastest first within each (cluster, GPU count), against naive DP."""
    rows = ok_rows(frame).copy()
    rows.insert(0, "plan", [plan_label(r) for r in records(rows)])
    naive = series_rows(frame, NAIVE_SERIES).set_index(["cluster", "num_gpus"])
    keys = pd.MultiIndex.from_frame(rows[["cluster", "num_gpus"]])
    naive_tps = naive["tokens_per_s_per_gpu"].reindex(keys).to_numpy(dtype=float)
    rows["speedup_vs_naive_dp"] = rows["tokens_per_s_per_gpu"].to_numpy(dtype=float) / naive_tps
    memory = ("peak_memory_gib", "memory_headroom_gib") if "peak_memory_gib" in rows.columns else ("peak_memory_gb",)
    columns = ["cluster", "num_gpus", "series", "plan",
               *[c for c in PLAN_COLUMNS if c in rows.columns],
               *[c for c in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "tflops_per_gpu", "hfu",
                             *memory, "cost_per_million_tokens", *ENERGY_COLUMNS) if c in rows.columns],
               "speedup_vs_naive_dp"]
    ordered = rows.sort_values(["cluster", "num_gpus", "tokens_per_s_per_gpu"],
                               ascending=[True, True, False], kind="stable")
    return ordered[columns].reset_index(drop=True)


def hardware_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The best plan of each cluster at the largest GPU count that every cluster ran: throughput,
    $ per million tokens at the cluster's own price, kWh per million tokens on its own power model.

    Clusters with no common scale are compared at their own largest scale (the table says which).
    """
    best = best_rows(frame)
    if best.empty:
        return best
    scales = [set(g["num_gpus"]) for _, g in best.groupby("cluster")]
    common = set.intersection(*scales)
    picked: pd.DataFrame
    if common:
        picked = best[best["num_gpus"] == max(common)]
    else:
        picked = best.sort_values("num_gpus").drop_duplicates("cluster", keep="last")
    columns = ["cluster", *[c for c in ("accelerator",) if c in picked.columns], "num_gpus",
               "tokens_per_s_per_gpu", "mfu", "step_time_s", "cost_per_gpu_hour",
               "cost_per_million_tokens", *[c for c in ENERGY_COLUMNS if c in picked.columns]]
    out = picked.assign(plan=[plan_label(r) for r in records(picked)])
    return out[[*columns, "plan"]].sort_values("cluster").reset_index(drop=True)


def error_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows that did not simulate: where, which plan (or "searched" when none fits), and why."""
    rows = frame[frame["status"] != "ok"].copy()
    labels = []
    for r in records(rows):
        given = r.get("plan_label")
        labels.append(str(given) if isinstance(given, str) and given else
                      plan_label(r) if _present(r, "tp") else "searched: no plan fits")
    rows.insert(0, "plan", labels)
    columns = [c for c in ("cluster", "num_gpus", "series", "plan", "error", "point_id") if c in rows.columns]
    return rows.sort_values(["cluster", "num_gpus"], kind="stable")[columns].reset_index(drop=True)


def compute_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The best plan per scale: compute seconds by where they go, and each part's share of compute."""
    best = best_rows(frame)
    present = [c for c in COMPUTE_COLUMNS if c in best.columns]
    if best.empty or not present or best[present].isna().all().all():
        return pd.DataFrame()
    out = best[["cluster", "num_gpus"]].copy()
    out["plan"] = [plan_label(r) for r in records(best)]
    out["t_compute"] = best["t_compute"].astype(float)
    for c in present:
        out[c] = best[c].astype(float)
    out["compute_share_of_step"] = best["t_compute"].astype(float) / best["step_time_s"].astype(float)
    return out.reset_index(drop=True)


def pareto_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (cluster, GPU count): the ok plans no other beats on step time, peak memory (GiB),
    $ per million tokens and kWh per million tokens at once (each where known), fastest first."""
    rows = ok_rows(frame).copy()
    mem = "peak_memory_gib" if "peak_memory_gib" in rows.columns else "peak_memory_gb"
    if rows.empty or mem not in rows.columns:
        return pd.DataFrame()
    keys = ["step_time_s", mem] + [c for c in ("cost_per_million_tokens", "kwh_per_million_tokens")
                                   if c in rows.columns and rows[c].notna().any()]
    rows["plan"] = [plan_label(r) for r in records(rows)]
    rows = rows.drop_duplicates(subset=["cluster", "num_gpus", "plan"])
    fronts = []
    for _, g in rows.groupby(["cluster", "num_gpus"], sort=True):
        values = g[keys].astype(float).to_numpy()
        keep = [not any((o <= v).all() and (o < v).any() for o in values) for v in values]
        fronts.append(g[keep].sort_values("step_time_s", kind="stable"))
    columns = ["cluster", "num_gpus", "plan", "step_time_s", "tokens_per_s_per_gpu", mem,
               *[c for c in ("memory_headroom_gib", "cost_per_million_tokens", "kwh_per_million_tokens")
                 if c in rows.columns]]
    return pd.concat(fronts)[columns].reset_index(drop=True)
