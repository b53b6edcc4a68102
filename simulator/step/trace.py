"""Chrome trace (Perfetto) export of a step's timeline.

Owns the conversion of engine intervals to the Trace Event Format: one process per pipeline stage
(and replica in full mode), one thread per stream (compute, DP, p2p), complete ("X") events in
microseconds. Written to a temporary name, then renamed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from clustersim.files import write_json
from clustersim.simulator.step.engine import Interval

STREAMS = {"compute": 0, "dp": 1, "p2p-fwd": 2, "p2p-bwd": 3}


def trace_events(intervals: Iterable[Interval], pp: int) -> list[dict[str, Any]]:
    """Trace events for ``intervals``; pid = replica * pp + stage."""
    events: list[dict[str, Any]] = []
    seen: set[int] = set()
    for iv in intervals:
        pid = iv.replica * pp + iv.stage
        if pid not in seen:
            seen.add(pid)
            events.append({"ph": "M", "name": "process_name", "pid": pid,
                           "args": {"name": f"replica {iv.replica} stage {iv.stage}"}})
            for name, tid in STREAMS.items():
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({
            "ph": "X", "name": iv.label, "cat": iv.category, "pid": pid,
            "tid": STREAMS.get(iv.stream, 9), "ts": iv.start * 1e6, "dur": (iv.end - iv.start) * 1e6,
        })
    return events


def write_trace(intervals: Iterable[Interval], pp: int, path: str | os.PathLike[str]) -> Path:
    """Write a Chrome trace JSON that opens in Perfetto; atomic."""
    doc = {"traceEvents": trace_events(intervals, pp), "displayTimeUnit": "ms"}
    return write_json(path, doc, indent=None, default=None)
