"""The communication side of a profile fitted from microbenchmarks: collective laws, sync skew, TP calls.

Owns reading the collective sweep of ``calibrate measure`` (the ``collectives`` section of
``micro_w{N}.json``): the robust alpha-beta law of each collective kind in the nccl-tests
bus-bandwidth convention (``bus_factor``, ``alpha_beta``), the sync-skew microbenchmark as the
jitter model's cv (``skew_fit``), the TP-call figures and the wait they price
(``tp_call_figures``, ``blocking_call_wait``) and each framework's seconds per call
(``framework_overheads``). It fits no compute curve (``fit_compute``) and builds no profile (``fit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.profile import SYNC_JITTER_MAX
from clustersim.simulator.step import sync_wait_fraction

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
