"""Goodput of a long training run: a SimPy simulation of days of wall time with failures.

Owns ``LongRunSpec`` (the job as the long run sees it: step time, tokens per step, state bytes,
checkpoint interval), the Monte Carlo long-run simulation ``simulate_long_run`` and its summary
``LongRunResult``, the checkpoint-interval sweep ``sweep_intervals`` and the Young/Daly formulas.
It does not simulate a step (it takes ``step_time`` as an input from ``clustersim.simulator.step.simulate``), nor
price a checkpoint (``clustersim.simulator.longrun.checkpoint``), nor draw failures (``clustersim.simulator.longrun.failures``).

Granularity: events are failures, recovery phases and spare-node repairs only, never steps or
checkpoints. Between a restart and the next failure the job's progress is deterministic, so a
training segment of length S is settled in closed form: with cycle L = interval + stall,
compute = floor(S/L)*interval + min(S mod L, interval), checkpoint stall = S - compute, durable
checkpoints = floor((S - persist)/L); work after the last durable checkpoint is lost.

Metrics (each a share of wall time, they sum to 1): goodput = useful compute / wall time;
lost work; checkpoint stall; detection; restart (relaunch + restore + node swap); spare wait.
Work still unsaved when the horizon ends counts as useful (no failure destroyed it).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import simpy

from clustersim.simulator.longrun.checkpoint import CheckpointCost, CheckpointSpec, LongRunError, checkpoint_cost
from clustersim.simulator.longrun.failures import FailureSpec, FailureTimeline, draw_failures, system_mtbf

CAUSES: tuple[str, ...] = ("lost_work", "checkpoint", "detection", "restart", "spare_wait")
"""Where non-useful wall time goes, the keys of ``RunRecord.lost_time``."""
Z95 = 1.959963984540054  # two-sided 95% normal quantile
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True, kw_only=True)
class LongRunSpec:
    """One training job over a long run, as the goodput simulation sees it."""

    days: float
    """Wall-clock days simulated."""
    step_time: float
    """Seconds per optimizer step without failures or checkpoints."""
    tokens_per_step: float
    """Tokens trained per optimizer step."""
    num_gpus: int
    """GPUs the job runs on (spares excluded)."""
    gpus_per_node: int
    """GPUs per node (the unit that fails and is swapped)."""
    state_bytes_per_device: float
    """Checkpoint bytes each device writes (its unique shard of the training state)."""
    checkpoint_interval: float
    """Seconds of training between checkpoints, rounded to whole steps (at least one)."""
    cost_per_gpu_hour: float = 0.0
    """Price of one GPU-hour; spare nodes are paid for too."""
    repetitions: int = 100
    """Monte Carlo repetitions (independent failure histories)."""

    @property
    def horizon(self) -> float:
        """Seconds of wall time simulated."""
        return self.days * SECONDS_PER_DAY


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """The outcome of one simulated history."""

    goodput: float
    """Useful compute seconds / wall seconds."""
    useful_time: float
    """Seconds of compute whose work survived."""
    lost_time: dict[str, float]
    """Seconds of wall time per cause in ``CAUSES``."""
    num_failures: int
    """Failures in the history (including those during recovery)."""


@dataclass(frozen=True, kw_only=True)
class LongRunResult:
    """Monte Carlo summary of a long run at one checkpoint interval."""

    checkpoint_interval: float
    """Seconds of training between checkpoints actually used (whole steps)."""
    cost: CheckpointCost
    """Stall, persistence and restore times of one checkpoint."""
    system_mtbf: float
    """Mean seconds between failures of the whole job."""
    goodput_mean: float
    """Mean goodput over the repetitions."""
    goodput_ci95: tuple[float, float]
    """95% confidence interval of the mean goodput (normal approximation)."""
    goodput_p5: float
    """5th percentile of goodput over the repetitions."""
    goodput_p50: float
    """Median goodput."""
    goodput_p95: float
    """95th percentile of goodput."""
    tokens_mean: float
    """Mean tokens trained (useful time / step time * tokens per step)."""
    lost_hours: dict[str, float]
    """Mean wall-clock hours lost per cause."""
    cost_mean: float
    """Mean price of the run: (GPUs + spare GPUs) * hours * price per GPU-hour."""
    failures_mean: float
    """Mean number of failures per history."""
    records: tuple[RunRecord, ...] = field(repr=False)
    """Every repetition, in order."""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary (records left out)."""
        return {
            "checkpoint_interval_s": self.checkpoint_interval, "system_mtbf_s": self.system_mtbf,
            "checkpoint_stall_s": self.cost.blocking_time, "checkpoint_persist_s": self.cost.persist_time,
            "restore_s": self.cost.restore_time, "goodput_mean": self.goodput_mean,
            "goodput_ci95": list(self.goodput_ci95), "goodput_p5": self.goodput_p5,
            "goodput_p50": self.goodput_p50, "goodput_p95": self.goodput_p95,
            "tokens_mean": self.tokens_mean, "lost_hours": dict(self.lost_hours),
            "cost_mean": self.cost_mean, "failures_mean": self.failures_mean,
            "repetitions": len(self.records),
        }


@dataclass(frozen=True, kw_only=True)
class _Cycle:
    """The deterministic rhythm of training between failures."""

    interval: float  # seconds of compute between checkpoint stalls
    stall: float  # seconds of each stall
    persist: float  # seconds from the end of a stall until durable
    restore: float  # seconds to read the checkpoint back


Phases = tuple[tuple[str, float], ...]
Process = Generator[simpy.Event, Any, bool]
"""A SimPy process step that returns whether it ran to its end (False: a failure cut it short)."""
"""Consecutive (cause, seconds) pieces of one wait; a failure splits the elapsed time in order."""


@dataclass
class _Ledger:
    """Mutable tally of one simulated history (a runtime object, one per run)."""

    seconds: dict[str, float]
    training: bool = True
    phases: Phases = ()
    phase_start: float = 0.0
    pending_swaps: int = 0
    next_failure: int = 0


def _cycle(spec: LongRunSpec, cost: CheckpointCost) -> _Cycle:
    steps = max(1, round(spec.checkpoint_interval / spec.step_time))
    interval = steps * spec.step_time
    # an asynchronous snapshot waits for the previous one to be persisted
    interval = max(interval, spec.step_time * math.ceil(cost.persist_time / spec.step_time))
    return _Cycle(interval=interval, stall=cost.blocking_time, persist=cost.persist_time,
                  restore=cost.restore_time)


def _settle_training(ledger: _Ledger, cyc: _Cycle, now: float, failed: bool) -> None:
    """Close a training segment in closed form (see the module docstring)."""
    span = now - ledger.phase_start
    period = cyc.interval + cyc.stall
    full = math.floor(span / period)
    compute = full * cyc.interval + min(span - full * period, cyc.interval)
    ledger.seconds["checkpoint"] += span - compute
    saved = compute
    if failed:
        saved = max(0, math.floor((span - cyc.persist) / period)) * cyc.interval
    ledger.seconds["useful"] += saved
    ledger.seconds["lost_work"] += compute - saved


def _close_phase(ledger: _Ledger, now: float) -> None:
    """Charge the time since the phases began to their causes, in order."""
    left = now - ledger.phase_start
    for cause, duration in ledger.phases:
        used = min(left, duration)
        ledger.seconds[cause] += used
        left -= used
    ledger.phases, ledger.phase_start = (), now


class _History:
    """One failure history run on SimPy: the job process and the spare-node pool.

    The job knows the failure times in advance, so it waits with one timeout to whichever comes
    first, the end of its current phase or the next failure (no interrupt machinery); a failed
    node goes to repair (a timeout) and comes back into the spare pool, a ``simpy.Container``.
    """

    def __init__(self, timeline: FailureTimeline, cyc: _Cycle, spec: FailureSpec) -> None:
        self.env = simpy.Environment()
        self.spares = simpy.Container(self.env, init=spec.spare_nodes)
        self.ledger = _Ledger(seconds=dict.fromkeys(("useful",) + CAUSES, 0.0))
        self.times: list[float] = timeline.times.tolist() + [math.inf]
        self.swaps: list[bool] = timeline.needs_swap.tolist()
        self.cyc, self.spec, self.horizon = cyc, spec, timeline.horizon

    def _next_failure(self) -> float:
        return self.times[self.ledger.next_failure]

    def _register_failures(self) -> None:
        """Book every failure up to now: a failed node leaves the job and goes to repair."""
        ledger, now = self.ledger, self.env.now
        while self.times[ledger.next_failure] <= now:
            if self.swaps[ledger.next_failure]:
                ledger.pending_swaps += 1
                if self.spec.repair_time > 0:
                    self.env.timeout(self.spec.repair_time).callbacks.append(self._repaired)
            ledger.next_failure += 1

    def _repaired(self, _event: simpy.Event) -> None:
        """A repaired node joins the spare pool."""
        self.spares.put(1)

    def _spend(self, phases: Phases) -> Process:
        """Wait through consecutive phases; returns False if a failure cut them short."""
        ledger, env = self.ledger, self.env
        ledger.phases, ledger.phase_start = phases, env.now
        end = env.now + sum(duration for _, duration in phases)
        if end > env.now:
            yield env.timeout(min(end, self._next_failure()) - env.now)
        _close_phase(ledger, env.now)
        return env.now >= end

    def _take_spares(self) -> Process:
        """Take a spare for each failed node; returns False if a failure came first."""
        ledger, env = self.ledger, self.env
        while ledger.pending_swaps:
            ledger.phases, ledger.phase_start = (("spare_wait", math.inf),), env.now
            request, deadline = self.spares.get(1), env.timeout(self._next_failure() - env.now)
            yield request | deadline
            _close_phase(ledger, env.now)
            if not request.triggered:
                request.cancel()
                return False
            ledger.pending_swaps -= 1
        return True

    def _recover(self) -> Process:
        """Detect, swap failed nodes, relaunch and restore; returns False if interrupted."""
        spec, relaunch = self.spec, self.spec.restart_time + self.cyc.restore
        swap = spec.reschedule_time if self.ledger.pending_swaps else 0.0
        if spec.repair_time == 0:  # failed nodes are back at once: nobody waits for a spare
            self.ledger.pending_swaps = 0
            return (yield from self._spend((("detection", spec.detection_time), ("restart", swap + relaunch))))
        if not (yield from self._spend((("detection", spec.detection_time),))):
            return False
        if not (yield from self._take_spares()):
            return False
        return (yield from self._spend((("restart", swap + relaunch),)))

    def job(self) -> Generator[simpy.Event, Any, None]:
        """Train until the next failure, recover (again if a failure hits recovery), repeat."""
        ledger, env = self.ledger, self.env
        while True:
            ledger.training, ledger.phase_start = True, env.now
            yield env.timeout(self._next_failure() - env.now)
            _settle_training(ledger, self.cyc, env.now, failed=True)
            ledger.training = False
            self._register_failures()
            while not (yield from self._recover()):
                self._register_failures()

    def run(self) -> RunRecord:
        """Simulate to the horizon and tally where the wall time went."""
        self.env.process(self.job())
        self.env.run(until=self.horizon)
        if self.ledger.training:
            _settle_training(self.ledger, self.cyc, self.horizon, failed=False)
        else:
            _close_phase(self.ledger, self.horizon)
        useful = self.ledger.seconds.pop("useful")
        return RunRecord(goodput=useful / self.horizon, useful_time=useful,
                         lost_time=dict(self.ledger.seconds), num_failures=len(self.swaps))


def _validate(spec: LongRunSpec) -> None:
    for name in ("days", "step_time", "checkpoint_interval"):
        if not (getattr(spec, name) > 0 and math.isfinite(getattr(spec, name))):
            raise LongRunError(f"LongRunSpec.{name} must be positive and finite, got {getattr(spec, name)}")
    if spec.repetitions < 2:
        raise LongRunError(f"LongRunSpec.repetitions must be >= 2 for a confidence interval, got {spec.repetitions}")


def draw_timelines(spec: LongRunSpec, failures: FailureSpec,
                   rng: np.random.Generator) -> list[FailureTimeline]:
    """One independent failure history per repetition, each from its own spawned stream."""
    return [draw_failures(failures, num_gpus=spec.num_gpus, gpus_per_node=spec.gpus_per_node,
                          horizon=spec.horizon, rng=child) for child in rng.spawn(spec.repetitions)]


def _summarise(spec: LongRunSpec, cyc: _Cycle, cost: CheckpointCost, mtbf: float,
               spares: int, records: list[RunRecord]) -> LongRunResult:
    goodput = np.array([r.goodput for r in records])
    half = Z95 * goodput.std(ddof=1) / math.sqrt(goodput.size)
    p5, p50, p95 = np.percentile(goodput, [5, 50, 95])
    tokens = float(np.mean([r.useful_time for r in records])) / spec.step_time * spec.tokens_per_step
    gpus = spec.num_gpus + spares * spec.gpus_per_node
    return LongRunResult(
        checkpoint_interval=cyc.interval, cost=cost, system_mtbf=mtbf,
        goodput_mean=float(goodput.mean()), goodput_ci95=(float(goodput.mean() - half), float(goodput.mean() + half)),
        goodput_p5=float(p5), goodput_p50=float(p50), goodput_p95=float(p95), tokens_mean=tokens,
        lost_hours={c: float(np.mean([r.lost_time[c] for r in records])) / 3600.0 for c in CAUSES},
        cost_mean=gpus * spec.horizon / 3600.0 * spec.cost_per_gpu_hour,
        failures_mean=float(np.mean([r.num_failures for r in records])), records=tuple(records))


def run_timelines(spec: LongRunSpec, checkpoint: CheckpointSpec, failures: FailureSpec,
                  timelines: list[FailureTimeline]) -> LongRunResult:
    """Simulate the job over given failure histories (common random numbers across intervals)."""
    _validate(spec)
    cost = checkpoint_cost(checkpoint, state_bytes_per_device=spec.state_bytes_per_device,
                           num_gpus=spec.num_gpus, gpus_per_node=spec.gpus_per_node)
    cyc = _cycle(spec, cost)
    records = [_History(timeline, cyc, failures).run() for timeline in timelines]
    mtbf = system_mtbf(failures, spec.num_gpus, spec.gpus_per_node)
    return _summarise(spec, cyc, cost, mtbf, failures.spare_nodes, records)


def simulate_long_run(spec: LongRunSpec, checkpoint: CheckpointSpec, failures: FailureSpec,
                      rng: np.random.Generator) -> LongRunResult:
    """Monte Carlo goodput of the job: ``spec.repetitions`` histories of ``spec.days`` days."""
    _validate(spec)
    return run_timelines(spec, checkpoint, failures, draw_timelines(spec, failures, rng))


def young_interval(stall: float, mtbf: float) -> float:
    """Young (1974) first-order optimum checkpoint interval: sqrt(2 * stall * MTBF)."""
    return math.sqrt(2.0 * stall * mtbf)


def daly_interval(stall: float, mtbf: float) -> float:
    """Daly (2006, FGCS 22) higher-order optimum interval.

    sqrt(2dM) * [1 + sqrt(d/2M)/3 + (d/2M)/9] - d for d < 2M, else M.
    """
    if stall >= 2.0 * mtbf:
        return mtbf
    ratio = stall / (2.0 * mtbf)
    return math.sqrt(2.0 * stall * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - stall


@dataclass(frozen=True, kw_only=True)
class IntervalSweep:
    """Goodput against checkpoint interval, the best interval and the analytic optima."""

    intervals: tuple[float, ...]
    """Checkpoint intervals simulated (s, whole steps), ascending."""
    goodput_mean: tuple[float, ...]
    """Mean goodput at each interval (same failure histories at every interval)."""
    goodput_ci_half: tuple[float, ...]
    """Half-width of the 95% confidence interval of each mean."""
    best: LongRunResult
    """The full result at the interval with the highest mean goodput."""
    band: tuple[float, float]
    """Confidence band of the optimum: the nearest intervals below and above the best whose mean
    goodput is under the best's lower 95% bound (the grid's ends where none is)."""
    young: float
    """Young's optimum sqrt(2 * stall * MTBF) (s)."""
    daly: float
    """Daly's higher-order optimum (s)."""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary."""
        return {"intervals_s": list(self.intervals), "goodput_mean": list(self.goodput_mean),
                "goodput_ci_half": list(self.goodput_ci_half), "best": self.best.to_dict(),
                "band_s": list(self.band), "young_s": self.young, "daly_s": self.daly}


def interval_grid(spec: LongRunSpec, stall: float, mtbf: float, points: int = 17) -> list[float]:
    """A log grid over [Young/8, Young*8] (Young in the middle), in whole steps, capped at the horizon."""
    if math.isfinite(mtbf) and stall > 0:
        centre = young_interval(stall, mtbf)
        raw = np.geomspace(centre / 8.0, centre * 8.0, points)
    else:  # without failures (or free checkpoints) longer is never worse: span step .. horizon
        raw = np.geomspace(spec.step_time, spec.horizon, points)
    raw = np.clip(raw, spec.step_time, spec.horizon)  # past the horizon every interval is alike
    steps = sorted({max(1, round(x / spec.step_time)) for x in raw})
    return [s * spec.step_time for s in steps]


def _band(intervals: list[float], means: list[float], best: int, floor: float) -> tuple[float, float]:
    """The nearest intervals on each side of the best whose mean goodput falls below ``floor``
    (the best's lower 95% bound): the optimum lies between them (grid edges if none)."""
    low = next((intervals[i] for i in range(best - 1, -1, -1) if means[i] < floor), intervals[0])
    high = next((intervals[i] for i in range(best + 1, len(means)) if means[i] < floor), intervals[-1])
    return low, high


def sweep_intervals(spec: LongRunSpec, checkpoint: CheckpointSpec, failures: FailureSpec,
                    rng: np.random.Generator, intervals: list[float] | None = None) -> IntervalSweep:
    """Simulate every interval on the same failure histories and pick the best."""
    _validate(spec)
    cost = checkpoint_cost(checkpoint, state_bytes_per_device=spec.state_bytes_per_device,
                           num_gpus=spec.num_gpus, gpus_per_node=spec.gpus_per_node)
    mtbf = system_mtbf(failures, spec.num_gpus, spec.gpus_per_node)
    grid = sorted(set(intervals)) if intervals else interval_grid(spec, cost.blocking_time, mtbf)
    timelines = draw_timelines(spec, failures, rng)
    results = [run_timelines(replace(spec, checkpoint_interval=x), checkpoint, failures, timelines) for x in grid]
    means = [r.goodput_mean for r in results]
    best_index = int(np.argmax(means))
    best = results[best_index]
    return IntervalSweep(
        intervals=tuple(r.checkpoint_interval for r in results), goodput_mean=tuple(means),
        goodput_ci_half=tuple((r.goodput_ci95[1] - r.goodput_ci95[0]) / 2 for r in results),
        best=best, band=_band([r.checkpoint_interval for r in results], means, best_index, best.goodput_ci95[0]),
        young=young_interval(cost.blocking_time, mtbf) if math.isfinite(mtbf) else math.inf,
        daly=daly_interval(cost.blocking_time, mtbf) if math.isfinite(mtbf) else math.inf)

