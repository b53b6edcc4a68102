"""Fitting a calibration profile from microbenchmarks (never from the step times it will predict).

Owns turning the measured microbenchmarks of ``calibrate measure`` (``micro_w{N}.json``) into a
``CalibrationProfile``: the GEMM and attention efficiency curves (binned medians in log10 FLOP),
memory efficiency, per-op and per-step overheads, optimizer efficiency, and per-collective
latency and bandwidth (a robust alpha-beta fit); plus the measured machine figures (peak FLOP/s,
memory and loopback bandwidth) the "this machine" cluster is built from. Each fitted quantity
comes with its fit quality. It does not run torch (``clustersim.simulator.calibration.torch_backend``) nor simulate.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from clustersim.simulator.profile import SYNC_JITTER_MAX, CalibrationProfile
from clustersim.simulator.step import ADAM_BYTES_PER_PARAM, sync_wait_fraction
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.calibration.torch_backend import micro_passes

BIN_DECADES = 0.5
"""Width of a FLOP bin of the efficiency curves, in decades."""



@dataclass(frozen=True, kw_only=True)
class AlphaBeta:
    """t(size) = alpha + size / bandwidth for one collective kind (size in nccl-tests convention)."""

    kind: str
    """Collective kind."""
    alpha: float
    """Fixed seconds per call."""
    bus_bandwidth: float
    """Bytes/s of the bus-bandwidth convention (ring factors divided out)."""
    median_abs_error: float
    """Median |t_fit / t_measured - 1| over the measured sizes."""


@dataclass(frozen=True, kw_only=True)
class FitReport:
    """A fitted profile and how well each part fits its own microbenchmarks."""

    profile: CalibrationProfile
    """The profile (with ``machine`` figures filled)."""
    quality: Mapping[str, float]
    """Median |relative error| of each fitted curve or law against its microbenchmarks."""
    collectives: tuple[AlphaBeta, ...]
    """Per-kind alpha-beta fits."""
    passes: tuple[CalibrationProfile, ...] = ()
    """The same fit on each pass of the microbenchmarks alone (pass i of the compute suite with
    pass i of the collective sweep): the predictions' interval (``torch_backend.check``)."""
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """(low, high) of each compute field over the passes' fits (``field_intervals``)."""
    probe: Mapping[str, float] = field(default_factory=dict)
    """The drift probe measured with the microbenchmarks (``probe_reference``): the host's state
    the profile was fitted under; empty for folders measured without one."""
    operands: str = "hot"
    """The operands of the compute microbenchmarks it was fitted on (``micro_passes.with_operands``)."""


def bus_factor(kind: str, n: int) -> float:
    """Bytes on the busiest link per byte of ``size`` (nccl-tests busbw factors)."""
    match kind:
        case "all_reduce":
            return 2.0 * (n - 1) / n
        case "all_gather" | "reduce_scatter" | "all_to_all":
            return (n - 1) / n
        case "send_recv" | "broadcast":
            return 1.0
    raise CalibrationError(f"collective kind {kind!r} unknown; use all_reduce, all_gather, "
                           "reduce_scatter, all_to_all or send_recv")


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


def alpha_beta(kind: str, entries: Sequence[Mapping[str, Any]]) -> AlphaBeta:
    """Theil-Sen alpha-beta fit: slope = median of pairwise slopes, alpha = median intercept.

    Exact on noiseless data and robust to the scheduling outliers of a shared host.
    """
    pts = sorted((float(e["size"]), float(e["time_s"])) for e in entries if e["kind"] == kind)
    if len(pts) < 3:
        raise CalibrationError(f"collective {kind}: {len(pts)} sizes measured; need >= 3 for an alpha-beta fit")
    n = int(next(e["world_size"] for e in entries if e["kind"] == kind))
    s, t = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    i, j = np.triu_indices(len(pts), k=1)
    slope = max(float(np.median((t[j] - t[i]) / (s[j] - s[i]))), 1e-15)
    alpha = max(float(np.median(t - slope * s)), 0.0)
    err = float(np.median(np.abs((alpha + slope * s) / t - 1.0)))
    return AlphaBeta(kind=kind, alpha=alpha, bus_bandwidth=bus_factor(kind, n) / slope, median_abs_error=err)


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


def load_micro(folder: str | os.PathLike[str], world_size: int | None = None) -> tuple[int, dict[str, Any]]:
    """(world size, microbenchmarks) of a measure folder: ``world_size`` or the largest measured."""
    files = {n: Path(folder) / f"micro_w{n}.json" for n in measured_worlds(folder)}
    if not files:
        raise CalibrationError(f"folder {folder} has no micro_w*.json; run `clustersim calibrate measure --out {folder}`")
    n = world_size or max(files)
    if n not in files:
        raise CalibrationError(f"--world-size {n} was not measured in {folder}; measured: {sorted(files)}")
    return n, json.loads(files[n].read_text())


def fit_profile(folder: str | os.PathLike[str], *, world_size: int | None = None, name: str = "this-machine",
                causal_factor: float = 0.5, operands: str | None = None) -> FitReport:
    """Fit a profile from the microbenchmarks in ``folder`` measured on ``world_size`` ranks
    (each entry's median over its passes), with each pass's own fit (``passes``: pass i of the
    compute microbenchmarks with pass i of the collective sweep). ``operands``: the GEMM,
    attention and memory entries measured on hot or cold operands (``micro_passes.with_operands``;
    None: ``micro_passes.OPERANDS_DEFAULT`` where recorded; folders measured before
    ``--micro-operands`` have hot ones only)."""
    n, micro = load_micro(folder, world_size)
    operands = micro_passes.chosen_operands(micro["compute"], operands)
    micro = {**micro, "compute": micro_passes.with_operands(micro["compute"], operands)}
    host = _host(folder)
    central = fit_micro(micro, n, host, name=name, source=str(folder), causal_factor=causal_factor)
    computes = micro_passes.of(micro["compute"])
    sweeps = micro_passes.of(micro["collectives"], len(computes)) if "collectives" in micro else [None] * len(computes)
    each = tuple(fit_micro({**micro, "compute": c, **({"collectives": s} if s else {})}, n, host, name=name,
                           source=str(folder), causal_factor=causal_factor).profile
                 for c, s in zip(computes, sweeps))
    return replace(central, passes=each, intervals=field_intervals(central.profile, each), probe=probe_reference(micro),
                   operands=operands)


def probe_reference(micro: Mapping[str, Any]) -> dict[str, float]:
    """The drift probe the profile's figures were measured under: ``gemm_s``, the median of the
    samples taken between the compute suite's GEMM shapes (they set the compute fields);
    ``allreduce_s``, the median of those taken between the collective sweep's calls (they set the
    per-call latencies), 0 on one rank; empty when the folder has no probe (measured before the
    probe existed)."""
    compute = micro.get("compute", {}).get("probe")
    sweep = micro.get("collectives", {}).get("probe")
    if not compute:
        return {}
    latency = float((sweep or compute).get("allreduce_s", 0.0))
    return {"gemm_s": float(compute["gemm_s"]), "allreduce_s": latency}


def fit_micro(micro: Mapping[str, Any], n: int, host: Mapping[str, float], *, name: str, source: str,
              causal_factor: float = 0.5) -> FitReport:
    """Fit a profile from one ``micro_w{n}.json`` document (its ``compute`` section as given)."""
    compute = micro["compute"]
    peak = max(g["flops"] / g["time_s"] for g in compute["gemm"])
    gp, ap = gemm_points(compute, peak), attention_points(compute, peak, causal_factor)
    gcurve, acurve = binned_curve(gp), binned_curve(ap)
    mem_bw, mem_eff, mem_err = memory_fit(compute)
    per_op, per_backward = overhead_fit(compute)
    if is_async(compute):
        # the tiny linear's time is the host's (its kernels finish before the next launch): on a
        # GPU that cost is the eager host overhead, which overlaps the kernels (``kernels_async``);
        # the device's own per-kernel gap is not measured and left at 0
        per_op = 0.0
    opt = compute["optimizer"]
    opt_eff = float(np.clip(ADAM_BYTES_PER_PARAM * opt["params"] / (opt["time_s"] * mem_bw), 1e-4, 1.0))
    links = tuple(alpha_beta(k, micro["collectives"]["entries"]) for k in _kinds(micro)) if n > 1 else ()
    skew = micro.get("collectives", {}).get("skew") if n > 1 else None
    jitter = skew_fit(skew) if skew else None
    machine = _machine(compute, peak, mem_bw, links, n, host)
    if jitter:
        machine |= {"sync_skew": jitter.fraction, "sync_wait": jitter.wait}
    tp_call = tp_call_figures(micro.get("collectives", {}).get("tp_call") if n > 1 else None)
    machine |= tp_call
    profile = CalibrationProfile(
        name=name, source=f"clustersim calibrate fit {source} (microbenchmarks on {n} rank(s))",
        gemm_efficiency=gcurve, attention_efficiency=acurve, memory_efficiency=mem_eff,
        kernel_overhead=per_op, step_overhead=per_backward, optimizer_efficiency=opt_eff,
        eager_layer_overhead=host_fit(compute), kernels_async=is_async(compute), blocking_call_wait=blocking_call_wait(tp_call),
        **_link_fields(links, micro), machine=machine, sync_jitter_cv=jitter.cv if jitter else 0.0,
    )
    quality = {"gemm_efficiency": curve_error(gcurve, gp), "attention_efficiency": curve_error(acurve, ap),
               "memory_efficiency": mem_err, **{f"collective.{ab.kind}": ab.median_abs_error for ab in links},
               **({"sync_jitter_cv": jitter.error} if jitter else {})}
    return FitReport(profile=profile, quality=quality, collectives=links)


@dataclass(frozen=True, kw_only=True)
class SkewFit:
    """The sync-skew microbenchmark (``microbench_comm.skew_entry``) read as the jitter model's cv."""

    fraction: float
    """Measured E[slowest rank's chunk] / E[one rank's chunk] - 1 over the iterations (>= 0)."""
    wait: float
    """Median seconds from a rank's chunk end to its collective's end, less the collective alone."""
    cv: float
    """The ``sync_jitter_cv`` whose expected wait for the slowest of the ranks is ``fraction``
    (``step.sync_wait_fraction``), clipped to [0, ``SYNC_JITTER_MAX``]."""
    error: float
    """|wait fraction at ``cv`` / ``fraction`` - 1|: 0 unless the clip bit (0 when nothing was measured)."""


def skew_fit(entry: Mapping[str, Any]) -> SkewFit:
    """The measured skew of a ``skew_entry`` and the cv that prices it (bisection, 60 halvings)."""
    chunks, totals = np.asarray(entry["chunk_s"], dtype=float), np.asarray(entry["total_s"], dtype=float)
    if chunks.ndim != 2 or chunks.shape != totals.shape or chunks.shape[0] < 2 or chunks.size == 0:
        raise CalibrationError(f"sync-skew microbenchmark: chunk_s {chunks.shape} and total_s {totals.shape} must be "
                               "ranks (>= 2) x iterations; re-run calibrate measure")
    n = chunks.shape[0]
    fraction = max(float(chunks.max(axis=0).mean() / chunks.mean() - 1.0), 0.0)
    wait = max(float(np.median(totals - chunks) - np.median(entry["allreduce_s"])), 0.0)
    lo, hi = 0.0, SYNC_JITTER_MAX
    if fraction == 0.0 or sync_wait_fraction(n, hi) <= fraction:
        lo = hi = 0.0 if fraction == 0.0 else hi
    for _ in range(60 if lo < hi else 0):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if sync_wait_fraction(n, mid) < fraction else (lo, mid)
    cv = 0.5 * (lo + hi)
    error = abs(sync_wait_fraction(n, cv) / fraction - 1.0) if fraction > 0 else 0.0
    return SkewFit(fraction=fraction, wait=wait, cv=cv, error=error)


TP_CALL_FIGURES: tuple[str, ...] = ("b2b", "after", "overlap")
"""The situations of the TP-call microbenchmark recorded as ``machine.tp_call_<situation>``."""


def tp_call_figures(entry: Mapping[str, Any] | None) -> dict[str, float]:
    """The TP-call microbenchmark (``microbench_comm.tp_call_entry``) as measured machine figures:
    seconds per call of the TP message back to back, after a GEMM chunk and overlapped with one
    (``machine.tp_call_b2b``, ``tp_call_after``, ``tp_call_overlap``) and its size in bytes
    (``tp_call_bytes``); empty without the entry. Priced through ``blocking_call_wait``."""
    if not entry:
        return {}
    bad = [k for k in TP_CALL_FIGURES if not float(entry.get(f"{k}_s", -1.0)) >= 0]
    if bad or float(entry.get("size", 0.0)) <= 0:
        raise CalibrationError(f"TP-call microbenchmark: {bad[0] + '_s' if bad else 'size'} missing or negative in "
                               f"{sorted(entry)}; re-run calibrate measure")
    return {"tp_call_bytes": float(entry["size"]), **{f"tp_call_{k}": float(entry[f"{k}_s"]) for k in TP_CALL_FIGURES}}


def blocking_call_wait(figures: Mapping[str, float]) -> float:
    """``CalibrationProfile.blocking_call_wait``: seconds a call a rank blocks on right after
    compute costs beyond the same call back to back (measured on the TP message's all-reduce), ``tp_call_after - tp_call_b2b`` (``tp_call_figures``; both
    timed in the same interleaved samples, slowest rank, so the host's drift cancels), clipped
    at 0; 0 without the TP-call microbenchmark (one rank, folders measured before it). Medians,
    as every microbenchmark: the call after compute is bimodal on this host (fast 0.4-1.0 ms or
    slow 3-5 ms, ``microbench_comm.TP_CALL_SAMPLES``); the mean would price 0.1-1.6 ms where the median
    prices 1.0-2.0 ms in the six campaigns of /work/data/tb_final."""
    if "tp_call_after" not in figures:
        return 0.0
    return max(figures["tp_call_after"] - figures["tp_call_b2b"], 0.0)


def interval_fields(profile: CalibrationProfile) -> dict[str, float]:
    """The fields a pass moves, by name: the machine's measured rates, the scalar efficiencies and
    overheads, each point of the GEMM and attention curves (``gemm_efficiency@1e+07``) and each
    collective law (``collective_laws.all_reduce.alpha``, ``.bus_bandwidth``)."""
    out = {"machine.peak_flops": profile.machine["peak_flops"],
           "machine.memory_bandwidth": profile.machine["memory_bandwidth"],
           "memory_efficiency": profile.memory_efficiency, "optimizer_efficiency": profile.optimizer_efficiency,
           "kernel_overhead": profile.kernel_overhead, "step_overhead": profile.step_overhead,
           **{f"eager_layer_overhead.{k}": v for k, v in profile.eager_layer_overhead.items()}}
    for key, curve in (("gemm_efficiency", profile.gemm_efficiency), ("attention_efficiency", profile.attention_efficiency)):
        out |= {f"{key}@{x:.0e}": e for x, e in curve}
    for kind, (alpha, bus) in profile.collective_laws.items():
        out |= {f"collective_laws.{kind}.alpha": alpha, f"collective_laws.{kind}.bus_bandwidth": bus}
    return out


def field_intervals(central: CalibrationProfile, each: Sequence[CalibrationProfile]) -> dict[str, tuple[float, float]]:
    """(low, high) of every ``interval_fields`` field: the range over the passes' fits and the
    median fit (a curve point no pass shares is its own range). With P passes the range covers the
    median of the passes' distribution with probability 1 - 2 / 2^P (75 % for 3)."""
    mine = interval_fields(central)
    theirs = [interval_fields(p) for p in each]
    return {k: (min([v, *(t[k] for t in theirs if k in t)]), max([v, *(t[k] for t in theirs if k in t)]))
            for k, v in mine.items()}


def measured_worlds(folder: str | os.PathLike[str]) -> list[int]:
    """World sizes whose microbenchmarks ``folder`` holds."""
    return sorted(int(p.stem.split("_w")[1]) for p in Path(folder).glob("micro_w*.json"))


def fit_profiles(folder: str | os.PathLike[str], **kwargs: Any) -> dict[int, FitReport]:
    """One fit per measured world size (compute contention differs with the ranks sharing cores)."""
    return {n: fit_profile(folder, world_size=n, **kwargs) for n in measured_worlds(folder)}


def _host(folder: str | os.PathLike[str]) -> dict[str, float]:
    """Host figures recorded by ``calibrate measure`` (cores, memory bytes), or this host's."""
    meta = Path(folder) / "meta.json"
    host = json.loads(meta.read_text()).get("host", {}) if meta.exists() else {}
    return {"cores": float(host.get("cores", os.cpu_count() or 1)), "memory_bytes": float(host.get("memory_bytes", 0))}


def _kinds(micro: Mapping[str, Any]) -> list[str]:
    return sorted({e["kind"] for e in micro["collectives"]["entries"]})


def framework_overheads(micro: Mapping[str, Any]) -> dict[str, float]:
    """Seconds per collective call as each framework (DDP, FSDP2, DTensor TP and TP+SP) issues them.

    Measured on a GPT so small that its parallel step is all overhead: (parallel - plain) time
    over the calls torch makes (``microbench_comm.framework_calls``); includes the transport's alpha.
    """
    entries = micro.get("collectives", {}).get("framework", [])
    return {str(e["variant"]): float(e["per_call_s"]) for e in entries}


def framework_overhead(micro: Mapping[str, Any]) -> float | None:
    """Median seconds per collective call over the frameworks measured, or None."""
    per = framework_overheads(micro)
    return float(np.median(list(per.values()))) if per else None


def _link_fields(links: Sequence[AlphaBeta], micro: Mapping[str, Any]) -> dict[str, Any]:
    """Collective overhead (per call as the frameworks issue it, else the raw alpha), p2p
    overhead (send/recv alpha), each kind's measured law and each framework's per-call cost, a
    loopback efficiency of 1 (its bandwidth is measured) and no pipeline fill: the alpha-beta
    law of each kind was fitted on the whole sweep, so no ramp is left to add."""
    if not links:
        return {}
    coll = [ab.alpha for ab in links if ab.kind != "send_recv"] or [links[0].alpha]
    p2p = [ab.alpha for ab in links if ab.kind == "send_recv"] or coll
    framework = framework_overhead(micro)
    per_call = framework if framework is not None else float(np.median(coll))
    return {"collective_overhead": per_call, "p2p_overhead": float(np.median(p2p)),
            "collective_laws": {ab.kind: (ab.alpha, ab.bus_bandwidth) for ab in links},
            "framework_overhead": framework_overheads(micro), "pipeline_fill_bytes": 0.0,
            "link_efficiency": {**CalibrationProfile().link_efficiency, "loopback": 1.0},
            "link_latency": {"loopback": 1e-7}}


def _machine(compute: Mapping[str, Any], peak: float, mem_bw: float, links: Sequence[AlphaBeta],
             n: int, host: Mapping[str, float]) -> dict[str, float]:
    """The measured figures of the machine (see ``CalibrationProfile.machine``)."""
    fig = {"peak_flops": peak, "memory_bandwidth": mem_bw, "ranks": float(n),
           "threads_per_rank": float(compute.get("threads_per_rank", 1)),
           "cores": float(host.get("cores", 1)), "memory_capacity": float(host.get("memory_bytes", 0)) / n}
    if links:
        fig["link_bandwidth"] = float(np.median([ab.bus_bandwidth for ab in links]))
        fig["link_latency"] = 1e-7
    return fig
