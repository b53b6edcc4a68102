"""Watching a run against its prediction: level, drift, periodic spikes, tail, and the likely cause.

Owns the detector of ``clustersim watch``: given the predicted step time with its interval
(measured / predicted multipliers from ``fit_logs``) and the exposed-communication share of the
prediction, it reads the logged records (``runlog_records.LogStep``) and reports, as early as the rules
allow:

- **level**: the rolling median of the last ``window`` steady records against the prediction:
  above ``predicted x (1 + threshold)`` (threshold default: the interval's upper edge) is "slower
  than predicted by X %". A slowdown of every step from step N is flagged once more than half of
  the window is slow: at the ``window // 2 + 1``-th slow record (5 records for the default 8).
- **drift**: a straight line fits the ratios better than one level shift, and its rise over the
  steady records is more than ``drift_min``.
- **spikes**: records above ``spike_factor`` x the steady median; periodic when one gap between
  them covers at least two thirds of the gaps; attributed to checkpoints or evaluation when they
  fall on the marked or configured steps, else "GC / data loader / logging".
- **tail**: p99/p50 of the recent half against the first half (spikes explained above excluded).

The cause of a slowdown, the first that applies:

- **a slow rank or node**, when the log carries per-rank timings (``ranks.SlowRank``: Megatron's
  all-ranks timers or its StragglerDetector lines): which one, by how much;
- **stragglers**, when the tail grew with the slowdown;
- **growth with scale**, when runs of the same job at other scales are given: each scale i has a
  measured / predicted ratio r_i and a predicted exposed-communication share c_i; if compute runs
  k times and exposed communication f times the prediction, r_i = (1 - c_i) k + c_i f =
  k + c_i (f - k), a line in c_i, so a least-squares fit over the scales gives k (intercept) and
  f (intercept + slope): a slowdown that grows with the communication share is the network's
  (f well above k), one that does not is compute's (k);
- otherwise one scale: the share c says how much slower communication would have to be to
  explain a slowdown X: (1 + X/c) times; up to ``comm_plausible`` times is called a network
  bottleneck, beyond it compute (clocks, kernels, a slow node).

All functions are pure: ``assess`` takes the records seen so far and returns every finding, so a
follower calls it again as lines arrive. It does not parse logs nor simulate
(``clustersim.simulator.cli.watch`` ties them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from clustersim.simulator.calibration.ranks import SlowRank
from clustersim.simulator.calibration.runlog_records import LogStep

EventKind = Literal["slow", "fast", "recovered", "drift", "periodic", "spikes", "tail", "slow_rank"]
MARKED = ("checkpoint", "eval", "restart", "nan", "skipped")


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """What the run should do."""

    step_time_s: float
    """Predicted seconds per step."""
    interval: tuple[float, float]
    """(low, high) multipliers of measured / predicted that a run on plan stays within."""
    exposed_comm_share: float
    """Exposed communication (TP/CP/EP/PP/DP) over the predicted step time."""
    compute_share: float = 0.0
    """Compute (recompute included) over the predicted step time (0 when unknown)."""
    checkpoint_interval: int | None = None
    """Steps between checkpoints, from the job's configuration."""
    eval_interval: int | None = None
    """Steps between evaluations, from the job's configuration."""
    num_gpus: int = 0
    """GPUs of the job (0 when unknown): names this run among the scales of ``ScalePoint``."""


@dataclass(frozen=True, kw_only=True)
class WatchRules:
    """Thresholds of the detector (fractions, records)."""

    window: int = 8
    """Records of the rolling median."""
    warmup: int = 2
    """Records dropped at the start (compilation, allocator, NCCL set-up)."""
    threshold: float | None = None
    """Alert when the rolling median exceeds predicted x (1 + threshold); None: the interval's top."""
    spike_factor: float = 1.5
    """A record above this x the steady median is a spike."""
    drift_min: float = 0.05
    """Smallest rise over the steady records called a drift."""
    tail_growth: float = 1.2
    """Recent p99/p50 over early p99/p50 above this is a grown tail."""
    comm_plausible: float = 3.0
    """Communication slower than predicted by up to this factor is a plausible network cause."""

    def limit(self, prediction: Prediction) -> float:
        """The ratio above which the run is slow."""
        return 1.0 + self.threshold if self.threshold is not None else prediction.interval[1]


@dataclass(frozen=True, kw_only=True)
class Event:
    """One finding at one record."""

    step: int
    """Step of the record where it was found."""
    kind: EventKind
    message: str
    value: float = 0.0
    """The figure it rests on (slowdown fraction, drift rise, period, tail ratio)."""


@dataclass(frozen=True, kw_only=True)
class Assessment:
    """Everything ``assess`` found, and the run's status now."""

    events: tuple[Event, ...]
    status: str
    """'on plan', 'slower', 'faster' or 'too early' (fewer steady records than the window needs)."""
    ratio: float
    """Rolling median measured / predicted at the last record (nan when too early)."""
    cause: str = ""
    """The cause that fits a slowdown, in words."""
    alert: bool = False
    """The run is slower than the threshold at its last record."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def steady_records(records: Sequence[LogStep], rules: WatchRules) -> list[LogStep]:
    """Records after the warm-up that carry no checkpoint/eval/restart/NaN mark."""
    return [r for r in records[rules.warmup:] if not set(r.marks) & set(MARKED)]


def rolling_median(values: np.ndarray, window: int) -> np.ndarray:
    """Median of the last ``window`` values at each position (fewer at the start)."""
    return np.array([np.median(values[max(0, k - window + 1):k + 1]) for k in range(len(values))])


def level_events(steady: Sequence[LogStep], pred: Prediction, rules: WatchRules) -> tuple[list[Event], np.ndarray]:
    """slow / fast / recovered transitions of the rolling median (from a full window on)."""
    ratios = np.array([r.time_s / pred.step_time_s for r in steady])
    roll = rolling_median(ratios, rules.window)
    events, state = [], "on plan"
    hi, lo = rules.limit(pred), pred.interval[0]
    for k in range(min(rules.window // 2, len(steady)), len(steady)):
        now = "slow" if roll[k] > hi else ("fast" if roll[k] < lo else "on plan")
        if now != state:
            kind = "recovered" if now == "on plan" else now
            recent = ratios[max(0, k - rules.window + 1):k + 1]
            # the size of a change: the median of the window's records beyond the edge it crossed
            size = float(np.median(recent[recent > hi] if now == "slow" else recent[recent < lo] if now == "fast"
                                   else recent)) - 1.0
            text = (f"slower than predicted by {size * 100:.1f}% (limit +{(hi - 1) * 100:.1f}%)" if now == "slow"
                    else f"faster than predicted by {-size * 100:.1f}% (interval low {(lo - 1) * 100:+.1f}%)"
                    if now == "fast" else f"back on plan ({size * 100:+.1f}%)")
            events.append(Event(step=steady[k].step, kind=kind, message=text, value=size))  # type: ignore[arg-type]  # kind: 'recovered' or the new state, slow or fast
            state = now
    return events, roll


def _sse_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(residual sum of squares, slope) of a least-squares line."""
    slope, icept = np.polyfit(x, y, 1)
    return float(np.sum((y - (slope * x + icept)) ** 2)), float(slope)


def _sse_shift(y: np.ndarray) -> float:
    """Residual sum of squares of the best single level shift (two constant means), O(n) by prefix sums."""
    n = len(y)
    if n < 4:
        return float(np.sum((y - y.mean()) ** 2))
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(2, n - 1)  # the left part holds y[:k]
    left = c2[k - 1] - c1[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c1[-1] - c1[k - 1]) ** 2 / (n - k)
    return float(min(np.min(left + right), np.sum((y - y.mean()) ** 2)))


def drift_event(steady: Sequence[LogStep], pred: Prediction, rules: WatchRules, spikes: set[int]) -> Event | None:
    """A creeping step time: a line beats a level shift and rises more than ``drift_min``."""
    use = [r for r in steady if r.step not in spikes]
    if len(use) < 3 * rules.window:
        return None
    x = np.array([r.step for r in use], dtype=float)
    y = np.log(np.array([r.time_s / pred.step_time_s for r in use]))
    sse_line, slope = _sse_line(x, y)
    rise = float(np.expm1(slope * (x[-1] - x[0])))
    if rise < rules.drift_min or sse_line >= _sse_shift(y):
        return None
    per_k = float(np.expm1(slope * 1000.0))
    return Event(step=use[-1].step, kind="drift", value=rise,
                 message=f"step time creeping up: +{rise * 100:.1f}% over steps {int(x[0])}-{int(x[-1])} "
                         f"({per_k * 100:+.1f}% per 1000 steps): allocator fragmentation, a filling data-loader "
                         "queue, thermal throttling or growing contention on the fabric")


def spike_steps(records: Sequence[LogStep], rules: WatchRules) -> list[LogStep]:
    """Records after the warm-up above ``spike_factor`` x the median of the steady records."""
    base = [r.time_s for r in steady_records(records, rules)]
    if not base:
        return []
    ref = float(np.median(base))
    return [r for r in records[rules.warmup:] if r.time_s > rules.spike_factor * ref]


def _on(steps: Sequence[int], interval: int | None) -> bool:
    return interval is not None and interval > 0 and all(s % interval in (0, 1) for s in steps)


def spike_events(records: Sequence[LogStep], pred: Prediction, rules: WatchRules) -> list[Event]:
    """Periodic spikes (with their cause) or isolated ones."""
    spikes = spike_steps(records, rules)
    if len(spikes) < 2:
        return []
    steps = [r.step for r in spikes]
    gaps = np.diff(steps)
    values, counts = np.unique(gaps, return_counts=True)
    period = int(values[np.argmax(counts)])
    extra = float(np.median([r.time_s for r in spikes]))
    if len(spikes) >= 3 and counts.max() >= (2 / 3) * len(gaps):
        marks = {m for r in spikes for m in r.marks}
        cause = ("checkpoint saves" if "checkpoint" in marks or _on(steps, pred.checkpoint_interval) else
                 "evaluation" if "eval" in marks or _on(steps, pred.eval_interval) else
                 "a periodic stall not marked in the log: Python GC (Megatron --manual-gc), data-loader refills, "
                 "logging or profiling")
        return [Event(step=steps[-1], kind="periodic", value=float(period),
                      message=f"periodic spikes every {period} steps ({len(spikes)} so far, median {extra * 1e3:.0f} ms): {cause}")]
    return [Event(step=steps[-1], kind="spikes", value=float(len(spikes)),
                  message=f"{len(spikes)} isolated spikes (steps {', '.join(map(str, steps[:6]))}"
                          f"{'...' if len(steps) > 6 else ''}): transient stalls or stragglers")]


def tail_event(steady: Sequence[LogStep], rules: WatchRules, spikes: set[int]) -> Event | None:
    """p99/p50 of the recent half against the early half."""
    use = [r.time_s for r in steady if r.step not in spikes]
    if len(use) < 4 * rules.window:
        return None
    half = len(use) // 2
    early, late = np.array(use[:half]), np.array(use[half:])
    t0, t1 = np.percentile(early, 99) / np.median(early), np.percentile(late, 99) / np.median(late)
    if t1 <= rules.tail_growth * t0:
        return None
    return Event(step=steady[-1].step, kind="tail", value=float(t1),
                 message=f"the step-time tail grew: p99/p50 {t0:.2f} -> {t1:.2f}: stragglers (a slow rank sets each step)")


@dataclass(frozen=True, kw_only=True)
class ScalePoint:
    """One scale of the job: its GPUs, measured / predicted and the predicted exposed-communication share."""

    gpus: int
    ratio: float
    """Measured / predicted step time."""
    comm_share: float
    """Predicted exposed communication / predicted step time."""
    name: str = ""


@dataclass(frozen=True, kw_only=True)
class ScaleFit:
    """Compute and communication factors that explain the ratios at several scales."""

    compute: float
    """k: measured / predicted of the compute part."""
    comm: float
    """f: measured / predicted of the exposed communication."""
    points: tuple[ScalePoint, ...]
    residual: float
    """Largest |r_i - (k + c_i (f - k))| over the points."""

    def describe(self) -> str:
        """The scales, the ratios and the two factors, in words."""
        pts = sorted(self.points, key=lambda p: p.gpus)
        seen = ", ".join(f"{p.gpus} GPUs {(p.ratio - 1) * 100:+.0f}% (comm {p.comm_share * 100:.0f}%)" for p in pts)
        return (f"measured vs predicted by scale: {seen}; fitted compute {self.compute:.2f}x and exposed "
                f"communication {self.comm:.2f}x the prediction (largest residual {self.residual * 100:.1f}%)")


MIN_SHARE_SPREAD = 0.02
"""Smallest spread of the communication share over the scales that separates k from f."""


def scale_fit(points: Sequence[ScalePoint]) -> ScaleFit | None:
    """Least squares of r_i = k + c_i (f - k) over the scales; None when the shares do not spread
    by ``MIN_SHARE_SPREAD`` (then compute and communication cannot be told apart)."""
    if len(points) < 2:
        return None
    c = np.array([p.comm_share for p in points])
    r = np.array([p.ratio for p in points])
    if float(c.max() - c.min()) < MIN_SHARE_SPREAD:
        return None
    slope, k = np.polyfit(c, r, 1)
    resid = float(np.max(np.abs(r - (k + slope * c))))
    return ScaleFit(compute=float(k), comm=float(k + slope), points=tuple(points), residual=resid)


SCALE_MARGIN = 0.10
"""An excess (f - k for communication's growth with scale, k - 1 for compute) above this is a cause."""


def _scale_cause(fit: ScaleFit) -> str:
    """By the fitted slope f - k (the growth with scale) and the intercept k - 1 (compute's excess):
    network when only the growth exceeds ``SCALE_MARGIN``, both when both do, else compute."""
    growth, compute = fit.comm - fit.compute, fit.compute - 1.0
    if growth > SCALE_MARGIN and compute > SCALE_MARGIN:
        return (f"network and compute (growth with scale on top of a constant part): {fit.describe()}: "
                "check NCCL bus bandwidth at the larger scale and the GPUs' clocks")
    if growth > SCALE_MARGIN:
        return (f"network (growth with scale): the slowdown grows with the exposed-communication share; "
                f"{fit.describe()}: check NCCL bus bandwidth at the larger scale (nccl-tests), congestion, the fabric")
    return (f"compute (not growth with scale): the slowdown does not grow with the communication share; "
            f"{fit.describe()}: check clocks, thermals, kernels or data loading")


def cause_of(slowdown: float, pred: Prediction, rules: WatchRules, tail: bool,
             slow: SlowRank | None = None, scale: ScaleFit | None = None) -> str:
    """The cause that fits a slowdown of ``slowdown`` (fraction) given the prediction."""
    if slow is not None:
        impact = f", about +{slow.slower * pred.compute_share * 100:.0f}% of the step" if pred.compute_share > 0 else ""
        return (f"slow {'node' if slow.whole_node else 'rank'}: {slow.describe()}; every step waits for it"
                f"{impact}: drain or replace it")
    if tail:
        return "stragglers: the tail grew with the slowdown; look for a slow rank or node (per-rank timers)"
    c = pred.exposed_comm_share
    if scale is not None:
        return _scale_cause(scale)
    if c <= 0:
        return (f"compute: the prediction exposes no communication, so the {slowdown * 100:.0f}% is compute-side "
                "(GPU clocks, thermals, kernels, data loading)")
    factor = 1.0 + slowdown / c
    other = (f", or compute ({pred.compute_share * 100:.0f}% of the step) {1.0 + slowdown / pred.compute_share:.2f}x"
             if pred.compute_share > 0 else "")
    if factor <= rules.comm_plausible:
        return (f"network: exposed communication is {c * 100:.0f}% of the predicted step; it would have to run "
                f"{factor:.1f}x slower to explain +{slowdown * 100:.0f}%{other}: check NCCL bus bandwidth (nccl-tests), "
                "congestion or a degraded link first")
    return (f"compute: exposed communication is only {c * 100:.0f}% of the step, it would have to run {factor:.1f}x "
            f"slower to explain +{slowdown * 100:.0f}%{other}; check GPU clocks and thermals, a slow node, or the kernels")


def assess(records: Sequence[LogStep], pred: Prediction, rules: WatchRules = WatchRules(),
           slow: SlowRank | None = None, scale: Sequence[ScalePoint] = ()) -> Assessment:
    """Every finding over ``records`` (the log so far) and the status at its last record; ``slow``:
    the slow rank the log's per-rank timings name; ``scale``: the same job at other scales."""
    steady = steady_records(records, rules)
    if len(steady) < rules.window // 2 + 1:
        return Assessment(events=(), status="too early", ratio=float("nan"),
                          notes=(f"{len(steady)} steady record(s); the level needs {rules.window // 2 + 1}",))
    level, roll = level_events(steady, pred, rules)
    spikes = {r.step for r in spike_steps(records, rules)}
    drift, tail = drift_event(steady, pred, rules, spikes), tail_event(steady, rules, spikes)
    events = level + spike_events(records, pred, rules) + [e for e in (drift, tail) if e is not None]
    if slow is not None:
        events.append(Event(step=records[-1].step, kind="slow_rank", value=slow.slower, message=slow.describe()))
    events.sort(key=lambda e: (e.step, e.kind))
    ratio = float(roll[-1])
    hi, lo = rules.limit(pred), pred.interval[0]
    status = "slower" if ratio > hi else "faster" if ratio < lo else "on plan"
    here = ScalePoint(gpus=pred.num_gpus, ratio=ratio, comm_share=pred.exposed_comm_share, name="this run")
    fit = scale_fit([*scale, here]) if scale else None
    notes = (fit.describe(),) if fit is not None else (
        (f"the other scales' predicted communication shares spread by under {MIN_SHARE_SPREAD * 100:.0f} points: "
         "compute and communication cannot be told apart by scale",) if scale else ())
    cause = cause_of(ratio - 1.0, pred, rules, tail is not None, slow, fit) if status == "slower" else ""
    return Assessment(events=tuple(events), status=status, ratio=ratio, cause=cause, alert=status == "slower",
                      notes=notes)


def detection_delay(rules: WatchRules) -> int:
    """Records after a sustained slowdown begins until ``assess`` flags it (more than half the window)."""
    return rules.window // 2 + 1
