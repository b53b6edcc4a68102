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
Here: ``run`` and each stage's process (its lane or fixed program, its passes, the optimizer); the
run's state in ``engine_state``, the streams in ``engine_comm``, the paired passes in ``engine_pair``.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import replace

import simpy

from clustersim.simulator.plan import Action, Step, dualpipe_program, lanes, paired_program
from clustersim.simulator.step import steady
from clustersim.simulator.step.engine_comm import (
    bucket_count, dp_stream, ep_flow, input_event, input_ready, log_wait, prefetch, release, send, wait_gather,
)
from clustersim.simulator.step.engine_pair import run_pair
from clustersim.simulator.step.engine_state import EngineInput, Process, Run, log_wait_interval, record_parts, split_w
from clustersim.simulator.step.fluid import FabricStreams
from clustersim.simulator.step.interval import Interval

__all__ = ["EngineInput", "Interval", "run"]


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
    st = Run(inp=inp)
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


def _unit(st: Run, r: int, s: int, ready: simpy.Event) -> Process:
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
    dp_done = env.process(dp_stream(st, r, s, dp_queue, bucket_count(stage)))
    if inp.overlap_param_gather and any(c.param_gather for c in stage.chunks):
        env.process(prefetch(st, r, s))
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
        ready_now = [i for i in heads if input_ready(st, r, s, queues[i][0])]
        if not ready_now and pending:
            yield from _pass(st, r, s, pending.popleft(), dp_queue, left)
            continue
        if not ready_now:
            t0 = env.now
            yield simpy.AnyOf(env, [input_event(st, r, s, queues[i][0]) for i in heads])
            ready_now = [i for i in heads if input_ready(st, r, s, queues[i][0])]
            log_wait(st, r, s, queues[ready_now[0]][0], t0)
        lane = next((i for i in ready_now if i != last_lane), ready_now[0])
        action, last_lane = queues[lane].popleft(), lane
        kind, mb, v = action
        if kind == "F" and v not in first_f:
            first_f.add(v)
            yield from wait_gather(st, r, s, v)
        yield from _pass(st, r, s, action, dp_queue, left)
        if kind == "B" and split_w(inp):
            pending.append(("W", mb, v))
            if len(pending) > limit:
                yield from _pass(st, r, s, pending.popleft(), dp_queue, left)
    for w in pending:
        yield from _pass(st, r, s, w, dp_queue, left)
    yield from _finish_unit(st, r, s, dp_done, ready)


def _finish_unit(st: Run, r: int, s: int, dp_done: simpy.Process, ready: simpy.Event) -> Process:
    """Wait for the stage's DP reduction (logged as exposed DP), then report the stage done."""
    t0 = st.env.now
    yield dp_done
    log_wait_interval(st, r, s, "exposed_dp", t0, st.env.now, "wait DP reduction")
    ready.succeed()


def _program(st: Run, r: int, s: int, program: list[Step], dp_queue: simpy.Store, left: Counter[int]) -> Process:
    """Run a fixed program (DualPipe's own order, ``schedules.dualpipe_program``) step by step: each
    step waits for its passes' inputs; a forward-backward step runs as a pair (``pair``) when one of
    the two has all-to-alls to hide, else as its two passes back to back."""
    first_f: set[int] = set()
    for step in program:
        for action in step:
            if not input_ready(st, r, s, action):
                t0 = st.env.now
                yield input_event(st, r, s, action)
                log_wait(st, r, s, action, t0)
            if action[0] == "F" and action[2] not in first_f:
                first_f.add(action[2])
                yield from wait_gather(st, r, s, action[2])
        chunks = st.inp.stages[s].chunks
        if len(step) == 2 and sum(chunks[v].hideable_ep(k) for k, _, v in step) > 0:
            yield from run_pair(st, r, s, (step[0], step[1]), dp_queue, left)
            continue
        for action in step:
            yield from _pass(st, r, s, action, dp_queue, left)


def _pass(st: Run, r: int, s: int, action: Action, dp_queue: simpy.Store, left: Counter[int]) -> Process:
    """Run one pass; the chunk's last backward (its last W with a split backward) releases its DP
    buckets. With its EP all-to-alls as flows (``StreamTransfers.ep``) the pass's ``exposed_ep``
    runs on the shared fabric in its place (after the compute and the TP/CP waits, as priced)."""
    kind, mb, v = action
    chunk = st.inp.stages[s].chunks[v]
    start = st.env.now
    ep = st.inp.flows.ep.get((s, v, kind)) if st.inp.flows is not None else None
    parts = chunk.parts(kind, split_w(st.inp))
    head = parts if ep is None else {k: x for k, x in parts.items() if k not in ("exposed_ep", "exposed_dp")}
    dur = record_parts(st, r, s, head, f"{kind}{mb}.{v}", start)
    last = False
    if kind == ("W" if split_w(st.inp) else "B"):
        left[v] -= 1
        last = left[v] == 0
    if last and (ep is None or st.inp.overlap_grad_reduce):  # at their fractions of the pass as priced
        priced = dur if ep is None else dur + parts["exposed_ep"] + parts["exposed_dp"]
        st.env.process(release(st, dp_queue, chunk, start, priced))
    yield st.env.timeout(dur)
    if ep is not None:
        yield from ep_flow(st, r, s, ep, f"{kind}{mb}.{v}")
        tail = record_parts(st, r, s, {"exposed_dp": parts["exposed_dp"]}, f"{kind}{mb}.{v}", st.env.now)
        yield st.env.timeout(tail)
        if last and not st.inp.overlap_grad_reduce:  # after the pass, however long sharing made it
            st.env.process(release(st, dp_queue, chunk, st.env.now, 0.0))
    send(st, r, s, action)


def _finish(st: Run, ready: list[list[simpy.Event]], ends: dict[tuple[int, int], float]) -> Process:
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
        log_wait_interval(st, r, s, "bubble", t, sync, "wait stage sync", stage_sync=True)
        stage = st.inp.stages[s]
        if stage.grad_sync:
            st.log.append(Interval(r, s, "compute", "exposed_tp", sync, sync + stage.grad_sync, "SP norm grads"))
        t_opt = sync + stage.grad_sync + stage.optimizer
        st.log.append(Interval(r, s, "compute", "optimizer", sync + stage.grad_sync, t_opt, "optimizer"))
        tail = 0.0 if st.inp.overlap_param_gather else sum(c.param_gather for c in stage.chunks)
        if tail:
            st.log.append(Interval(r, s, "compute", "exposed_dp", t_opt, t_opt + tail, "param gather"))
        ends[(r, s)] = t_opt + tail

