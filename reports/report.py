"""The scaling-efficiency report: result rows in, PNG figures, CSV tables and one HTML page out.

Owns ``write_scaling_report``, the one entry point behind ``clustersim report RESULTS --out DIR``:
it loads and checks the rows, fills in costs, derives the curves, lost-time fractions, plan,
hardware and error tables and the summary, renders every figure once, and writes each file
atomically (temporary name, then rename). It adds no arithmetic of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from clustersim.files import write_atomic
from clustersim.reports.html import PageFigure, PageTable, render_page
from clustersim.reports.plots import (
    plot_hardware, plot_lost_time, plot_mfu, plot_scaling_efficiency, plot_throughput_per_gpu,
    png_bytes,
)
from clustersim.reports.scaling import has_intervals, lost_time_fractions, scaling_table
from clustersim.reports.header import default_title, scenario_header
from clustersim.reports.summary import summary_sentences, verdict_sentences
from clustersim.reports.tables import (
    BEST_SERIES, NAIVE_SERIES, PLAN_COLUMNS, ResultsInput, best_rows, compute_table, error_table,
    hardware_table, load_results, pareto_table, plan_table, records, series_rows, with_costs,
)
from clustersim.reports.waterfall import plot_waterfall

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
    """Rows that failed to simulate, with their plan and reason."""
    sentences: list[str]
    """The key findings in words."""
    verdict: list[str]
    """What scales, what does not, and why: first on the page."""
    header: dict[str, object]
    """What was simulated (``reports.header.scenario_header``)."""
    compute: pd.DataFrame
    """Best plan per scale: compute seconds by where they go."""
    pareto: pd.DataFrame
    """Per scale: plans not beaten on step time, memory and cost at once."""


def report_data(results: ResultsInput,
                cost_per_gpu_hour: float | Mapping[str, float] | None = None) -> ReportData:
    """Load, check and derive every table of the report (no files written)."""
    frame = with_costs(load_results(results), cost_per_gpu_hour)
    return ReportData(
        results=frame, curves=scaling_table(frame), fractions=lost_time_fractions(best_rows(frame)),
        naive_fractions=lost_time_fractions(series_rows(frame, NAIVE_SERIES)),
        plans=plan_table(frame), hardware=hardware_table(frame), errors=error_table(frame),
        sentences=summary_sentences(frame), verdict=verdict_sentences(frame), header=scenario_header(frame),
        compute=compute_table(frame), pareto=pareto_table(frame),
    )


def _figures(data: ReportData) -> list[PageFigure]:
    """Render every figure the data supports (hardware only when several clusters ran)."""
    figures = []
    if not data.curves.empty:
        figures += [
            PageFigure(key="throughput_per_gpu", caption="tokens/s per GPU against GPU count; "
                       "the dash-dot line is ideal linear scaling; " + (
                           "the band is the prediction interval from held-out residuals" if has_intervals(data.results)
                           else "no band: these results carry no prediction interval (held-out error by "
                                "regime: docs/VALIDATION.md)"),
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
                                  "GPU, $ per million tokens at each cluster's own price and kWh "
                                  "per million tokens on each cluster's own power model",
                                  png=png_bytes(plot_hardware(data.hardware))))
    for i, row in enumerate(_largest_best(data.results)):
        figures.append(PageFigure(key=f"waterfall_{i}", caption=f"Where peak compute goes for the best plan at "
                                  f"{int(row['num_gpus']):,} GPUs on {row['cluster']}: compute inefficiency split into "
                                  "GEMM efficiency, attention, element-wise, recompute and overhead",
                                  png=png_bytes(plot_waterfall(row))))
    return figures


def _largest_best(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The best row at the largest GPU count of each cluster."""
    best = best_rows(frame)
    if best.empty:
        return []
    return records(best.sort_values("num_gpus").drop_duplicates("cluster", keep="last").sort_values("cluster"))


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
        PageTable(key="compute-table", caption="Where compute goes (best plan, critical stage)", frame=data.compute,
                  note="Seconds of the critical stage's compute per step by part; they sum to compute (s)."),
        PageTable(key="pareto-table", caption="Pareto front: step time vs memory vs cost vs energy", frame=data.pareto,
                  note="Per scale, the simulated plans no other beats on step time, peak memory, $ per million "
                       "tokens and kWh per million tokens at once (each where the rows carry it; the searched "
                       "front at each scale and the naive DP plan)."),
        PageTable(key="hardware-table", caption="Hardware comparison", frame=data.hardware,
                  note="Each cluster's best plan: $ per million tokens at the cluster's own $/GPU-hour, kWh per "
                       "million tokens (facility energy at PUE 1: GPUs on the simulated timeline plus node "
                       "overhead) on the cluster's own power model."),
        PageTable(key="errors-table", caption="Failed points: plan and reason", frame=data.errors),
    ]
    return tables


def write_scaling_report(results: ResultsInput, out_dir: str | Path, *, title: str,
                         cost_per_gpu_hour: float | Mapping[str, float] | None = None) -> Path:
    """Write the scaling report into ``out_dir`` (created if missing); return report.html's path.

    Files: throughput_per_gpu.png, scaling_efficiency.png, lost_time.png,
    lost_time_naive_dp.png (when the naive baseline ran), mfu.png, hardware.png (several
    clusters only), waterfall_<i>.png (best plan at each cluster's largest scale), results.csv,
    scaling.csv, lost_time.csv, lost_time_naive_dp.csv, plan_table.csv, hardware.csv, errors.csv,
    compute.csv, pareto.csv, scenario.json, report.html (self-contained).
    """
    out = Path(out_dir)
    data = report_data(results, cost_per_gpu_hour)
    figures = _figures(data)
    for figure in figures:
        write_atomic(out / f"{figure.key}.png", figure.png)
    for name, frame in (("results", data.results), ("scaling", data.curves),
                        ("lost_time", data.fractions),
                        ("lost_time_naive_dp", data.naive_fractions), ("plan_table", data.plans),
                        ("hardware", data.hardware), ("errors", data.errors), ("compute", data.compute),
                        ("pareto", data.pareto)):
        write_atomic(out / f"{name}.csv", frame.to_csv(index=False))
    write_atomic(out / "scenario.json", json.dumps({"title": title, **data.header}, indent=2, default=str))
    meta = (f"{len(data.results):,} result rows, {len(data.errors):,} failed; memory in GiB (2^30 bytes); "
            "MFU with PaLM model FLOPs; every CSV is in this folder; scenario.json says what was simulated")
    page = render_page(title=title, sentences=data.sentences, figures=figures,
                       tables=_tables(data), meta=meta, header=data.header, verdict=data.verdict)
    return write_atomic(out / "report.html", page)


def report_command(results: str | Path, out_dir: str | Path, *, title: str | None = None,
                   cost_per_gpu_hour: float | Mapping[str, float] | None = None) -> Path:
    """Write the scaling report of ``results`` (file or sweep directory) into ``out_dir``."""
    return write_scaling_report(results, out_dir, title=title or default_title(load_results(results)),
                                cost_per_gpu_hour=cost_per_gpu_hour)
