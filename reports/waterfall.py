"""The compute-loss waterfall of one result: from peak FLOP/s down to the achieved MFU.

Reads one result: a flat sweep row (``t_*`` seconds and ``ideal_compute_s``,
docs/ARCHITECTURE.md) or ``Result.to_dict()`` (its ``breakdown_s`` mapping); ``mfu`` and ``hfu``
optional. In units of the step time, a step run at peak FLOP/s with nothing lost would take
``ideal_compute_s``: that is the 100 % bar. Each loss then removes its share of the step time,
and what remains is the ideal-compute share, i.e. MFU (ideal / step). When both ``mfu`` and
``hfu`` are given, the recompute share, ideal share x (hfu / mfu - 1), is split out of compute
inefficiency. Used by ``clustersim simulate --plot``. It does not simulate anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import PercentFormatter

from clustersim.reports.errors import ReportError
from clustersim.files import write_atomic
from clustersim.reports.plots import SEGMENT_COLORS, new_axes, png_bytes
from clustersim.reports.scaling import LOSS_CAUSES
from clustersim.reports.tables import BREAKDOWN_COLUMNS, LATER_BREAKDOWN_COLUMNS

RECOMPUTE_COLOR = "#e69138"


def flat_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` with a nested ``breakdown_s`` ({"compute": s, ...}, as ``Result.to_dict()``
    writes it) spread into the flat ``t_*`` columns of a sweep row."""
    nested = result.get("breakdown_s")
    flat = dict(result)
    if isinstance(nested, Mapping):
        flat.update({f"t_{k}": v for k, v in nested.items() if f"t_{k}" not in result})
    parts = result.get("compute_breakdown_s")
    if isinstance(parts, Mapping):
        flat.update({f"c_{k}": v for k, v in parts.items() if f"c_{k}" not in result})
    return flat


def waterfall_steps(result: Mapping[str, Any]) -> list[tuple[str, float, str]]:
    """(label, signed fraction of peak, colour) bars: 1.0, then each loss < 0, then achieved."""
    result = {**dict.fromkeys(LATER_BREAKDOWN_COLUMNS, 0.0), **flat_result(result)}
    missing = [c for c in (*BREAKDOWN_COLUMNS, "ideal_compute_s") if c not in result]
    if missing:
        raise ReportError(f"waterfall: result lacks {missing}; pass a result dict with the "
                          "breakdown columns of docs/ARCHITECTURE.md")
    seconds = {c: float(result[c]) for c in (*BREAKDOWN_COLUMNS, "ideal_compute_s")}
    step = sum(seconds[c] for c in BREAKDOWN_COLUMNS)
    if not step > 0 or not np.isfinite(step):
        raise ReportError(f"waterfall: breakdown t_* sums to {step} s; it must be a positive "
                          "step time")
    ideal = seconds["ideal_compute_s"] / step
    steps = [(f"peak (ideal step {seconds['ideal_compute_s']:.3g} s)", 1.0,
              SEGMENT_COLORS["ideal_compute"])]
    for cause in LOSS_CAUSES:
        share = _loss_seconds(cause.key, seconds) / step
        if cause.key == "compute_inefficiency" and _has_parts(result):
            steps += _compute_steps(result, seconds, step)
            continue
        if cause.key == "compute_inefficiency":
            recompute = min(max(_recompute_share(result, ideal), 0.0), share)
            if recompute > 0:
                steps.append(("recompute", -recompute, RECOMPUTE_COLOR))
                share -= recompute
        if share != 0.0:
            steps.append((cause.label, -share, SEGMENT_COLORS[cause.key]))
    steps.append((f"achieved MFU (step {step:.3g} s)", ideal, SEGMENT_COLORS["ideal_compute"]))
    return steps


COMPUTE_STEPS: tuple[tuple[str, str, str], ...] = (
    ("c_gemm_efficiency_loss", "GEMM efficiency loss", "#f2b134"),
    ("c_attention_kernel", "attention kernel (beyond its model FLOPs at peak)", "#f6d06f"),
    ("c_elementwise", "memory-bound element-wise", "#b58b1c"),
    ("c_recompute", "recompute", RECOMPUTE_COLOR),
    ("c_overhead", "launch/overhead", "#8c6d1f"),
)
"""Compute inefficiency split by where it goes (``c_*`` columns, ``Result.compute_breakdown``)."""


def _has_parts(result: Mapping[str, Any]) -> bool:
    return all(k in result and result[k] is not None and np.isfinite(float(result[k]))
               for k, _, _ in COMPUTE_STEPS) and "c_gemm_ideal" in result


def _compute_steps(result: Mapping[str, Any], seconds: Mapping[str, float], step: float) -> list[tuple[str, float, str]]:
    """Compute inefficiency (t_compute - ideal) as its parts; the attention bar is the attention
    kernel's time less the model FLOPs the GEMMs do not execute (mostly attention's, at peak), so
    the bars sum to the compute inefficiency exactly."""
    parts = {k: float(result[k]) for k, _, _ in COMPUTE_STEPS}
    parts["c_attention_kernel"] += float(result["c_gemm_ideal"]) - seconds["ideal_compute_s"]
    scale = seconds["t_compute"] / (float(result["c_gemm_ideal"]) + sum(float(result[k]) for k, _, _ in COMPUTE_STEPS))
    return [(label, -parts[k] * scale / step, color) for k, label, color in COMPUTE_STEPS if parts[k] != 0.0]


def _loss_seconds(key: str, seconds: Mapping[str, float]) -> float:
    """Seconds lost to one cause."""
    if key == "compute_inefficiency":
        return seconds["t_compute"] - seconds["ideal_compute_s"]
    return seconds[f"t_{key}"]


def _recompute_share(result: Mapping[str, Any], ideal: float) -> float:
    """Share of step time spent recomputing: ideal x (HFU / MFU - 1); 0 when unknown."""
    mfu, hfu = result.get("mfu"), result.get("hfu")
    if mfu is None or hfu is None:
        return 0.0
    try:
        mfu_f, hfu_f = float(mfu), float(hfu)
    except (TypeError, ValueError):
        return 0.0
    if not (np.isfinite(mfu_f) and np.isfinite(hfu_f)) or mfu_f <= 0:
        return 0.0
    return ideal * (hfu_f / mfu_f - 1.0)


def plot_waterfall(result: Mapping[str, Any], ax: Axes | None = None) -> Axes:
    """Waterfall bars: peak at 100 %, each loss stepping down, the achieved MFU last."""
    ax = ax if ax is not None else new_axes(width=8.5, height=4.4)
    steps = waterfall_steps(result)
    level = 0.0
    for i, (label, value, color) in enumerate(steps):
        first_or_last = i in (0, len(steps) - 1)
        bottom = 0.0 if first_or_last else level + value
        height = value if first_or_last else -value
        ax.bar(i, height, bottom=bottom, color=color, edgecolor="black", linewidth=0.4)
        ax.text(i, bottom + height + 0.01, f"{value:+.1%}" if not first_or_last
                else f"{value:.1%}", ha="center", va="bottom", fontsize=7)
        level = value if i == 0 else level + value
    ax.set_xticks(range(len(steps)), [s[0] for s in steps], rotation=30, ha="right",
                  fontsize=8)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share of peak compute")
    ax.set_title(_title(flat_result(result)))
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _title(result: Mapping[str, Any]) -> str:
    """"Where peak compute goes", naming the model, cluster and GPU count when given."""
    about = [str(result[k]) for k in ("model", "cluster") if result.get(k) is not None]
    if result.get("num_gpus") is not None:
        about.append(f"{int(result['num_gpus']):,} GPUs")
    return "Where peak compute goes" + (f": {', '.join(about)}" if about else " (one step)")


def write_waterfall(result: Mapping[str, Any], path: str | Path) -> Path:
    """Render ``plot_waterfall`` of ``result`` to a PNG at ``path`` (atomically)."""
    return write_atomic(Path(path), png_bytes(plot_waterfall(result)))
