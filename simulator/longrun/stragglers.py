"""Stragglers and variability: per-rank compute jitter, slow devices, slow links, step-time tails.

Owns ``StragglerSpec``, the draws of per-rank multipliers (``draw_compute_scale`` and friends)
and ``step_time_distribution``, which gives the step-time distribution (p50, p99, max) and the
per-rank wait time over many steps. It does not simulate a step itself: with a scenario it calls
``clustersim.simulator.step.simulate.simulate(..., mode="full", compute_scale=...)`` once per step; with a
``SymmetricStep`` it uses the vectorised closed form below, which is what 16,384 ranks need.

Model:
- jitter: each rank, each step, multiplies its compute time by exp(sigma * |Z|), Z ~ N(0, 1),
  sigma = sqrt(ln(1 + jitter_cv^2)) (the log-sd of a lognormal with that coefficient of
  variation), folded at 1: noise (clock throttling, OS jitter, memory errors retried) only slows
  a device down, so every multiplier is >= 1.
- slow devices: round(slow_device_fraction * ranks) ranks, drawn once per run, run every step
  slow_device_factor (>= 1) times slower; slow links likewise slow a rank's communication.
- closed form (every step ends in a collective over all ranks: the DP gradient reduction and
  the pipeline chain make a step globally synchronous, so the slowest rank gates it):
  step = compute_time * max_r(scale_r) + comm_time * max_r(link_r);
  wait_r = compute_time * (max scale - scale_r) + comm_time * (max link - link_r).
  The straggler is the rank that waits least: everyone else waits for it, which is the
  earliest sign one can observe in per-rank collective wait times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.step import simulate_step as simulate
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec, TrainingSpec
from clustersim.simulator.longrun.checkpoint import LongRunError

_CHUNK_ELEMENTS = 1 << 20  # ranks x steps drawn at once in the closed form (8 MiB of float64)


@dataclass(frozen=True, kw_only=True)
class StragglerSpec:
    """Distribution parameters of per-rank slowness."""

    jitter_cv: float = 0.0
    """Coefficient of variation of the lognormal per-step compute multiplier (folded at 1)."""
    slow_device_fraction: float = 0.0
    """Share of ranks that are persistently slow."""
    slow_device_factor: float = 1.0
    """Compute-time multiplier of a slow device (>= 1)."""
    slow_link_fraction: float = 0.0
    """Share of ranks whose scale-out link is persistently slow."""
    slow_link_factor: float = 1.0
    """Communication-time multiplier of a slow link (>= 1)."""


@dataclass(frozen=True, kw_only=True)
class SymmetricStep:
    """A step of a symmetric plan, split into what compute and what communication gate."""

    compute_time: float
    """Seconds of compute on the critical path of one step (no jitter)."""
    comm_time: float
    """Seconds of exposed communication in one step (no slow links)."""
    num_ranks: int
    """Ranks that synchronise every step."""


@dataclass(frozen=True, kw_only=True)
class StepTimeDistribution:
    """Step times over many steps and where the ranks waited."""

    step_times: np.ndarray
    """Seconds of each simulated step."""
    base_step_time: float
    """Seconds of a step without stragglers."""
    rank_wait_time: np.ndarray
    """Mean seconds per step each rank spent waiting in collectives for slower ranks."""
    p50: float
    """Median step time (s)."""
    p99: float
    """99th-percentile step time (s)."""
    max: float
    """Slowest step (s)."""
    mean: float
    """Mean step time (s)."""
    straggler_rank: int
    """The rank that waits least (the one the others wait for)."""


class _Scenario(Protocol):
    """What ``step_time_distribution`` needs of ``clustersim.simulator.scenario.Scenario``."""

    @property
    def model(self) -> ModelSpec: ...
    @property
    def training(self) -> TrainingSpec: ...
    @property
    def cluster(self) -> Cluster: ...
    @property
    def plan(self) -> ParallelPlan: ...
    @property
    def profile(self) -> CalibrationProfile | None: ...
    @property
    def seed(self) -> int: ...


def _validate(spec: StragglerSpec) -> None:
    if spec.jitter_cv < 0:
        raise LongRunError(f"StragglerSpec.jitter_cv must be >= 0, got {spec.jitter_cv}")
    for name in ("slow_device_fraction", "slow_link_fraction"):
        if not 0.0 <= getattr(spec, name) <= 1.0:
            raise LongRunError(f"StragglerSpec.{name} must lie in [0, 1], got {getattr(spec, name)}")
    for name in ("slow_device_factor", "slow_link_factor"):
        if getattr(spec, name) < 1.0:
            raise LongRunError(f"StragglerSpec.{name} must be >= 1 (a slowdown), got {getattr(spec, name)}")


def _slow_set(fraction: float, factor: float, num_ranks: int, rng: np.random.Generator) -> np.ndarray:
    scale = np.ones(num_ranks)
    count = int(round(fraction * num_ranks))
    if count and factor > 1.0:
        scale[rng.choice(num_ranks, size=count, replace=False)] = factor
    return scale


def draw_slow_devices(spec: StragglerSpec, num_ranks: int, rng: np.random.Generator) -> np.ndarray:
    """Persistent per-rank compute multipliers: slow_device_factor on the slow ranks, else 1."""
    _validate(spec)
    return _slow_set(spec.slow_device_fraction, spec.slow_device_factor, num_ranks, rng)


def draw_slow_links(spec: StragglerSpec, num_ranks: int, rng: np.random.Generator) -> np.ndarray:
    """Persistent per-rank communication multipliers: slow_link_factor on slow links, else 1."""
    _validate(spec)
    return _slow_set(spec.slow_link_fraction, spec.slow_link_factor, num_ranks, rng)


def draw_jitter(spec: StragglerSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Per-step compute multipliers exp(sigma |Z|) >= 1 (see the module docstring)."""
    sigma = math.sqrt(math.log1p(spec.jitter_cv**2))
    if sigma == 0.0:
        return np.ones(shape)
    jitter: np.ndarray = np.exp(sigma * np.abs(rng.standard_normal(shape)))
    return jitter


def draw_compute_scale(spec: StragglerSpec, num_ranks: int, rng: np.random.Generator) -> np.ndarray:
    """One step's per-rank compute multipliers (slow devices times jitter), each >= 1."""
    scale: np.ndarray = draw_slow_devices(spec, num_ranks, rng) * draw_jitter(spec, (num_ranks,), rng)
    return scale


def _summarise(step_times: np.ndarray, base: float, wait: np.ndarray) -> StepTimeDistribution:
    p50, p99 = np.percentile(step_times, [50, 99])
    return StepTimeDistribution(step_times=step_times, base_step_time=base, rank_wait_time=wait,
                                p50=float(p50), p99=float(p99), max=float(step_times.max()),
                                mean=float(step_times.mean()), straggler_rank=int(np.argmin(wait)))


def _symmetric(step: SymmetricStep, spec: StragglerSpec, steps: int,
               rng: np.random.Generator) -> StepTimeDistribution:
    """The vectorised closed form for a globally synchronous symmetric step."""
    n = step.num_ranks
    slow, link = draw_slow_devices(spec, n, rng), draw_slow_links(spec, n, rng)
    comm_gate = step.comm_time * link.max()
    times = np.empty(steps)
    wait = steps * (comm_gate - step.comm_time * link)
    chunk = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, steps, chunk):
        scale = draw_jitter(spec, (min(chunk, steps - start), n), rng) * slow
        gate = scale.max(axis=1)
        times[start:start + gate.size] = step.compute_time * gate + comm_gate
        wait = wait + step.compute_time * (gate[:, None] - scale).sum(axis=0)
    return _summarise(times, step.compute_time + step.comm_time, wait / steps)


def _engine(scenario: _Scenario, spec: StragglerSpec, steps: int,
            rng: np.random.Generator) -> StepTimeDistribution:
    """One full-mode ``simulate`` per step; slow links are not modelled on this path."""
    args = (scenario.model, scenario.training, scenario.cluster, scenario.plan)
    base = simulate(*args, profile=scenario.profile, mode="full", seed=scenario.seed)
    slow = draw_slow_devices(spec, base.num_gpus, rng)
    times, waits = np.empty(steps), np.zeros(base.num_gpus)
    for index in range(steps):
        scale = slow * draw_jitter(spec, (base.num_gpus,), rng)
        result = simulate(*args, profile=scenario.profile, mode="full", seed=scenario.seed,
                          compute_scale=scale)
        times[index] = result.step_time
        waits = waits + np.asarray(result.rank_wait_time, dtype=float)
    return _summarise(times, float(base.step_time), waits / steps)


def step_time_distribution(source: SymmetricStep | _Scenario, spec: StragglerSpec, steps: int,
                           rng: np.random.Generator) -> StepTimeDistribution:
    """Step times over ``steps`` steps with stragglers: closed form or the full-mode engine."""
    _validate(spec)
    if steps < 1:
        raise LongRunError(f"steps must be >= 1, got {steps}")
    if isinstance(source, SymmetricStep):
        return _symmetric(source, spec, steps, rng)
    return _engine(source, spec, steps, rng)
