"""The report's figures: scaling curves, lost time by cause, MFU, hardware, one step's waterfall.

Every plot function takes the table it draws (from ``reports.scaling`` / ``reports.tables``) and
``ax=None``; with no Axes it makes its own ``matplotlib.figure.Figure`` (Agg canvas, no pyplot and
so no global figure state) and returns the Axes it drew on. ``png_bytes`` renders a figure.
It does not compute the numbers it draws, nor write files (``reports.report``).
"""

from __future__ import annotations

import io
from typing import Any, Mapping

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, PercentFormatter

from clustersim.reports.scaling import BAND_COLUMNS, IDEAL, SEGMENTS, has_intervals
from clustersim.reports.tables import BEST_SERIES, NAIVE_SERIES

SEGMENT_COLORS: Mapping[str, str] = {
    "ideal_compute": "#4c9a4c", "compute_inefficiency": "#f2b134", "exposed_tp": "#3b6fb6",
    "exposed_cp": "#6fa8dc", "exposed_ep": "#8e7cc3", "exposed_pp": "#c27ba0",
    "exposed_dp": "#d9534f", "exposed_offload": "#b45f06", "bubble": "#999999", "optimizer": "#7f6000", "other": "#d0d0d0",
}
"""Colour of each lost-time segment, shared by the bars and the waterfall."""

MAX_LABELLED_SERIES = 8
"""Beyond this many other plan series, the extra curves are drawn grey without legend entries."""


def new_axes(width: float = 7.5, height: float = 4.4) -> Axes:
    """A fresh Axes on its own Agg-backed Figure (inches)."""
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig.subplots()


def png_bytes(ax: Axes) -> bytes:
    """The PNG image of the figure that holds ``ax``."""
    buffer = io.BytesIO()
    figure = ax.get_figure(root=True)
    if figure is None:
        raise ValueError("png_bytes: the Axes is on no Figure; draw it with new_axes()")
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _style(series: str, cluster_index: int, n_clusters: int,
           other_index: int) -> dict[str, Any]:
    """Line style of one curve: best solid, naive DP dashed, other plans thin and dotted.

    Other plans get legend entries only with one cluster and at most MAX_LABELLED_SERIES of them.
    """
    color = f"C{cluster_index % 10}" if n_clusters > 1 else None
    match series:
        case "best":
            return {"color": color or "C0", "lw": 2.4, "marker": "o", "ls": "-"}
        case "naive_dp":
            return {"color": color or "C3", "lw": 2.0, "marker": "s", "ls": "--"}
        case _:
            crowded = other_index >= MAX_LABELLED_SERIES
            return {"color": "#bbbbbb" if crowded else (color or f"C{(other_index + 4) % 10}"),
                    "lw": 1.0, "marker": ".", "ls": ":", "alpha": 0.8,
                    "hidden": crowded or n_clusters > 1}


def _draw_curves(curves: pd.DataFrame, column: str, ax: Axes) -> None:
    """One line per (cluster, series) of ``column`` against GPU count."""
    clusters = sorted(curves["cluster"].unique())
    others = sorted(set(curves["series"]) - {BEST_SERIES, NAIVE_SERIES})
    order = [s for s in (BEST_SERIES, NAIVE_SERIES) if s in set(curves["series"])] + others
    unlabelled = False
    for ci, cluster in enumerate(clusters):
        for series in order:
            rows = curves[(curves["cluster"] == cluster) & (curves["series"] == series)]
            if rows.empty:
                continue
            index = others.index(series) if series in others else 0
            style = _style(series, ci, len(clusters), index)
            hidden = bool(style.pop("hidden", False))
            unlabelled |= hidden
            label = series if len(clusters) == 1 else f"{series} @ {cluster}"
            ax.plot(rows["num_gpus"], rows[column], label=None if hidden else label, **style)
    if unlabelled:
        ax.plot([], [], color="#888888", lw=1.0, ls=":", marker=".", label="other plans")
    _gpu_axis(ax, sorted(set(curves["num_gpus"].astype(int))))


def _legend(ax: Axes) -> None:
    """The legend outside the plot, to the right, so that it never hides a curve."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _gpu_axis(ax: Axes, counts: list[int]) -> None:
    """Log-2 GPU-count axis ticked at the counts that were run."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{int(round(x)):,}"))
    ax.set_xlabel("GPUs")
    ax.grid(True, alpha=0.3)


def plot_throughput_per_gpu(curves: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """tokens/s per GPU against GPU count; ideal linear scaling is the best plan's first value."""
    ax = ax if ax is not None else new_axes()
    _draw_curves(curves, "tokens_per_s_per_gpu", ax)
    best = curves[curves["series"] == BEST_SERIES]
    if has_intervals(curves):
        for _cluster, rows in best.groupby("cluster", sort=True):
            ax.fill_between(rows["num_gpus"], rows[BAND_COLUMNS[0]], rows[BAND_COLUMNS[1]], alpha=0.2,
                            label="prediction interval (best)")
    for i, (_cluster, rows) in enumerate(best.groupby("cluster", sort=True)):
        ax.axhline(float(rows["tokens_per_s_per_gpu"].iloc[0]), color="k", lw=1, ls="-.",
                   alpha=0.6, label="ideal linear scaling" if i == 0 else None)
    ax.set_ylabel("tokens/s per GPU")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput per GPU")
    _legend(ax)
    return ax


def plot_scaling_efficiency(curves: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Scaling efficiency against GPU count, with ideal linear scaling at 1.0."""
    ax = ax if ax is not None else new_axes()
    _draw_curves(curves, "scaling_efficiency", ax)
    ax.axhline(1.0, color="k", lw=1, ls="-.", alpha=0.6, label="ideal linear scaling")
    ax.set_ylabel("scaling efficiency (vs smallest scale)")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, max(1.1, float(curves["scaling_efficiency"].max()) * 1.05))
    ax.set_title("Scaling efficiency")
    _legend(ax)
    return ax


def plot_mfu(curves: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Model FLOPs utilisation against GPU count."""
    ax = ax if ax is not None else new_axes()
    _draw_curves(curves, "mfu", ax)
    ax.set_ylabel("MFU (model FLOPs / peak)")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, max(0.1, float(curves["mfu"].max()) * 1.15))
    ax.set_title("Model FLOPs utilisation")
    _legend(ax)
    return ax


def plot_lost_time(fractions: pd.DataFrame, ax: Axes | None = None, *,
                   subject: str = "best plan") -> Axes:
    """Stacked bars per scale of the step-time fraction by cause, ideal compute at the bottom."""
    ax = ax if ax is not None else new_axes()
    several = fractions["cluster"].nunique() > 1
    labels = [f"{c} {int(n):,}" if several else f"{int(n):,}"
              for c, n in zip(fractions["cluster"], fractions["num_gpus"])]
    positions = list(range(len(fractions)))
    bottom = [0.0] * len(fractions)
    for cause in SEGMENTS:
        values = fractions[cause.key].astype(float).tolist()
        if cause is not IDEAL and max(values, default=0.0) <= 0.0:
            continue
        ax.bar(positions, values, bottom=bottom, color=SEGMENT_COLORS[cause.key],
               label=cause.label, edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(positions, labels, rotation=35 if several or len(labels) > 8 else 0,
                  ha="right" if several or len(labels) > 8 else "center", fontsize=8)
    ax.set_xlabel(f"GPUs ({subject} at each scale)")
    ax.set_ylabel("fraction of step time")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, 1.0)
    ax.set_title(f"Where the step time goes: {subject}")
    _legend(ax)
    return ax


def plot_hardware(table: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Per cluster, side by side: tokens/s per GPU, $ per million tokens (when priced) and kWh per
    million tokens (when the rows carry energy); panels with their own axes, never one dual axis.
    Returns the throughput Axes."""
    energy = "kwh_per_million_tokens" in table.columns and bool(table["kwh_per_million_tokens"].notna().any())
    if ax is None:
        fig = Figure(figsize=(13.0 if energy else 9.0, 3.8), dpi=110, layout="constrained")
        FigureCanvasAgg(fig)
        ax, *others = fig.subplots(1, 3 if energy else 2)
    else:
        others = []
    names = [f"{c}\n{int(n):,} GPUs" for c, n in zip(table["cluster"], table["num_gpus"])]
    positions = list(range(len(table)))
    ax.barh(positions, table["tokens_per_s_per_gpu"].astype(float), color="C0")
    ax.set_yticks(positions, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s per GPU")
    ax.set_title("Throughput per GPU (best plan)")
    panels = [("cost_per_million_tokens", "$ per million tokens", "Cost per token (best plan)",
               "no $/GPU-hour given", "C1"),
              ("kwh_per_million_tokens", "kWh per million tokens (PUE 1)", "Energy per token (best plan)",
               "no energy in the rows", "C2")]
    for panel_ax, (column, xlabel, title, missing, color) in zip(others, panels):
        _bar_panel(panel_ax, table, positions, names, column, xlabel, title, missing, color)
    return ax


def _bar_panel(ax: Axes, table: pd.DataFrame, positions: list[int], names: list[str], column: str,
               xlabel: str, title: str, missing: str, color: str) -> None:
    """One horizontal bar per cluster of ``column``, or a note when the column is unknown."""
    values = table[column].astype(float) if column in table.columns else pd.Series(float("nan"), index=table.index)
    if values.notna().any():
        ax.barh(positions, values.fillna(0.0), color=color)
        ax.set_xlabel(xlabel)
    else:
        ax.text(0.5, 0.5, missing, ha="center", va="center", transform=ax.transAxes)
    ax.set_yticks(positions, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title)
