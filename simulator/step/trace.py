"""Chrome trace (Perfetto) export of a step's timeline, in the Trace Event Format.

Owns the conversion of a Result's engine intervals to trace events (Trace Event Format spec,
"JSON Object Format"): one process per pipeline stage (and replica in full mode), pid = 1 +
replica x pp + stage (never 0, which viewers treat as the idle/swapper process), named and sorted;
one thread per stream (compute, DP, p2p forward, p2p backward, EP all-to-all); complete ("X") events in
microseconds whose args say the pass, micro-batch and chunk, the bytes, algorithm and link of
communication; exposed communication named for its axis ("exposed TP", "exposed DP: ..."), never
like the compute it interrupts; flow events ("s"/"f") from each activation transfer to the
stage that receives it; with flows, counter tracks ("C") of each stage's representative NIC, GB/s
out and in over time (a steady state the engine extrapolated is drawn merged, and an instant event
says so); and the run's metadata (scenario, plan, step time) in ``otherData``.
Written through the one atomic writer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from clustersim.files import write_json
from clustersim.simulator.step.engine import Interval
from clustersim.simulator.step.fluid import category_rate
from clustersim.simulator.step.result import Result

STREAMS = {"compute": 0, "dp": 1, "p2p-fwd": 2, "p2p-bwd": 3, "ep": 4}
NAMES = {"exposed_tp": "exposed TP", "exposed_cp": "exposed CP", "exposed_ep": "exposed EP",
         "exposed_pp": "exposed PP: wait for p2p", "bubble": "bubble: wait for a producer",
         "optimizer": "optimizer", "dp_comm": "DP", "p2p": "p2p send",
         "p2p_shared": "p2p send slowed by sharing", "dp_shared": "DP slowed by sharing",
         "ep_shared": "EP all-to-all slowed by sharing",
         "ep_comm": "EP all-to-all", "exposed_offload": "exposed host copy (CPU offloading)"}
"""Slice names by category (compute slices keep the pass label, e.g. ``F3.0``)."""
PASS = re.compile(r"^([FBW])(\d+)\.(\d+)$")
MERGED = re.compile(r"^(\d+) steady periods")
"""The label of an interval that stands for merged steady-state periods (``step.steady``)."""
STRETCHED = re.compile(r" \(x(\d+) steady periods\)$")
"""The label suffix of an interval inside one steady period stretched n-fold (``step.steady``)."""
NIC_TRACKS = {"nic-out": "NIC out", "nic-in": "NIC in"}
"""The engine's NIC rate streams (``step.fluid``) -> counter track name prefix."""
AXIS_OF = {"exposed_tp": ("tp",), "exposed_cp": ("cp",), "exposed_ep": ("ep",), "ep_comm": ("ep",), "dp_comm": ("dp", "dp+cp", "edp", "dp_shard", "dp_rep")}


def pid_of(iv: Interval, pp: int) -> int:
    """The trace process of a unit: 1 + replica x pp + stage."""
    return 1 + iv.replica * pp + iv.stage


def _name(iv: Interval) -> str:
    if iv.category == "compute":
        return iv.label
    if iv.category == "exposed_dp":
        return f"exposed DP: {iv.label}"
    if iv.category in ("dp_comm",):
        return f"DP {iv.label}"
    base = NAMES.get(iv.category, iv.category)
    return f"{base} {iv.label}" if PASS.match(iv.label) else base


def _args(iv: Interval, pp: int, comm: Mapping[str, list[Mapping[str, Any]]], p2p_bytes: float) -> dict[str, Any]:
    out: dict[str, Any] = {"category": iv.category, "stage": iv.stage, "replica": iv.replica}
    m = PASS.match(iv.label)
    if m:
        out.update({"pass": m.group(1), "micro_batch": int(m.group(2)), "chunk": int(m.group(3))})
    if iv.stream.startswith("p2p"):
        src, dst = _p2p_ends(iv, pp)
        out.update({"bytes": p2p_bytes, "algorithm": "send_recv", "link": f"stage {src} -> stage {dst}"})
    for axis in AXIS_OF.get(iv.category, ()):
        rows = comm.get(axis)
        if rows:
            out.update(_collective_args(rows, iv.end - iv.start))
            break
    return out


def _collective_args(rows: list[Mapping[str, Any]], seconds: float) -> dict[str, Any]:
    """The priced collectives of the slice's axis: the one whose time matches, else all of them."""
    match = [r for r in rows if abs(float(r["time_s"]) - seconds) <= 1e-9 * max(seconds, 1e-12)]
    pick = match or rows
    out: dict[str, Any] = {"algorithm": ", ".join(sorted({str(r["algorithm"]) for r in pick})),
           "link": ", ".join(sorted({str(r["busiest_link"]) for r in pick if r.get("busiest_link")}))}
    if match:  # one priced collective is this slice: its kind and size
        out.update({"collective": str(match[0]["kind"]), "bytes": float(match[0]["size_bytes"])})
    else:  # several collectives of the axis share the slice (a layer's gather and scatter, a chunk's buckets)
        out.update({"collectives": ", ".join(sorted({str(r["kind"]) for r in pick}))})
    return out


def _p2p_ends(iv: Interval, pp: int) -> tuple[int, int]:
    """(sender, receiver) stage of a transfer on link ``iv.stage`` (fwd: s -> s+1, bwd: s+1 -> s)."""
    nxt = (iv.stage + 1) % pp
    return (iv.stage, nxt) if iv.stream == "p2p-fwd" else (nxt, iv.stage)


def _metadata(pids: dict[int, tuple[int, int]]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pid, (replica, stage) in sorted(pids.items()):
        events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": f"stage {stage}" + (f" replica {replica}" if replica else "")}},
                   {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
        for name, tid in STREAMS.items():
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    return events


def trace_events(result: Result) -> list[dict[str, Any]]:
    """Every trace event of ``result``: metadata, slices and flows between stages."""
    pp = int(result.plan["pp"])
    comm: dict[str, list[Mapping[str, Any]]] = {}
    for c in result.collectives:
        comm.setdefault(str(c["axis"]), []).append(c)
    p2p_bytes = _p2p_bytes(result)
    pids: dict[int, tuple[int, int]] = {}
    slices: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    nics: list[Interval] = []
    for iv in result.intervals:
        pid = pid_of(iv, pp)
        pids.setdefault(pid, (iv.replica, iv.stage))
        if iv.stream in NIC_TRACKS:
            nics.append(iv)
            continue
        ts, dur = iv.start * 1e6, (iv.end - iv.start) * 1e6
        slices.append({"ph": "X", "name": _name(iv), "cat": iv.category, "pid": pid,
                       "tid": STREAMS.get(iv.stream, 9), "ts": ts, "dur": dur, "args": _args(iv, pp, comm, p2p_bytes)})
        if iv.stream.startswith("p2p"):
            flows += _flow(iv, pp, len(flows) // 2 + 1, ts, dur)
    return _metadata(pids) + slices + flows + nic_counters(nics, pp)


def nic_counters(intervals: list[Interval], pp: int) -> list[dict[str, Any]]:
    """Counter events ("C") of each stage's representative NIC, GB/s out and in over time, from
    its ``nic_rate`` intervals (flows only): the rate at each interval's start, 0 where it goes
    idle. A steady state the engine extrapolated comes back as one interval per rate, the time
    spent at each rate over its periods merged and not in time order: drawn as such, with an
    instant event saying so at its start; one stretched n-fold (``step.steady``: every interval of
    one period n times as long, in order) is drawn stretched, and said so too."""
    tracks: dict[tuple[int, str], list[Interval]] = {}
    for iv in intervals:
        tracks.setdefault((pid_of(iv, pp), iv.stream), []).append(iv)
    events: list[dict[str, Any]] = []
    for (pid, stream), ivs in sorted(tracks.items()):
        ivs.sort(key=lambda iv: iv.start)
        name = f"{NIC_TRACKS[stream]} {_link_of(ivs)} (GB/s)"
        said = ""
        for k, iv in enumerate(ivs):
            note = _extrapolated(iv.label)
            if note and note != said:
                events.append({"ph": "i", "s": "p", "name": f"{name}: {note}", "pid": pid, "tid": 0, "ts": iv.start * 1e6})
            said = note
            events.append({"ph": "C", "name": name, "pid": pid, "ts": iv.start * 1e6,
                           "args": {"GB/s": category_rate(iv.category) / 1e9}})
            if k + 1 == len(ivs) or ivs[k + 1].start > iv.end:
                events.append({"ph": "C", "name": name, "pid": pid, "ts": iv.end * 1e6, "args": {"GB/s": 0.0}})
    return events


def _extrapolated(label: str) -> str:
    """What a NIC interval's label says the extrapolation did to it ("" when nothing)."""
    m = MERGED.match(label)
    if m:
        return f"{m[1]} steady periods extrapolated: time at each rate merged, not in time order"
    m = STRETCHED.search(label)
    if m:
        return f"{m[1]} steady periods extrapolated: one period drawn {m[1]} times as long"
    return ""


def _link_of(ivs: list[Interval]) -> str:
    """The link name of a NIC track (the label of its intervals that are not merged periods)."""
    return next((STRETCHED.sub("", iv.label) for iv in ivs if MERGED.match(iv.label) is None), "")


def _flow(iv: Interval, pp: int, ident: int, ts: float, dur: float) -> list[dict[str, Any]]:
    """An arrow from the transfer (on the sender's p2p thread) to the receiving stage's compute."""
    _, dst = _p2p_ends(iv, pp)
    receiver = 1 + iv.replica * pp + dst
    common = {"name": f"activation {iv.label}" if iv.stream == "p2p-fwd" else f"gradient {iv.label}", "cat": "p2p", "id": ident}
    return [{**common, "ph": "s", "pid": 1 + iv.replica * pp + iv.stage, "tid": STREAMS[iv.stream], "ts": ts},
            {**common, "ph": "f", "bp": "e", "pid": receiver, "tid": STREAMS["compute"], "ts": ts + dur}]


def _p2p_bytes(result: Result) -> float:
    """Bytes of one activation transfer: micro_batch x seq / cp x hidden x 2 bytes (/ tp with SP)."""
    p, labels = result.plan, result.labels
    hidden, seq = labels.get("hidden_size"), labels.get("seq_len")
    if not hidden or not seq:
        return float("nan")
    dtype = 4 if labels.get("precision") == "fp32" else 2
    size = int(p["micro_batch"]) * int(seq) / int(p["cp"]) * int(hidden) * dtype
    return size / (int(p["tp"]) if p.get("sp") else 1)


def trace_document(result: Result) -> dict[str, Any]:
    """The whole trace file: events, display unit, and the run's metadata in ``otherData``."""
    other = {**result.scenario(), "plan": dict(result.plan), "step_time_s": result.step_time,
             "mfu": result.mfu, "mode": result.provenance.get("mode")}
    return {"traceEvents": trace_events(result), "displayTimeUnit": "ms",
            "otherData": other}


def write_trace(result: Result, path: str | os.PathLike[str]) -> Path:
    """Write a Chrome trace JSON that opens in Perfetto; atomic."""
    return write_json(path, trace_document(result), indent=None, default=None)
