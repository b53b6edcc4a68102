"""The timeline reads Chrome Trace Event Format (ts/dur in microseconds) into seconds."""

from __future__ import annotations

import pytest

from clustersim.reports.errors import ReportError
from clustersim.reports.timeline import plot_timeline, trace_spans

EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "stage 0"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "compute"}},
    {"ph": "X", "name": "F0", "cat": "forward", "ts": 0, "dur": 1500, "pid": 0, "tid": 1},
    {"ph": "X", "name": "B0", "cat": "backward", "ts": 1500, "dur": 3000, "pid": 0, "tid": 1},
    {"ph": "X", "name": "allreduce", "cat": "dp", "ts": 2000, "dur": 2500, "pid": 1, "tid": 7},
]


def test_spans_in_seconds_with_lane_names() -> None:
    spans = trace_spans(EVENTS)
    assert len(spans) == 3  # metadata events are not spans
    first = spans.iloc[0]
    assert first["lane"] == "stage 0 / compute"
    assert first["duration_s"] == pytest.approx(1.5e-3)  # 1500 us
    assert spans.iloc[1]["start_s"] == pytest.approx(1.5e-3)
    assert spans.iloc[2]["lane"] == "1/7"  # unnamed lane: pid/tid


def test_plot_has_one_lane_per_thread() -> None:
    ax = plot_timeline(EVENTS)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 0 / compute", "1/7"]
    assert ax.get_xlim()[1] >= 4.5e-3


def test_bad_events_are_named() -> None:
    with pytest.raises(ReportError, match="lacks"):
        trace_spans([{"ph": "X", "name": "F0", "ts": 0, "pid": 0, "tid": 0}])
    with pytest.raises(ReportError, match="no complete"):
        plot_timeline(EVENTS[:2])
