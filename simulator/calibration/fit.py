"""Fitting a calibration profile from microbenchmarks (never from the step times it will predict).

Owns turning the measured microbenchmarks of ``calibrate measure`` (``micro_w{N}.json``) into a
``CalibrationProfile``: the GEMM and attention efficiency curves (binned medians in log10 FLOP),
memory efficiency, per-op and per-step overheads, optimizer efficiency, and per-collective
latency and bandwidth (a robust alpha-beta fit); plus the measured machine figures (peak FLOP/s,
memory and loopback bandwidth) the "this machine" cluster is built from. Each fitted quantity
comes with its fit quality. This module assembles the profile and its per-pass intervals; the
compute curves are fitted in ``fit_compute``, the collective laws, sync skew and TP calls in
``fit_comm``. It does not run torch (``clustersim.simulator.calibration.torch_backend``) nor simulate.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from clustersim.simulator.calibration.fit_comm import (
    AlphaBeta, alpha_beta, blocking_call_wait, framework_overhead, framework_overheads, skew_fit,
    tp_call_figures,
)
from clustersim.simulator.calibration.fit_compute import (
    attention_points, binned_curve, curve_error, gemm_points, host_fit, is_async, memory_fit, overhead_fit,
)
from clustersim.simulator.calibration.torch_backend import micro_passes
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.step import ADAM_BYTES_PER_PARAM


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
