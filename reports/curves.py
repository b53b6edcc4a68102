"""Figures of the single-purpose commands: goodput against checkpoint interval, bus bandwidth by size.

Each takes plain numbers (seconds, bytes, bytes/s) and ``ax=None`` and returns the Axes it drew
on (``reports.plots.new_axes``: an Agg figure, no pyplot). It neither computes the numbers
(``simulator.longrun``, ``simulator.network``) nor writes files.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from matplotlib.axes import Axes

from clustersim.reports.plots import new_axes


def plot_goodput_curve(intervals_s: Sequence[float], goodput_mean: Sequence[float],
                       goodput_ci_half: Sequence[float], band_s: tuple[float, float], *,
                       young_s: float, daly_s: float, ax: Axes | None = None) -> Axes:
    """Mean goodput (95% CI bars) against checkpoint interval, with the optimum band, Young and Daly."""
    ax = ax or new_axes(7, 4)
    minutes = np.asarray(intervals_s, dtype=float) / 60.0
    ax.errorbar(minutes, goodput_mean, yerr=goodput_ci_half, marker="o", capsize=3, label="simulated")
    ax.axvspan(band_s[0] / 60.0, band_s[1] / 60.0, alpha=0.15, label="optimum band (95%)")
    for value, label, style in ((young_s, "Young", "--"), (daly_s, "Daly", ":")):
        if math.isfinite(value):
            ax.axvline(value / 60.0, linestyle=style, color="k", label=f"{label} {value / 60:.1f} min")
    ax.set(xscale="log", xlabel="checkpoint interval (min)", ylabel="goodput", title="goodput vs interval")
    ax.legend(fontsize="small")
    return ax


def plot_bus_bandwidth(sizes: Sequence[int], bus_bandwidth: Sequence[float], title: str,
                       ax: Axes | None = None) -> Axes:
    """Bus bandwidth (GB/s) against message size (bytes, log 2 axis)."""
    ax = ax or new_axes(7, 4)
    ax.semilogx(sizes, [b / 1e9 for b in bus_bandwidth], marker="o", base=2)
    ax.set(xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title=title)
    ax.grid(True, alpha=0.3)
    return ax
