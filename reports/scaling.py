"""Scaling arithmetic of a report: efficiency curves, lost time by cause, the summary in words.

Owns the definitions the report states:
- scaling efficiency of a series at N GPUs = (tokens/s/GPU at N) / (tokens/s/GPU at the series'
  smallest N on the same cluster), so it is 1 at the smallest N and ideal linear scaling is 1;
- the fraction of step time by cause: ideal compute (``ideal_compute_s``), compute inefficiency
  (``t_compute - ideal_compute_s``), each exposed communication axis, bubble, optimizer, other;
  the fractions of one row sum to 1 (they are divided by the breakdown's own sum, which the
  input check holds within 0.1 % of ``step_time_s``).
It reads checked result rows (``reports.tables.load_results``); it does not draw or write files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from clustersim.reports.tables import (
    BEST_SERIES, BREAKDOWN_COLUMNS, PARETO_SERIES, best_rows, ok_rows, plan_label, records, series_rows,
)


@dataclass(frozen=True, kw_only=True)
class Cause:
    """One segment of the lost-time bars."""

    key: str
    """Column name in the fractions table."""
    label: str
    """Words used in the legend and the summary."""
    columns: tuple[str, ...]
    """Result columns whose sum is this cause's seconds (``-ideal_compute_s`` subtracts)."""


IDEAL = Cause(key="ideal_compute", label="ideal compute (at peak FLOP/s)",
              columns=("ideal_compute_s",))
LOSS_CAUSES: tuple[Cause, ...] = (
    Cause(key="compute_inefficiency", label="compute inefficiency",
          columns=("t_compute", "-ideal_compute_s")),
    Cause(key="exposed_tp", label="exposed TP communication", columns=("t_exposed_tp",)),
    Cause(key="exposed_cp", label="exposed CP communication", columns=("t_exposed_cp",)),
    Cause(key="exposed_ep", label="exposed EP communication", columns=("t_exposed_ep",)),
    Cause(key="exposed_pp", label="exposed PP communication", columns=("t_exposed_pp",)),
    Cause(key="exposed_dp", label="exposed DP communication", columns=("t_exposed_dp",)),
    Cause(key="exposed_offload", label="exposed host copies (CPU offloading)", columns=("t_exposed_offload",)),
    Cause(key="bubble", label="pipeline bubble", columns=("t_bubble",)),
    Cause(key="optimizer", label="optimizer step", columns=("t_optimizer",)),
    Cause(key="other", label="other", columns=("t_other",)),
)
"""The losses in stacking order, bottom (after ideal compute) to top."""
SEGMENTS: tuple[Cause, ...] = (IDEAL, *LOSS_CAUSES)


BAND_COLUMNS: tuple[str, ...] = ("tokens_per_s_per_gpu_low", "tokens_per_s_per_gpu_high")
"""Optional prediction interval of tokens/s/GPU (from held-out residuals); drawn as a band when present."""


def has_intervals(frame: pd.DataFrame) -> bool:
    """Whether the rows carry a prediction interval."""
    return all(c in frame.columns for c in BAND_COLUMNS) and bool(frame[list(BAND_COLUMNS)].notna().any().all())


def scaling_table(frame: pd.DataFrame) -> pd.DataFrame:
    """tokens/s/GPU, MFU and scaling efficiency per (cluster, series, GPU count).

    Series "best" is derived (fastest non-naive plan per scale) when the data lacks it.
    """
    labels = sorted((set(ok_rows(frame)["series"]) | {BEST_SERIES}) - {PARETO_SERIES})
    parts = [_series_curve(best_rows(frame) if s == BEST_SERIES else series_rows(frame, s), s)
             for s in labels]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=["cluster", "series", "num_gpus", "tokens_per_s_per_gpu",
                                     "mfu", "scaling_efficiency", "plan"])
    return pd.concat(parts, ignore_index=True).sort_values(["cluster", "series", "num_gpus"], kind="stable").reset_index(drop=True)


def _series_curve(rows: pd.DataFrame, series: str) -> pd.DataFrame:
    """One series' rows with efficiency against its smallest GPU count on each cluster."""
    if rows.empty:
        return pd.DataFrame()
    extra = [c for c in ("tflops_per_gpu", "step_time_s", "peak_memory_gib", "cost_per_million_tokens",
                         "kwh_per_million_tokens", *BAND_COLUMNS)
             if c in rows.columns]
    out = rows[["cluster", "num_gpus", "tokens_per_s_per_gpu", "mfu", *extra]].copy()
    out.insert(1, "series", series)
    base = out.groupby("cluster")["tokens_per_s_per_gpu"].transform("first")
    out["scaling_efficiency"] = out["tokens_per_s_per_gpu"] / base
    out["plan"] = [plan_label(r) for r in records(rows)]
    return out.reset_index(drop=True)


def lost_time_fractions(rows: pd.DataFrame) -> pd.DataFrame:
    """Fraction of step time by segment (ideal compute, then each loss) for each row."""
    seconds = rows[list(BREAKDOWN_COLUMNS)].astype(float)
    total = seconds.sum(axis=1).to_numpy()
    out = rows[["cluster", "num_gpus"]].reset_index(drop=True)
    for cause in SEGMENTS:
        out[cause.key] = _cause_seconds(rows, cause) / total
    return out


def _cause_seconds(rows: pd.DataFrame, cause: Cause) -> np.ndarray:
    """Seconds of ``cause`` in each row: signed sum of its columns."""
    total = np.zeros(len(rows))
    for column in cause.columns:
        sign, name = (-1.0, column[1:]) if column.startswith("-") else (1.0, column)
        total += sign * rows[name].astype(float).to_numpy()
    return total


def largest_loss(fractions: pd.Series) -> tuple[Cause, float]:
    """The loss cause with the largest fraction of step time in one row of fractions."""
    values = [(float(fractions[c.key]), c) for c in LOSS_CAUSES]
    value, cause = max(values, key=lambda pair: pair[0])
    return cause, value
