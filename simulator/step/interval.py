"""The engine's record type: one busy or waiting span of one unit on one stream.

Owns ``Interval`` only, so that the engine (``clustersim.simulator.step.engine``) and its
steady-state extrapolation (``clustersim.simulator.step.steady``) share it without a cycle.
"""

from __future__ import annotations

from typing import NamedTuple


class Interval(NamedTuple):
    """One busy or waiting span of a unit (replica, stage) on one stream."""

    replica: int
    stage: int
    stream: str
    category: str
    start: float
    end: float
    label: str
    stage_sync: bool = False
    """True for a unit's wait at the cross-stage sync before the optimizer (grad-norm all-reduce):
    the critical path is the unit that waits there least (``result.critical_unit``)."""
