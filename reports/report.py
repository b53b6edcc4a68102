"""The scaling-efficiency report: result rows in, PNG figures, CSV tables and one HTML page out.

Owns ``write_scaling_report``, the one entry point behind ``clustersim report RESULTS --out DIR``:
it loads and checks the rows, fills in costs, derives the curves, lost-time fractions, plan,
hardware and error tables and the summary, renders every figure once, and writes each file
atomically (temporary name, then rename). It adds no arithmetic of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import pandas as pd

from clustersim.reports.files import write_bytes_atomic, write_csv_atomic, write_text_atomic
from clustersim.reports.html import PageFigure, PageTable, render_page
from clustersim.reports.plots import (
    plot_hardware, plot_lost_time, plot_mfu, plot_scaling_efficiency, plot_throughput_per_gpu,
    png_bytes,
)
from clustersim.reports.scaling import lost_time_fractions, scaling_table
from clustersim.reports.summary import summary_sentences
from clustersim.reports.tables import (
    BEST_SERIES, NAIVE_SERIES, PLAN_COLUMNS, ResultsInput, best_rows, error_table,
    hardware_table, load_results, plan_table, series_rows, with_costs,
)

PLANS_SHOWN_PER_SCALE = 5
"""Plans per (cluster, GPU count) in the page's plan table; plan_table.csv holds them all."""


@dataclass(frozen=True, kw_only=True)
class ReportData:
    """Everything a scaling report shows, derived from the result rows."""

    results: pd.DataFrame
    """Checked rows with costs filled in (written as results.csv)."""
    curves: pd.DataFrame
    """Per (cluster, series, GPU count): tokens/s/GPU, MFU, scaling efficiency."""
    fractions: pd.DataFrame
    """Best plan per (cluster, GPU count): fraction of step time by cause."""
    naive_fractions: pd.DataFrame
    """The naive DP baseline per (cluster, GPU count): fraction of step time by cause."""
    plans: pd.DataFrame
    """Every ok plan, fastest first per scale, with its speed-up over naive DP."""
    hardware: pd.DataFrame
    """Best plan per cluster at a common scale, with $ per million tokens."""
    errors: pd.DataFrame
    """Rows that failed to simulate."""
    sentences: list[str]
    """The key findings in words."""


def report_data(results: ResultsInput,
                cost_per_gpu_hour: float | Mapping[str, float] | None = None) -> ReportData:
    """Load, check and derive every table of the report (no files written)."""
    frame = with_costs(load_results(results), cost_per_gpu_hour)
    return ReportData(
        results=frame, curves=scaling_table(frame), fractions=lost_time_fractions(best_rows(frame)),
        naive_fractions=lost_time_fractions(series_rows(frame, NAIVE_SERIES)),
        plans=plan_table(frame), hardware=hardware_table(frame), errors=error_table(frame),
        sentences=summary_sentences(frame),
    )


def _figures(data: ReportData) -> list[PageFigure]:
    """Render every figure the data supports (hardware only when several clusters ran)."""
    figures = []
    if not data.curves.empty:
        figures += [
            PageFigure(key="throughput_per_gpu", caption="tokens/s per GPU against GPU count; "
                       "the dash-dot line is ideal linear scaling",
                       png=png_bytes(plot_throughput_per_gpu(data.curves))),
            PageFigure(key="scaling_efficiency", caption="Scaling efficiency: tokens/s/GPU "
                       "relative to each series' smallest scale (ideal = 100%)",
                       png=png_bytes(plot_scaling_efficiency(data.curves))),
            PageFigure(key="lost_time", caption="Fraction of step time by cause for the best "
                       "plan at each scale (ideal compute at the bottom)",
                       png=png_bytes(plot_lost_time(data.fractions))),
            PageFigure(key="mfu", caption="Model FLOPs utilisation (PaLM convention) against "
                       "GPU count", png=png_bytes(plot_mfu(data.curves))),
        ]
    if not data.naive_fractions.empty:
        figures.append(PageFigure(key="lost_time_naive_dp", caption="The same for the naive "
                                  "baseline: DP replicas of the smallest plan that fits",
                                  png=png_bytes(plot_lost_time(data.naive_fractions,
                                                               subject="naive DP"))))
    if len(data.hardware) > 1:
        figures.append(PageFigure(key="hardware", caption="Best plan per cluster: tokens/s per "
                                  "GPU and $ per million tokens",
                                  png=png_bytes(plot_hardware(data.hardware))))
    return figures


def _tables(data: ReportData) -> list[PageTable]:
    """The page's tables: scaling, plans (top few per scale), hardware, errors."""
    shown = data.plans.groupby(["cluster", "num_gpus"], sort=False).head(PLANS_SHOWN_PER_SCALE)
    shown = shown.drop(columns=[c for c in PLAN_COLUMNS if c in shown.columns])  # in "plan"
    tables = [
        PageTable(key="scaling-table", caption="Scaling: best plan and naive DP",
                  frame=data.curves[data.curves["series"].isin([BEST_SERIES, NAIVE_SERIES])],
                  note="Every series is in scaling.csv."),
        PageTable(key="plan-table", caption="Plan comparison", frame=shown,
                  note=f"The {PLANS_SHOWN_PER_SCALE} fastest plans per scale; plan_table.csv "
                  f"holds all {len(data.plans):,}."),
        PageTable(key="hardware-table", caption="Hardware comparison", frame=data.hardware),
        PageTable(key="errors-table", caption="Errors", frame=data.errors),
    ]
    return tables


def write_scaling_report(results: ResultsInput, out_dir: str | Path, *, title: str,
                         cost_per_gpu_hour: float | Mapping[str, float] | None = None) -> Path:
    """Write the scaling report into ``out_dir`` (created if missing); return report.html's path.

    Files: throughput_per_gpu.png, scaling_efficiency.png, lost_time.png,
    lost_time_naive_dp.png (when the naive baseline ran), mfu.png, hardware.png (several
    clusters only), results.csv, scaling.csv, lost_time.csv, lost_time_naive_dp.csv,
    plan_table.csv, hardware.csv, errors.csv, report.html (self-contained).
    """
    out = Path(out_dir)
    data = report_data(results, cost_per_gpu_hour)
    figures = _figures(data)
    for figure in figures:
        write_bytes_atomic(out / f"{figure.key}.png", figure.png)
    for name, frame in (("results", data.results), ("scaling", data.curves),
                        ("lost_time", data.fractions),
                        ("lost_time_naive_dp", data.naive_fractions), ("plan_table", data.plans),
                        ("hardware", data.hardware), ("errors", data.errors)):
        write_csv_atomic(out / f"{name}.csv", frame)
    meta = (f"{len(data.results):,} result rows, {len(data.errors):,} failed; "
            f"clusters: {', '.join(sorted(data.results['cluster'].unique()))}")
    page = render_page(title=title, sentences=data.sentences, figures=figures,
                       tables=_tables(data), meta=meta)
    return write_text_atomic(out / "report.html", page)


def report_command(results: str | Path, out_dir: str | Path, *, title: str | None = None,
                   cost_per_gpu_hour: float | None = None) -> Path:
    """Write the scaling report of ``results`` (file or sweep directory) into ``out_dir``."""
    name = Path(results).stem if Path(results).is_file() else Path(results).name
    return write_scaling_report(results, out_dir, title=title or f"Scaling report: {name}",
                                cost_per_gpu_hour=cost_per_gpu_hour)
