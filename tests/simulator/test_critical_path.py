"""The critical path is a field of the engine's records, not a label's text (issue 16)."""

from __future__ import annotations

from clustersim.simulator.step.interval import Interval
from clustersim.simulator.step.result import critical_unit


def _unit(stage: int, sync_wait: float, other_bubble: float, label: str = "") -> list[Interval]:
    return [Interval(0, stage, "compute", "compute", 0.0, 1.0, "fwd"),
            Interval(0, stage, "compute", "bubble", 1.0, 1.0 + other_bubble, "wait stage sync"),
            Interval(0, stage, "compute", "bubble", 5.0, 5.0 + sync_wait, label, stage_sync=True)]


def test_the_unit_that_waits_least_at_the_stage_sync_is_critical() -> None:
    # stage 1 waits least at the sync; stage 0's other bubble carries the old label text but is no sync wait
    assert critical_unit(_unit(0, 0.5, 0.0) + _unit(1, 0.2, 3.0)) == (0, 1)
    assert critical_unit(_unit(0, 0.1, 3.0) + _unit(1, 0.2, 0.0)) == (0, 0)


def test_the_label_text_does_not_matter() -> None:
    assert critical_unit(_unit(0, 0.5, 0.0, "x") + _unit(1, 0.2, 0.0, "y")) == (0, 1)
