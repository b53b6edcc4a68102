"""Phases 3-4: the SimPy engine that runs one training step over the lowered stage costs.

Owns the timeline: one process per (replica, stage) walking its schedule, point-to-point
activation transfers on per-link streams, DP gradient buckets reduced on a separate stream as the
last backward releases them (a barrier across replicas in full mode), ZeRO parameter gathers
prefetched before the first forward, the cross-stage sync before the optimizer, and the optimizer.
Symmetric mode runs one replica (one representative pipeline); full mode runs every DP replica with
per-rank compute scales (stragglers), each unit gated by the slowest rank of its TP/CP group.
It records immutable intervals while running; the ``Result`` is summarised from them at the end.
With ``EngineInput.flows`` the p2p, DP and gather streams' calls, and the EP all-to-alls a pass
exposes, share the fabric's links over time (``clustersim.simulator.step.fluid``): a call slowed by
sharing logs its time alone under its own category and the rest as ``p2p_shared`` / ``dp_shared`` /
``ep_shared`` (EP on the EP stream; the compute stream waits for it all as ``exposed_ep``).
A long steady state is simulated for a few periods only and extrapolated exactly
(``clustersim.simulator.step.steady``), so the cost does not grow with the micro-batches.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generator

import numpy as np
import simpy

from clustersim.simulator.plan import Action, Step, dependency, destination, dualpipe_program, lanes, paired_program
from clustersim.simulator.step import steady
from clustersim.simulator.network import Transfer
from clustersim.simulator.step.costs import ChunkCost, StageCost
from clustersim.simulator.step.fluid import FabricStreams
from clustersim.simulator.step.interval import Interval
from clustersim.simulator.step.lower_dp import overlapped_duration
from clustersim.simulator.step.pairing import combined_pair
from clustersim.simulator.step.streams import StreamTransfers

__all__ = ["EngineInput", "Interval", "run"]

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
class _Run:
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
    """``_layered`` of (replica, stage, forward chunk, backward chunk): the same pairs recur."""
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


def run(inp: EngineInput, *, extrapolate: bool = True) -> tuple[list[Interval], float]:
    """Run one step; returns the intervals and the step time in seconds.

    With ``extrapolate`` a long steady state is run for a few periods and extrapolated exactly;
    its middle comes back compressed (one interval per category and stream for all its periods).
    ``extrapolate=False`` simulates every micro-batch (what the extrapolation is tested against).
    """
    if extrapolate:
        out = steady.extrapolate(lambda m: _simulate(replace(inp, microbatches=m)), inp.microbatches,
                                 *_period_unit(inp))
        if out is not None:
            return out
    return _simulate(inp)


def _period_unit(inp: EngineInput) -> tuple[int, int]:
    """(micro-batches per schedule period, first count worth extrapolating from).

    Interleaved 1F1B maps micro-batches to chunks in groups of pp; DualPipe splits them in two
    halves; the others repeat per micro-batch. From about 4 pp micro-batches on for ZB-H1's split
    backward (8 pp for DualPipe's halves) the warm-up is over on every stage; GPipe's, 1F1B's and the interleaved schedule's
    from about 2 pp (their first short runs start there, the later attempts at twice that).
    """
    pp = len(inp.stages)
    unit = pp if inp.schedule == "interleaved" else 2 if inp.schedule == "dualpipe" else 1
    warm = {"dualpipe": 8, "zb-h1": 4}.get(inp.schedule, 2)
    first = max(warm * pp, 16)
    return unit, -(-first // unit) * unit


def _simulate(inp: EngineInput) -> tuple[list[Interval], float]:
    """Simulate every pass of every micro-batch."""
    st = _Run(inp=inp)
    if inp.flows is not None:
        st.fabric = FabricStreams(st.env, inp.flows.capacity, inp.flows.nics, st.log)
    ends: dict[tuple[int, int], float] = {}
    ready = [[st.env.event() for _ in range(st.pp)] for _ in range(st.replicas)]
    for r in range(st.replicas):
        for s in range(st.pp):
            st.env.process(_unit(st, r, s, ready[r][s]))
    st.env.process(_finish(st, ready, ends))
    st.env.run()
    step = max(ends.values()) + inp.step_overhead
    return st.log, step


def _split_w(inp: EngineInput) -> bool:
    return inp.schedule in ("zb-h1", "dualpipe")


def _unit(st: _Run, r: int, s: int, ready: simpy.Event) -> Process:
    """One stage of one replica: gathers, the schedule's passes, then its DP reduction.

    The stage runs its lane in order; with a split backward, deferred W passes fill the waits, at
    most ``limit`` deferred at a time (ZB-H1's memory bound). DualPipe runs its own fixed program
    instead (``schedules.dualpipe_program``, ``_program``), and so does a paired 1F1B or interleaved
    1F1B (``EngineInput.paired``: ``schedules.paired_program``, each steady forward-backward pair
    started once both inputs are here, as Megatron-Core's combined 1F1B does, never one pass alone
    because its partner's input was late).
    """
    inp, env = st.inp, st.env
    stage = inp.stages[s]
    queues = [deque(q) for q in lanes(inp.schedule, s, st.pp, inp.microbatches, inp.vpp, inp.paired)]
    dp_queue = simpy.Store(env)
    dp_done = env.process(_dp_stream(st, r, s, dp_queue, _bucket_count(stage)))
    if inp.overlap_param_gather and any(c.param_gather for c in stage.chunks):
        env.process(_prefetch(st, r, s))
    left = Counter(v for q in queues for kind, _, v in q if kind == "B")  # passes left per chunk
    if inp.schedule == "dualpipe" or inp.paired:
        program = (dualpipe_program(s, st.pp, inp.microbatches) if inp.schedule == "dualpipe"
                   else paired_program(inp.schedule, s, st.pp, inp.microbatches, inp.vpp))
        yield from _program(st, r, s, program, dp_queue, left)
        yield from _finish_unit(st, r, s, dp_done, ready)
        return
    first_f: set[int] = set()
    pending: deque[Action] = deque()
    limit = st.pp // 2 if inp.schedule == "dualpipe" else st.pp - s - 1
    last_lane = -1
    while any(queues):
        heads = [i for i, q in enumerate(queues) if q]
        ready_now = [i for i in heads if _input_ready(st, r, s, queues[i][0])]
        if not ready_now and pending:
            yield from _pass(st, r, s, pending.popleft(), dp_queue, left)
            continue
        if not ready_now:
            t0 = env.now
            yield simpy.AnyOf(env, [_input_event(st, r, s, queues[i][0]) for i in heads])
            ready_now = [i for i in heads if _input_ready(st, r, s, queues[i][0])]
            _log_wait(st, r, s, queues[ready_now[0]][0], t0)
        lane = next((i for i in ready_now if i != last_lane), ready_now[0])
        action, last_lane = queues[lane].popleft(), lane
        kind, mb, v = action
        if kind == "F" and v not in first_f:
            first_f.add(v)
            yield from _wait_gather(st, r, s, v)
        yield from _pass(st, r, s, action, dp_queue, left)
        if kind == "B" and _split_w(inp):
            pending.append(("W", mb, v))
            if len(pending) > limit:
                yield from _pass(st, r, s, pending.popleft(), dp_queue, left)
    for w in pending:
        yield from _pass(st, r, s, w, dp_queue, left)
    yield from _finish_unit(st, r, s, dp_done, ready)


def _finish_unit(st: _Run, r: int, s: int, dp_done: simpy.Process, ready: simpy.Event) -> Process:
    """Wait for the stage's DP reduction (logged as exposed DP), then report the stage done."""
    t0 = st.env.now
    yield dp_done
    if st.env.now > t0:
        st.log.append(Interval(r, s, "compute", "exposed_dp", t0, st.env.now, "wait DP reduction"))
    ready.succeed()


def _program(st: _Run, r: int, s: int, program: list[Step], dp_queue: simpy.Store, left: Counter[int]) -> Process:
    """Run a fixed program (DualPipe's own order, ``schedules.dualpipe_program``) step by step: each
    step waits for its passes' inputs; a forward-backward step runs as a pair (``_pair``) when one of
    the two has all-to-alls to hide, else as its two passes back to back."""
    first_f: set[int] = set()
    for step in program:
        for action in step:
            if not _input_ready(st, r, s, action):
                t0 = st.env.now
                yield _input_event(st, r, s, action)
                _log_wait(st, r, s, action, t0)
            if action[0] == "F" and action[2] not in first_f:
                first_f.add(action[2])
                yield from _wait_gather(st, r, s, action[2])
        chunks = st.inp.stages[s].chunks
        if len(step) == 2 and sum(chunks[v].hideable_ep(k) for k, _, v in step) > 0:
            yield from _pair(st, r, s, (step[0], step[1]), dp_queue, left)
            continue
        for action in step:
            yield from _pass(st, r, s, action, dp_queue, left)


def _input_event(st: _Run, r: int, s: int, action: Action) -> simpy.Event:
    dep = dependency(action, s, st.pp, st.inp.vpp, st.inp.schedule)
    assert dep is not None, "a pass without an input is always ready"
    return st.event((r, dep[0], dep[1]))


def _input_ready(st: _Run, r: int, s: int, action: Action) -> bool:
    dep = dependency(action, s, st.pp, st.inp.vpp, st.inp.schedule)
    return dep is None or st.event((r, dep[0], dep[1])).triggered


def _pass(st: _Run, r: int, s: int, action: Action, dp_queue: simpy.Store, left: Counter[int]) -> Process:
    """Run one pass; the chunk's last backward (its last W with a split backward) releases its DP
    buckets. With its EP all-to-alls as flows (``StreamTransfers.ep``) the pass's ``exposed_ep``
    runs on the shared fabric in its place (after the compute and the TP/CP waits, as priced)."""
    kind, mb, v = action
    chunk = st.inp.stages[s].chunks[v]
    start = st.env.now
    ep = st.inp.flows.ep.get((s, v, kind)) if st.inp.flows is not None else None
    parts = chunk.parts(kind, _split_w(st.inp))
    head = parts if ep is None else {k: x for k, x in parts.items() if k not in ("exposed_ep", "exposed_dp")}
    dur = _record_parts(st, r, s, head, f"{kind}{mb}.{v}", start)
    release = False
    if kind == ("W" if _split_w(st.inp) else "B"):
        left[v] -= 1
        release = left[v] == 0
    if release and (ep is None or st.inp.overlap_grad_reduce):  # at their fractions of the pass as priced
        priced = dur if ep is None else dur + parts["exposed_ep"] + parts["exposed_dp"]
        st.env.process(_release(st, dp_queue, chunk, start, priced))
    yield st.env.timeout(dur)
    if ep is not None:
        yield from _ep_flow(st, r, s, ep, f"{kind}{mb}.{v}")
        tail = _record_parts(st, r, s, {"exposed_dp": parts["exposed_dp"]}, f"{kind}{mb}.{v}", st.env.now)
        yield st.env.timeout(tail)
        if release and not st.inp.overlap_grad_reduce:  # after the pass, however long sharing made it
            st.env.process(_release(st, dp_queue, chunk, st.env.now, 0.0))
    _send(st, r, s, action)


def _ep_flow(st: _Run, r: int, s: int, transfer: Transfer, label: str) -> Process:
    """A pass's EP all-to-alls on the shared fabric: the compute stream waits for them (all of it
    ``exposed_ep``); the EP stream logs their time alone and what sharing added (``ep_shared``)."""
    t0 = st.env.now
    yield from _transfer(st, r, s, "ep", "ep_comm", transfer, label)
    if st.env.now > t0:
        st.log.append(Interval(r, s, "compute", "exposed_ep", t0, st.env.now, label))


def _pair(st: _Run, r: int, s: int, pair: tuple[Action, Action], dp_queue: simpy.Store,
          left: Counter[int]) -> Process:
    """A forward and a backward chunk run together (DualPipe, DeepSeek-V3 report Figure 4), as two
    streams: the compute stream runs the forward's compute (and its TP/CP/DP waits), then the
    backward's; the EP stream runs the forward's all-to-alls, then the backward's. The forward is
    done when its compute and its all-to-alls are (its output leaves then), the pair when both
    streams are; what the all-to-alls outlast the compute by is logged as exposed EP. A pair of a
    combined-1F1B plan (``EngineInput.paired``) lasts what ``step.pairing.combined_pair`` gives for
    its MoE layers (Megatron-Core's node order and the all-to-all slowdown) plus the waits outside
    them; DualPipe's compute slows while the EP stream is busy (``_slowed``)."""
    env, split = st.env, _split_w(st.inp)
    start = t = env.now
    comm = 0.0
    first, second = sorted(pair, key=lambda a: a[0] != "F")  # forward first
    pair = (first, second)
    done: list[float] = []
    chunks = [st.inp.stages[s].chunks[v] for _, _, v in pair]
    total = sum(ch.hideable_ep(k) for ch, (k, _, _) in zip(chunks, pair))
    key = (r, s, pair[0][2], pair[1][2])
    if key not in st.layered:
        st.layered[key] = _layered(st, r, s, chunks[0], chunks[1])
    layered = st.layered[key]  # Megatron-Core's combined 1F1B, layer by layer
    compute = 0.0
    for kind, mb, v in pair:
        chunk = st.inp.stages[s].chunks[v]
        comm += chunk.hideable_ep(kind)
        for cat, secs in chunk.parts(kind, split, paired=True).items():
            if secs > 0:
                d = secs * float(st.inp.scale[r, s]) if cat == "compute" else secs
                st.log.append(Interval(r, s, "compute", cat, t, t + d, f"{kind}{mb}.{v}"))
                t += d
                if cat == "compute":
                    compute += d
                    if layered is None:
                        t = _slowed(st, r, s, d, t, start + total - (t - d), f"{kind}{mb}.{v}")
                    t = _sync_wait(st, r, s, d, t, f"{kind}{mb}.{v}")
        done.append(max(t, start + comm))
    if layered is not None:  # the layers' chains and the slowdown; the waits outside them add as they are
        other = t - start - compute
        done = [start + layered[1] + other, start + max(t - start, layered[0] + other)]
    end = done[-1]
    label = "+".join(f"{k}{mb}.{v}" for k, mb, v in pair)
    if comm > 0:
        st.log.append(Interval(r, s, "ep", "ep_comm", start, start + comm, label))
    if end > t:
        st.log.append(Interval(r, s, "compute", "exposed_ep", t, end, f"wait all-to-all {label}"))
    for kind, _, v in pair:
        if kind == ("W" if split else "B"):
            left[v] -= 1
            if left[v] == 0:
                st.env.process(_release(st, dp_queue, st.inp.stages[s].chunks[v], start, end - start))
    env.process(_send_at(st, r, s, pair[0], done[0]))
    yield env.timeout(end - start)
    _send(st, r, s, pair[1])


def _layered(st: _Run, r: int, s: int, fwd: ChunkCost, bwd: ChunkCost) -> tuple[float, float] | None:
    """(seconds, forward done) of a paired forward and backward of a combined-1F1B plan
    (``EngineInput.paired``) layer by layer (``step.pairing.combined_pair``), their compute at the
    unit's scale; None for DualPipe (its own component schedule hides what the pair's streams can,
    DeepSeek-V3 report Figure 4) or when a pass has no MoE layer or nothing to hide."""
    if not st.inp.paired:
        return None
    f, b = fwd.split("F"), bwd.split("B")
    if f is None or b is None:
        return None
    k = float(st.inp.scale[r, s])
    return combined_pair(f.scaled(k), b.scaled(k), st.inp.ep_slowdown)


def _slowed(st: _Run, r: int, s: int, compute: float, t: float, beside: float, label: str) -> float:
    """After ``compute`` seconds of a paired pass ending at ``t``, of which the EP stream's
    all-to-alls ran beside the first ``beside`` seconds: the time the all-to-alls' share of SMs and
    HBM bandwidth cost it (``EngineInput.ep_slowdown``; ``lower_dp.overlapped_duration``), logged as
    exposed EP; returns when the pass's compute ends."""
    extra = overlapped_duration(compute, beside, st.inp.ep_slowdown) - compute
    if extra <= 0:
        return t
    st.log.append(Interval(r, s, "compute", "exposed_ep", t, t + extra, f"slowed by all-to-all {label}"))
    return t + extra


def _send_at(st: _Run, r: int, s: int, action: Action, at: float) -> Process:
    """Ship ``action``'s output at time ``at`` (a paired forward, done before its pair)."""
    if at > st.env.now:
        yield st.env.timeout(at - st.env.now)
    _send(st, r, s, action)


def _bucket_count(stage: StageCost) -> int:
    return sum(len(c.buckets) for c in stage.chunks)


def _record_parts(st: _Run, r: int, s: int, parts: dict[str, float], label: str, start: float) -> float:
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
                t = _sync_wait(st, r, s, d, t, label)
    return t - start


def _sync_wait(st: _Run, r: int, s: int, compute: float, t: float, label: str) -> float:
    """After ``compute`` seconds ending at ``t``: the wait for the slowest synchronising rank
    (``EngineInput.sync_wait`` of it), logged as exposed DP; returns when the wait ends."""
    law = st.inp.sync_wait_of
    wait = compute * (st.inp.sync_wait if law is None else law(compute))
    if wait <= 0:
        return t
    st.log.append(Interval(r, s, "compute", "exposed_dp", t, t + wait, f"wait slowest rank {label}"))
    return t + wait


def _log_wait(st: _Run, r: int, s: int, action: Action, t0: float) -> None:
    """Split a wait that ended now into bubble (producer still busy) and exposed p2p."""
    dep = dependency(action, s, st.pp, st.inp.vpp, st.inp.schedule)
    t1 = st.env.now
    if dep is None or t1 <= t0:
        return
    produced = min(max(st.produced.get((r, dep[0], dep[1]), t0), t0), t1)
    if produced > t0:
        st.log.append(Interval(r, s, "compute", "bubble", t0, produced, "wait"))
    if t1 > produced:
        st.log.append(Interval(r, s, "compute", "exposed_pp", produced, t1, "wait p2p"))


def _send(st: _Run, r: int, s: int, action: Action) -> None:
    """After a pass, ship its output over the p2p link to the stage that needs it (if any)."""
    route = destination(action, s, st.pp, st.inp.vpp, st.inp.schedule)
    if route is None:
        return
    link_stage, direction = route
    kind, mb, v = action
    key = (r, action, s)
    now = st.env.now
    st.produced[key] = now
    transfer = st.inp.flows.p2p.get((link_stage, direction)) if st.inp.flows is not None else None
    if transfer is not None:
        st.env.process(_send_flow(st, (r, link_stage, direction), transfer, st.event(key), f"{kind}{mb}.{v}"))
        return
    # the link carries one message at a time (FIFO): start when both the data and the link are free
    link = (r, link_stage, direction)
    start = max(now, st.link_free.get(link, 0.0))
    end = start + st.inp.stages[link_stage].p2p
    st.link_free[link] = end
    if end > start:
        st.log.append(Interval(r, link_stage, f"p2p-{direction}", "p2p", start, end, f"{kind}{mb}.{v}"))
    # the receiver's event fires when the message lands: a Timeout counts as triggered from the
    # moment it is made, so it is never the event a receiver checks (it would start early)
    landed = st.event(key)
    st.env.timeout(end - now).callbacks.append(lambda _e: _succeed(landed))


def _send_flow(st: _Run, link: tuple[int, int, str], transfer: Transfer, arrival: simpy.Event, label: str) -> Process:
    """A p2p message as flows: after the link's previous message (FIFO), then ``arrival`` fires."""
    before = st.link_done.get(link)
    done = st.link_done[link] = st.env.event()
    if before is not None and not before.processed:
        yield before
    yield from _transfer(st, link[0], link[1], f"p2p-{link[2]}", "p2p", transfer, label)
    done.succeed()
    if not arrival.triggered:
        arrival.succeed()


def _transfer(st: _Run, r: int, s: int, stream: str, category: str, transfer: Transfer, label: str) -> Process:
    """Run ``transfer`` on the shared fabric; log its time alone, and what sharing added after it."""
    assert st.fabric is not None, "transfers run only with flows"
    t0 = st.env.now
    yield from st.fabric.run(transfer)
    alone = min(t0 + transfer.static_time, st.env.now)
    if st.env.now - alone <= 1e-9 * transfer.static_time:  # not slowed (up to float rounding)
        alone = st.env.now
    if alone > t0:
        st.log.append(Interval(r, s, stream, category, t0, alone, label))
    if st.env.now > alone:
        shared = {"p2p": "p2p_shared", "ep_comm": "ep_shared"}.get(category, "dp_shared")
        st.log.append(Interval(r, s, stream, shared, alone, st.env.now, label))


def _succeed(event: simpy.Event) -> None:
    """Trigger ``event`` (a callback: SimPy callbacks return nothing)."""
    event.succeed()


def _release(st: _Run, queue: simpy.Store, chunk: ChunkCost, start: float, dur: float) -> Process:
    """Hand the chunk's gradient buckets to the DP stream as the last backward produces them."""
    for i, b in enumerate(chunk.buckets):
        at = start + b.at * dur if st.inp.overlap_grad_reduce else start + dur
        if at > st.env.now:
            yield st.env.timeout(at - st.env.now)
        yield queue.put((chunk.chunk, i, b.time))


def _dp_stream(st: _Run, r: int, s: int, queue: simpy.Store, count: int) -> Process:
    """Reduce buckets one after another; in full mode each waits for every replica's copy."""
    for n in range(count):
        chunk, i, secs = yield queue.get()
        yield _barrier(st, s, n)
        transfer = st.inp.flows.buckets.get((s, chunk, i)) if st.inp.flows is not None else None
        if transfer is not None:
            yield from _transfer(st, r, s, "dp", "dp_comm", transfer, f"bucket {chunk}.{i}")
            continue
        t0 = st.env.now
        yield st.env.timeout(secs)
        st.log.append(Interval(r, s, "dp", "dp_comm", t0, st.env.now, f"bucket {chunk}.{i}"))


def _barrier(st: _Run, s: int, n: int) -> simpy.Event:
    """An event that fires when every replica has reached bucket ``n`` of stage ``s``."""
    waiting = st.barriers.setdefault((s, n), [])
    ev = st.env.event()
    waiting.append(ev)
    if len(waiting) == st.replicas:
        for e in waiting:
            e.succeed()
    return ev


def _prefetch(st: _Run, r: int, s: int) -> Process:
    """ZeRO-1/2 parameter all-gathers of the previous step's update, chunk by chunk.

    The event of a chunk fires with the time its gathers start (layer-pipelined chunks) or when
    they end (``param_gather_lead`` < 0: the forward needs the whole chunk).
    """
    for chunk in st.inp.stages[s].chunks:
        ev = st.gathered.setdefault((r, s, chunk.chunk), st.env.event())
        t0 = st.env.now
        if chunk.param_gather_lead >= 0:
            ev.succeed(t0)
        flows = st.inp.flows.gathers if st.inp.flows is not None else {}
        # one after another; a call without a transfer (groups of one) takes no time
        keys = [(s, chunk.chunk, i) for i in range(len(chunk.param_gather_calls))]
        transfers = [flows[k] for k in keys if k in flows]
        for transfer in transfers:
            yield from _transfer(st, r, s, "dp", "dp_comm", transfer, f"param gather {chunk.chunk}")
        if not transfers:
            yield st.env.timeout(chunk.param_gather)
            st.log.append(Interval(r, s, "dp", "dp_comm", t0, st.env.now, f"param gather {chunk.chunk}"))
        if not ev.triggered:
            ev.succeed(st.env.now)


def _wait_gather(st: _Run, r: int, s: int, v: int) -> Process:
    """Before a chunk's first forward: wait for its gathers (or, pipelined, for their lead)."""
    chunk = st.inp.stages[s].chunks[v]
    if not (st.inp.overlap_param_gather and chunk.param_gather > 0):
        return
    t0 = st.env.now
    started = yield st.gathered.setdefault((r, s, chunk.chunk), st.env.event())
    if chunk.param_gather_lead >= 0:
        lead = chunk.param_gather_lead - (st.env.now - started)
        if lead > 0:
            yield st.env.timeout(lead)
    if st.env.now > t0:
        st.log.append(Interval(r, s, "compute", "exposed_dp", t0, st.env.now, "wait param gather"))


def _finish(st: _Run, ready: list[list[simpy.Event]], ends: dict[tuple[int, int], float]) -> Process:
    """Cross-stage sync (grad-norm), then every unit's optimizer and unoverlapped gathers."""
    done_at: dict[tuple[int, int], float] = {}
    for r, row in enumerate(ready):
        for s, ev in enumerate(row):
            def mark(_e: simpy.Event, key: tuple[int, int] = (r, s)) -> None:
                done_at[key] = st.env.now

            ev.callbacks.append(mark)
    yield simpy.AllOf(st.env, [e for row in ready for e in row])
    sync = st.env.now
    for (r, s), t in done_at.items():
        if sync > t:
            st.log.append(Interval(r, s, "compute", "bubble", t, sync, "wait stage sync", stage_sync=True))
        stage = st.inp.stages[s]
        if stage.grad_sync:
            st.log.append(Interval(r, s, "compute", "exposed_tp", sync, sync + stage.grad_sync, "SP norm grads"))
        t_opt = sync + stage.grad_sync + stage.optimizer
        st.log.append(Interval(r, s, "compute", "optimizer", sync + stage.grad_sync, t_opt, "optimizer"))
        tail = 0.0 if st.inp.overlap_param_gather else sum(c.param_gather for c in stage.chunks)
        if tail:
            st.log.append(Interval(r, s, "compute", "exposed_dp", t_opt, t_opt + tail, "param gather"))
        ends[(r, s)] = t_opt + tail
