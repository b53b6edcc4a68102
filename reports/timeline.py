"""A static timeline (Gantt) of one simulated step, drawn from Chrome-trace events.

Reads the Trace Event Format that the simulator's trace export writes (the lead owns that
writer): complete events ``{"ph": "X", "name", "cat", "ts", "dur", "pid", "tid"}`` with ``ts``
and ``dur`` in microseconds (Trace Event Format spec, "Complete Events"), and metadata events
``{"ph": "M", "name": "process_name" | "thread_name", "args": {"name": ...}}`` that name lanes.
One lane per (pid, tid), one colour per category. Microseconds become seconds once, here.
It does not write traces, nor open Perfetto.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from clustersim.units import MICROSECOND as MICROSECONDS
from clustersim.reports.errors import ReportError
from clustersim.reports.plots import new_axes



def trace_spans(events: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Complete events as rows: lane, name, category, start_s, duration_s (sorted by lane)."""
    events = list(events)
    names = _lane_names(events)
    rows = []
    for event in events:
        if event.get("ph") != "X":
            continue
        missing = [k for k in ("ts", "dur", "pid", "tid") if k not in event]
        if missing:
            raise ReportError(f"timeline: complete event {event.get('name')!r} lacks {missing}; "
                              "each 'X' event needs ts and dur (microseconds), pid and tid")
        key = (event["pid"], event["tid"])
        rows.append({"lane": names.get(key, f"{key[0]}/{key[1]}"), "pid": str(key[0]),
                     "tid": str(key[1]), "name": str(event.get("name", "")),
                     "category": str(event.get("cat", event.get("name", ""))),
                     "start_s": float(event["ts"]) * MICROSECONDS,
                     "duration_s": float(event["dur"]) * MICROSECONDS})
    columns = ["lane", "pid", "tid", "name", "category", "start_s", "duration_s"]
    return pd.DataFrame(rows, columns=columns).sort_values(["pid", "tid", "start_s"],
                                                           kind="stable")


def _lane_names(events: list[Mapping[str, Any]]) -> dict[tuple[object, object], str]:
    """(pid, tid) -> "process / thread" from the metadata events, where they exist."""
    processes: dict[object, str] = {}
    threads: dict[tuple[object, object], str] = {}
    for event in events:
        if event.get("ph") != "M":
            continue
        label = str(dict(event.get("args") or {}).get("name", ""))
        if event.get("name") == "process_name":
            processes[event.get("pid")] = label
        elif event.get("name") == "thread_name":
            threads[(event.get("pid"), event.get("tid"))] = label
    return {key: f"{processes.get(key[0], key[0])} / {name}" for key, name in threads.items()}


def plot_timeline(events: Iterable[Mapping[str, Any]], ax: Axes | None = None) -> Axes:
    """One horizontal lane per (pid, tid), one bar per complete event, coloured by category."""
    spans = trace_spans(events)
    if spans.empty:
        raise ReportError("timeline: no complete ('ph': 'X') events to draw; export the trace "
                          "of a simulated step first")
    lanes = list(dict.fromkeys(spans["lane"]))
    ax = ax if ax is not None else new_axes(width=10.0, height=1.0 + 0.35 * len(lanes))
    categories = list(dict.fromkeys(spans["category"]))
    colors = {c: f"C{i % 10}" for i, c in enumerate(categories)}
    for index, lane in enumerate(lanes):
        rows = spans[spans["lane"] == lane]
        ax.broken_barh(list(zip(rows["start_s"], rows["duration_s"])), (index - 0.4, 0.8),
                       facecolors=[colors[c] for c in rows["category"]], linewidth=0)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title("Timeline of one step")
    ax.legend(handles=[Patch(color=colors[c], label=c) for c in categories[:12]], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
