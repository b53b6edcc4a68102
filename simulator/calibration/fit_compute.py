"""The compute side of a profile fitted from microbenchmarks: efficiency curves, memory, overheads.

Owns reading the compute suite of ``calibrate measure`` (the ``compute`` section of
``micro_w{N}.json``): the GEMM and attention efficiency points and their curves (binned medians in
log10 FLOP, with the curve's fit error), memory bandwidth and efficiency, per-op and per-backward
overheads and the eager host's seconds per layer. It fits no collective (``fit_comm``) and builds
no profile (``fit``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from clustersim.simulator.errors import CalibrationError

BIN_DECADES = 0.5
"""Width of a FLOP bin of the efficiency curves, in decades."""


def binned_curve(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Median efficiency per log10-FLOP bin, at the bin's median FLOP; clipped into (0, 1]."""
    if not points:
        raise CalibrationError("efficiency fit: no microbenchmark points; run calibrate measure first")
    logs = np.log10([p[0] for p in points])
    effs = np.array([p[1] for p in points])
    bins = np.floor(logs / BIN_DECADES)
    curve = []
    for b in np.unique(bins):
        sel = bins == b
        curve.append((float(10 ** np.median(logs[sel])), float(np.clip(np.median(effs[sel]), 1e-4, 1.0))))
    return curve


def curve_error(curve: Sequence[tuple[float, float]], points: Sequence[tuple[float, float]]) -> float:
    """Median |eff_curve / eff_point - 1| (interpolated in log10 FLOP, as the profile does)."""
    xs, ys = np.log10([c[0] for c in curve]), [c[1] for c in curve]
    pred = np.interp(np.log10([p[0] for p in points]), xs, ys)
    return float(np.median(np.abs(pred / np.array([p[1] for p in points]) - 1.0)))


def gemm_points(compute: Mapping[str, Any], peak: float) -> list[tuple[float, float]]:
    """(FLOP per call, fraction of ``peak``) of every measured GEMM (all three layouts)."""
    return [(g["flops"], g["flops"] / g["time_s"] / peak) for g in compute["gemm"]]


def attention_points(compute: Mapping[str, Any], peak: float, causal_factor: float) -> list[tuple[float, float]]:
    """Forward (F) and backward (2F) attention points; F = 4 b h s^2 d x ``causal_factor``."""
    pts = []
    for a in compute["attention"]:
        f = a["flops_fwd_full"] * causal_factor
        pts += [(f, f / a["fwd_s"] / peak), (2 * f, 2 * f / a["bwd_s"] / peak)]
    return sorted(pts)


def memory_fit(compute: Mapping[str, Any]) -> tuple[float, float, float]:
    """(peak bandwidth = best copy, efficiency = median of add/GELU/LayerNorm over it, fit error).

    On a GPU (``device`` cuda) only each kind's largest size counts: the smaller ones finish
    before the host has launched the next call (8-20 us a call on an H200, whatever the size),
    so their rate is the host's, which the eager host overhead prices (``kernels_async``)."""
    mem = compute["memory"]
    if is_async(compute):
        top = max(m["elements"] for m in mem)
        mem = [m for m in mem if m["elements"] == top] or mem
    peak = max(m["bandwidth"] for m in mem if m["kind"] == "copy")
    rates = np.array([m["bandwidth"] for m in mem if m["kind"] != "copy"])
    eff = float(np.clip(np.median(rates) / peak, 1e-4, 1.0))
    return peak, eff, float(np.median(np.abs(eff * peak / rates - 1.0)))


def is_async(compute: Mapping[str, Any]) -> bool:
    """Whether the compute microbenchmarks ran on a device the host only launches kernels on
    (``device`` cuda; folders without the key were measured on CPU ranks)."""
    return str(compute.get("device", "cpu")) != "cpu"


def overhead_fit(compute: Mapping[str, Any]) -> tuple[float, float]:
    """(seconds per op: one tiny linear's fwd+bwd over its 3 GEMM calls, seconds per backward call)."""
    o = compute["overhead"]
    return float(o["per_linear_fwd_bwd_s"]) / 3.0, float(o["backward_call_s"])


def host_fit(compute: Mapping[str, Any]) -> dict[str, float]:
    """Seconds of eager host work per layer (``CalibrationProfile.eager_layer_overhead``) from the
    eager-host microbenchmark (``microbench.host_entry``: the GPT's module tree at negligible
    arithmetic, at two layer counts): the slope over layers of the forward (``fwd``), of the Adam
    step alone (``optimizer``) and of the whole step less those two (``bwd``), each clipped at 0.
    Empty without the entry (folders measured before it)."""
    h = compute.get("host")
    if not h:
        return {}
    span = float(h["layers_high"]) - float(h["layers_low"])
    if span <= 0:
        raise CalibrationError(f"eager-host microbenchmark: layers_high {h['layers_high']} <= layers_low "
                               f"{h['layers_low']}; re-run calibrate measure")

    def slope(key: str) -> float:
        return (float(h[f"{key}_high_s"]) - float(h[f"{key}_low_s"])) / span

    fwd, opt = max(slope("fwd"), 0.0), max(slope("opt"), 0.0)
    return {"fwd": fwd, "bwd": max(slope("step") - fwd - opt, 0.0), "optimizer": opt}
