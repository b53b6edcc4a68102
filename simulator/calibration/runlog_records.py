"""The records a training log is read into: per-step times, the whole log, its steady state.

Owns the immutable values the parsers (``runlog_parsers``) produce and the summaries
(``runlogs``) return: ``LogStep`` (one logged record), ``RunLog`` (every record of one log and
what it says about the job), ``StepStats`` (the steady-state step time), ``Interruptions`` (the
restarts a log shows) and the error an unreadable log raises. It reads no text and computes no
statistic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from clustersim.simulator.errors import CalibrationError

Framework = Literal["megatron", "nemo", "torchtitan", "composer"]
FRAMEWORKS: tuple[str, ...] = ("megatron", "nemo", "torchtitan", "composer")


@dataclass(frozen=True, kw_only=True)
class LogStep:
    """One logged record: a step (or the last step of a logged interval) and its time."""

    step: int
    """Iteration / step number the record closes."""
    time_s: float
    """Seconds per step: the mean over ``span`` steps where the framework averages."""
    span: int
    """Steps the time covers (Megatron ``--log-interval``, torchtitan ``log_freq``)."""
    line: int
    """1-based line of the log where the record ends."""
    tflops_per_gpu: float | None = None
    """The framework's own TFLOP/s per GPU, when it prints one (its FLOP convention)."""
    loss: float | None = None
    """Training loss of the record, when printed."""
    marks: tuple[str, ...] = ()
    """checkpoint, eval, nan, skipped, restart: why the step may not be steady state."""
    wall_s: float | None = None
    """Wall-clock time of the record (POSIX seconds, the log's own timestamp, UTC assumed), if printed."""


@dataclass(frozen=True, kw_only=True)
class RunLog:
    """Every record of one log, in order, and what the log says about the job."""

    framework: str
    """megatron, nemo, torchtitan or composer."""
    source: str
    """Path of the log."""
    steps: tuple[LogStep, ...]
    """The records, in log order."""
    world_size: int | None = None
    """GPUs the log says the job ran on (Megatron prints it), else None."""
    global_batch: int | None = None
    """Sequences per step the log prints (Megatron ``global batch size``), else None."""
    checkpoint_seconds: tuple[float, ...] = ()
    """Durations of checkpoint saves the log reports."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """What the parser assumed, in words."""
    device_name: str | None = None
    """The GPU the log names (torchtitan's ``CUDA capacity:`` line), as the driver spells it."""


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """Steady-state step time of a log (warm-up and marked steps left out)."""

    median_s: float
    """Median seconds per step."""
    p99_s: float
    """99th percentile over the records (records averaging several steps hide single spikes)."""
    mean_s: float
    """Mean seconds per step."""
    records: int
    """Records used."""
    warmup_steps: int
    """Steps dropped at the start."""
    marked: dict[str, list[int]]
    """Steps left out, by mark (checkpoint, eval, nan, skipped, restart)."""


class RunLogError(CalibrationError):
    """A training log that cannot be read into step times."""

    stage = "import-run"


@dataclass(frozen=True, kw_only=True)
class Interruptions:
    """What a log shows of failures: the inputs ``clustersim goodput`` takes."""

    count: int
    """Restarts seen (the step counter went back or did not advance)."""
    hours: float
    """Wall-clock hours the log spans (first to last timestamped record)."""
    restart_s: float | None
    """Median seconds from the last record before a restart to the first after it, less the
    steps that record covers: detection + relaunch + reload, as the log saw it."""
    lost_steps: int
    """Steps done again after restarts (the last step before minus the step resumed from)."""

    @property
    def mtbf_hours(self) -> float | None:
        """hours / count (None without an interruption)."""
        return self.hours / self.count if self.count else None

