"""The shared fabric inside the SimPy engine: a transfer's flows finish as engine events.

Owns ``FabricStreams``: it keeps a ``clustersim.simulator.network.sharing.FluidShare`` in step with
the engine's clock, turns each flow's completion into a SimPy event (one pending wake-up at the
next completion; a start or an end that changes the rates re-arms it), and runs a ``Transfer``'s
phases one after another as a process. It decides no schedule (``clustersim.simulator.step.engine``).
"""

from __future__ import annotations

from typing import Any, Generator

import numpy as np
import simpy

from clustersim.simulator.network import FluidShare, Transfer

Process = Generator[simpy.Event, Any, None]
"""A SimPy process body."""


class FabricStreams:
    """The flows in flight on the fabric of one engine run."""

    def __init__(self, env: simpy.Environment, capacity: np.ndarray) -> None:
        self.env = env
        self.fluid = FluidShare(capacity)
        self._waiting: dict[int, simpy.Event] = {}
        self._armed = 0
        """Version of the wake-up that is current (older ones are ignored when they fire)."""

    def run(self, transfer: Transfer) -> Process:
        """Run ``transfer``: each phase's latency, then its flow until its last byte."""
        for phase in transfer.phases:
            if phase.delay > 0:
                yield self.env.timeout(phase.delay)
            if phase.work > 0 and len(phase.edges):
                fid = self.fluid.start(self.env.now, phase, transfer.traffic)
                done = self.env.event()
                self._waiting[fid] = done
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
            self._waiting.pop(nxt[1]).succeed()
        self._arm()
