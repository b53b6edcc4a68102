"""The engine's input and the mutable state of one of its runs, with the bookkeeping every pass uses.

Owns ``EngineInput`` (what ``clustersim.simulator.step.engine.run`` runs), ``Run`` (one run's SimPy
environment, log and events; it lives only inside ``run``), and the helpers that log a pass's parts
(``record_parts``) and its wait for the slowest synchronising rank (``sync_wait``). It schedules
nothing: the stage processes are ``engine``'s, the streams ``engine_comm``'s, the pairs ``engine_pair``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generator

import numpy as np
import simpy

from clustersim.simulator.plan import Action
from clustersim.simulator.step.costs import StageCost
from clustersim.simulator.step.fluid import FabricStreams
from clustersim.simulator.step.interval import Interval
from clustersim.simulator.step.streams import StreamTransfers

Process = Generator[simpy.Event, Any, None]
"""A SimPy process body: yields events, is sent each event's value, returns nothing."""


@dataclass(frozen=True)
class EngineInput:
    """What the engine runs: stage costs, schedule and per-unit compute scales."""

    stages: tuple[StageCost, ...]
    schedule: str
    microbatches: int
    vpp: int
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    scale: np.ndarray
    """Compute multiplier per (replica, stage); shape (replicas, pp); ones when symmetric."""
    step_overhead: float = 0.0
    flows: StreamTransfers | None = None
    """The streams' calls as transfers sharing the fabric (symmetric mode); None: priced times."""
    sync_wait: float = 0.0
    """Seconds each pass waits for the slowest rank it synchronises with, per second of its compute
    (``clustersim.simulator.step.jitter.sync_wait_fraction``); logged as exposed DP after the compute."""
    sync_wait_of: Callable[[float], float] | None = None
    """When set, replaces ``sync_wait``: the wait fraction after a pass of that many seconds of
    compute (the pass-length law, ``clustersim.simulator.step.jitter.pass_wait_fraction``)."""
    paired: bool = False
    """The plan runs 1F1B or interleaved 1F1B as overlapped forward-backward pairs
    (``ParallelPlan.paired_steady``): every stage runs ``schedules.paired_program``. Until December
    2026 a pass paired only when its partner's input happened to be there already, so a few percent
    of compute speed could flip a whole steady state between paired and exposed (a step time that
    jumped by 10 % and was not monotone in the GPU's speed)."""
    ep_slowdown: float = 0.0
    """Fraction by which a paired pass's compute slows while its EP stream runs the pair's
    all-to-alls beside it (the profile's ``overlap_slowdown["all_to_all"]``: the dispatch and combine
    kernels take SMs and HBM bandwidth); the extra is logged as exposed EP. 0: free overlap."""


@dataclass
class Run:
    """Mutable state of one engine run (lives only inside ``run``)."""

    inp: EngineInput
    env: simpy.Environment = field(default_factory=simpy.Environment)
    log: list[Interval] = field(default_factory=list)
    arrive: dict[tuple[int, Action, int], simpy.Event] = field(default_factory=dict)
    produced: dict[tuple[int, Action, int], float] = field(default_factory=dict)
    link_free: dict[tuple[int, int, str], float] = field(default_factory=dict)
    barriers: dict[tuple[int, int], list[simpy.Event]] = field(default_factory=dict)
    gathered: dict[tuple[int, int, int], simpy.Event] = field(default_factory=dict)
    layered: dict[tuple[int, int, int, int], tuple[float, float] | None] = field(default_factory=dict)
    """``engine_pair.layered_pair`` of (replica, stage, forward chunk, backward chunk): the same pairs recur."""
    fabric: FabricStreams | None = None
    link_done: dict[tuple[int, int, str], simpy.Event] = field(default_factory=dict)
    """Flows: the event at which each p2p link's last queued message has gone."""

    @property
    def pp(self) -> int:
        return len(self.inp.stages)

    @property
    def replicas(self) -> int:
        return int(self.inp.scale.shape[0])

    def event(self, key: tuple[int, Action, int]) -> simpy.Event:
        if key not in self.arrive:
            self.arrive[key] = self.env.event()
        return self.arrive[key]


def split_w(inp: EngineInput) -> bool:
    return inp.schedule in ("zb-h1", "dualpipe")


WAIT_ROUNDOFF = 1e-12
"""A wait no longer than this fraction of the clock is the floating-point round-off of two equal
times (an input that arrives as its consumer frees up, summed along two paths: 1e-17 s waits at a
50 s clock), not a wait: it is not logged. Logged, it made runs of different micro-batch counts
differ by whether two sums happened to round apart, and the steady state went unfound
(``steady``; tests/simulator/test_steady.py)."""


def log_wait_interval(st: Run, r: int, s: int, category: str, t0: float, t1: float, label: str,
                      stage_sync: bool = False) -> None:
    """Log a wait of unit (r, s) on its compute stream from ``t0`` to ``t1`` unless it is no longer
    than ``WAIT_ROUNDOFF`` of the clock."""
    if t1 - t0 > WAIT_ROUNDOFF * abs(t1):
        st.log.append(Interval(r, s, "compute", category, t0, t1, label, stage_sync=stage_sync))


def record_parts(st: Run, r: int, s: int, parts: dict[str, float], label: str, start: float) -> float:
    """Log a pass's ``parts`` (seconds by cause) from ``start`` one after another; returns their
    scaled duration."""
    scale = float(st.inp.scale[r, s])
    t = start
    for cat, secs in parts.items():
        if secs > 0:
            d = secs * scale if cat == "compute" else secs
            st.log.append(Interval(r, s, "compute", cat, t, t + d, label))
            t += d
            if cat == "compute":
                t = sync_wait(st, r, s, d, t, label)
    return t - start


def sync_wait(st: Run, r: int, s: int, compute: float, t: float, label: str) -> float:
    """After ``compute`` seconds ending at ``t``: the wait for the slowest synchronising rank
    (``EngineInput.sync_wait`` of it), logged as exposed DP; returns when the wait ends."""
    law = st.inp.sync_wait_of
    wait = compute * (st.inp.sync_wait if law is None else law(compute))
    if wait <= 0:
        return t
    st.log.append(Interval(r, s, "compute", "exposed_dp", t, t + wait, f"wait slowest rank {label}"))
    return t + wait

