"""The engine's communication streams as transfers on one shared fabric (``fabric_sharing="flows"``).

Owns ``StreamTransfers``: for every call the engine's streams make (pipeline sends in both
directions, DP gradient buckets, ZeRO parameter gathers, and the EP all-to-alls a pass exposes on
the compute stream when they are whole calls) the ``Transfer`` the flows-over-time model
runs, built by ``CommPricer`` over the groups of that call's pipeline stage, and the link
capacities they share (with other tenants' load and degraded links taken away). Built from the
lowered costs (each ``Call`` says what a stream moves), so the byte counts stay those of
``clustersim.simulator.step.lower``. It schedules nothing (``clustersim.simulator.step.engine``).

Other communication inside a pass (TP, CP, FSDP exposed on the compute stream, EP under another
dispatcher or partly hidden) stays priced alone.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from clustersim.simulator.network import CommPricer, Fabric, FabricLoad, Transfer, fabric_of
from clustersim.simulator.plan import destination, lanes
from clustersim.simulator.step.costs import Call, StageCost
from clustersim.simulator.step.fluid import Watched
from clustersim.simulator.step.interval import Interval

FabricSharing = Literal["static", "flows"]
"""``static``: every call takes its priced time (the fast default). ``flows``: the engine's streams
share the fabric's links max-min fairly over time (``clustersim.simulator.network.sharing``)."""


@dataclass(frozen=True, eq=False)
class StreamTransfers:
    """Every engine-stream call as a ``Transfer``, and the capacities the transfers share."""

    capacity: np.ndarray
    """Bytes/s per directed link, other tenants' load and degradations taken away."""
    p2p: dict[tuple[int, str], Transfer] = field(default_factory=dict)
    """(link stage, ``"fwd"``/``"bwd"``) -> the send on that link."""
    buckets: dict[tuple[int, int, int], Transfer] = field(default_factory=dict)
    """(stage, chunk, bucket index) -> the bucket's reduction."""
    gathers: dict[tuple[int, int, int], Transfer] = field(default_factory=dict)
    """(stage, chunk, call index) -> one of the chunk's ZeRO parameter all-gathers
    (``ChunkCost.param_gather_calls``; a call on groups of one moves nothing and has none)."""
    ep: dict[tuple[int, int, str], Transfer] = field(default_factory=dict)
    """(stage, chunk, pass ``"F"``/``"B"``) -> the EP all-to-alls that pass exposes (``ChunkCost.ep_call_*``)."""
    edge_name: Callable[[int], str] = str
    """Name ``"u->v"`` of a link id (for the fabric report)."""
    nics: tuple[Watched, ...] = ()
    """The links whose rates the engine logs for the trace: each stage's representative GPU (of
    the representative pipeline) to its NIC (``nic-out``) and back (``nic-in``)."""


def stream_transfers(pricer: CommPricer, stages: tuple[StageCost, ...], load: FabricLoad) -> StreamTransfers:
    """The transfers of every stream call of ``stages``."""
    fabric = fabric_of(pricer.cluster, pricer.profile)
    reps = pricer.placement.groups("pp")[0]
    edge_id = fabric.edge_id if load.degraded else {}  # every link's name: built only when one is named
    out = StreamTransfers(capacity=load.capacity(fabric.capacity, fabric.link_class, edge_id),
                          edge_name=fabric.edge_name, nics=nic_links(fabric, [int(g) for g in reps]))
    for st in stages:
        for direction in ("fwd", "bwd"):
            tr = pricer.p2p_transfer(st.p2p_size, st.stage, "fwd" if direction == "fwd" else "bwd")
            if tr is not None:
                out.p2p[(st.stage, direction)] = tr
        for ch in st.chunks:
            for i, b in enumerate(ch.buckets):
                tr = _call(pricer, b.call, st.stage, "dp")
                if tr is not None:
                    out.buckets[(st.stage, ch.chunk, i)] = tr
            for i, gather in enumerate(ch.param_gather_calls):
                tr = _call(pricer, gather, st.stage, "param_gather")
                if tr is not None:
                    out.gathers[(st.stage, ch.chunk, i)] = tr
            for kind, call in (("F", ch.ep_call_fwd), ("B", ch.ep_call_bwd)):
                tr = _call(pricer, call, st.stage, "ep")
                if tr is not None and call is not None and _translate(pricer, call, tr):
                    out.ep[(st.stage, ch.chunk, kind)] = tr
    return out


def nic_links(fabric: Fabric, gpus: list[int]) -> tuple[Watched, ...]:
    """(stage, link, stream, name) of the GPU -> NIC and NIC -> GPU links of ``gpus[stage]``
    (none for a GPU wired to no NIC of its own)."""
    nic = np.array([k == "nic" for k in fabric.kind])
    src, dst = np.asarray(fabric.src_of), np.asarray(fabric.dst_of)
    out: list[Watched] = []
    for stage, g in enumerate(gpus):
        node = int(fabric.gpu_node[g])
        for stream, edges in (("nic-out", np.flatnonzero((src == node) & nic[dst])),
                              ("nic-in", np.flatnonzero((dst == node) & nic[src]))):
            out += [(stage, int(e), stream, fabric.edge_name(int(e))) for e in edges[:1]]
    return tuple(out)


def _translate(pricer: CommPricer, call: Call, transfer: Transfer) -> bool:
    """Whether the stage's groups run ``call`` alone in its priced time (they are translates of the
    group the static pricing prices). Where they are not (EP groups of 64 on NVLink domains of 72:
    a later stage's groups straddle two domains), the flows would price another group than the
    static pricing does, and the pass keeps its priced exposed EP."""
    priced = call.count * pricer.time(call.kind, call.size, call.axis)
    return abs(transfer.static_time - priced) <= 1e-9 * priced


def _call(pricer: CommPricer, call: Call | None, stage: int, traffic: Literal["dp", "param_gather", "ep"]) -> Transfer | None:
    if call is None:
        return None
    tr = pricer.transfer(call.kind, call.size, call.axis, stage, traffic)
    return tr.repeated(call.count) if tr is not None and call.count > 1 else tr


def send_counts(schedule: str, pp: int, microbatches: int, vpp: int) -> Counter[tuple[int, str]]:
    """Messages each p2p link ``(link stage, direction)`` carries in one step of the schedule."""
    out: Counter[tuple[int, str]] = Counter()
    for s in range(pp):
        for lane in lanes(schedule, s, pp, microbatches, vpp):
            for action in lane:
                route = destination(action, s, pp, vpp, schedule)
                if route is not None:
                    out[route] += 1
    return out


SHARED = {"p2p_shared": "pp", "dp_shared": "dp", "ep_shared": "ep"}
"""Interval category of the time a call lost to sharing -> its traffic class in the report."""


def link_volume(flows: StreamTransfers, sends: Counter[tuple[int, str]], microbatches: int) -> np.ndarray:
    """Bytes the streams put on each directed link in one step (every concurrent group's): each
    message, bucket and gather once and the EP flows of ``microbatches`` forward and backward
    passes of every chunk."""
    volume = np.zeros(len(flows.capacity))
    calls = [(tr, float(sends[key])) for key, tr in flows.p2p.items()]
    calls += [(tr, 1.0) for tr in (*flows.buckets.values(), *flows.gathers.values())]
    calls += [(tr, float(microbatches)) for tr in flows.ep.values()]
    for tr, count in calls:
        for ph in tr.phases:
            np.add.at(volume, ph.edges, count * ph.load * ph.work)
    return volume


def fabric_report(flows: StreamTransfers, sends: Counter[tuple[int, str]], intervals: list[Interval],
                  step_time: float, top: int = 10, microbatches: int = 0) -> dict[str, Any]:
    """What the streams' traffic did to the fabric in one step: seconds each traffic class lost to
    sharing (the representative pipeline's ``*_shared`` intervals, the time its calls took beyond
    their priced time: ``pp`` on the p2p streams, ``dp`` on the DP stream, buckets and gathers,
    ``ep`` the all-to-alls inside passes when they run as flows; capacity taken by other tenants or
    lost to a degraded link counts here too) and the ``top`` links by time-averaged utilisation of
    the streams' bytes (every message, bucket and gather of the step once, and the EP flows of
    ``microbatches`` forward and backward passes of every chunk; TP/CP traffic and EP priced alone
    inside the passes is not counted), over the capacity left to this job."""
    lost = {"pp": 0.0, "dp": 0.0} | ({"ep": 0.0} if flows.ep else {})
    for iv in intervals:
        if iv.category in SHARED:
            lost[SHARED[iv.category]] += iv.end - iv.start
    volume = link_volume(flows, sends, microbatches)
    util = volume / (flows.capacity * max(step_time, 1e-30))
    hot = np.argsort(-util, kind="stable")[:top]
    links = [{"link": flows.edge_name(int(e)), "utilisation": float(util[e]), "bytes": float(volume[e])}
             for e in hot if volume[e] > 0]
    return {"sharing": "flows", "lost_to_sharing_s": lost, "hottest_links": links}
