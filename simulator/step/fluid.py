"""The shared fabric inside the SimPy engine: a transfer's flows finish as engine events.

Owns ``FabricStreams``: it keeps a ``clustersim.simulator.network.sharing.FluidShare`` in step with
the engine's clock, turns each flow's completion into a SimPy event (one pending wake-up at the
next completion; a start or an end that changes the rates re-arms it), and runs a ``Transfer``'s
phases one after another as a process. It also logs the bytes/s on a few watched links (each
stage's representative NIC, ``StreamTransfers.nics``) as piecewise-constant ``nic_rate`` intervals
on the ``nic-out`` / ``nic-in`` streams, for the trace's counter tracks. It decides no schedule
(``clustersim.simulator.step.engine``).
"""

from __future__ import annotations

from typing import Any, Generator, Sequence

import numpy as np
import simpy

from clustersim.simulator.network import FluidShare, Phase, Transfer
from clustersim.simulator.step.interval import Interval

Process = Generator[simpy.Event, Any, None]
"""A SimPy process body."""
Watched = tuple[int, int, str, str]
"""(stage, directed link id, stream ``nic-out`` or ``nic-in``, link name ``"u->v"``): a link whose
rate is logged."""
RATE_DIGITS = 4
"""Significant digits of a logged rate (GB/s): a steady state's periods repeat them exactly."""


def rate_category(rate: float) -> str:
    """The category of a ``nic_rate`` interval at ``rate`` bytes/s (the rate in GB/s is in it, so
    the steady-state extrapolation keeps apart the time spent at each rate when it merges periods)."""
    return f"nic_rate {rate / 1e9:.{RATE_DIGITS}g} GB/s"


def category_rate(category: str) -> float:
    """Bytes/s of a ``nic_rate`` category (``rate_category``'s inverse, to its digits)."""
    return float(category.split()[1]) * 1e9


class FabricStreams:
    """The flows in flight on the fabric of one engine run."""

    def __init__(self, env: simpy.Environment, capacity: np.ndarray, watch: Sequence[Watched] = (),
                 log: list[Interval] | None = None) -> None:
        self.env = env
        self.fluid = FluidShare(capacity)
        self._waiting: dict[int, simpy.Event] = {}
        self._armed = 0
        """Version of the wake-up that is current (older ones are ignored when they fire)."""
        self._watch = tuple((stage, edge, stream) for stage, edge, stream, _ in watch)
        self._names = tuple(name for *_, name in watch)
        self._watch_ids = np.array([e for _, e, _ in self._watch], dtype=np.int64)
        self._index = {e: k for k, (_, e, _) in enumerate(self._watch)}
        self._log = log if log is not None else []
        self._rates = [0.0] * len(self._watch)
        """Each watched link's rate (bytes/s) since ``_open``."""
        self._open = [0.0] * len(self._watch)
        self._at: dict[int, tuple[list[int], list[float]]] = {}
        """Per phase (by identity): which watched links it crosses, and its load on each."""
        self._phase_of: dict[int, Phase] = {}
        """The phase of each flow in flight."""

    def run(self, transfer: Transfer) -> Process:
        """Run ``transfer``: each phase's latency, then its flow until its last byte."""
        for phase in transfer.phases:
            if phase.delay > 0:
                yield self.env.timeout(phase.delay)
            if phase.work > 0 and len(phase.edges):
                fid = self.fluid.start(self.env.now, phase, transfer.traffic)
                self._phase_of[fid] = phase
                done = self.env.event()
                self._waiting[fid] = done
                self._sample()
                self._arm()
                yield done

    def _arm(self) -> None:
        """Schedule a wake-up at the next completion at the current rates."""
        self._armed += 1
        nxt = self.fluid.next_end()
        if nxt is None:
            return
        version = self._armed
        wake = self.env.timeout(max(0.0, nxt[0] - self.env.now))
        wake.callbacks.append(lambda _e: self._fire(version))

    def _fire(self, version: int) -> None:
        """At a wake-up: finish every flow that is done now, then re-arm."""
        if version != self._armed:
            return
        self.fluid.advance(self.env.now)
        while True:
            nxt = self.fluid.next_end()
            if nxt is None or nxt[0] > self.env.now:
                break
            self.fluid.finish(nxt[1])
            self._phase_of.pop(nxt[1], None)
            self._waiting.pop(nxt[1]).succeed()
        self._sample()
        self._arm()

    def _sample(self) -> None:
        """Log each watched link's rate since its last change if it changed now (rates change only
        when a flow starts or ends): one interval per constant stretch, none while idle."""
        if not self._watch:
            return
        rates = [0.0] * len(self._watch)
        for fid, phase in self._phase_of.items():
            pos, load = self._crossing(phase)
            if pos:
                rate = self.fluid.rate(fid)
                for k, x in zip(pos, load):
                    rates[k] += x * rate
        now = self.env.now
        for k, (old, new) in enumerate(zip(self._rates, rates)):
            if old == new or (old > 0 and new > 0 and rate_category(old) == rate_category(new)):
                continue  # the same rate (to its digits): the stretch goes on
            stage, _, stream = self._watch[k]
            if old > 0 and now > self._open[k]:
                self._log.append(Interval(0, stage, stream, rate_category(old), self._open[k], now, self._names[k]))
            self._rates[k], self._open[k] = new, now

    def _crossing(self, phase: Phase) -> tuple[list[int], list[float]]:
        """(watched positions, loads) of the watched links ``phase`` crosses (memoised by identity)."""
        key = id(phase)
        if key not in self._at:
            hit = np.flatnonzero(np.isin(phase.edges, self._watch_ids))
            self._at[key] = ([self._index[int(e)] for e in phase.edges[hit]], [float(x) for x in phase.load[hit]])
        return self._at[key]
