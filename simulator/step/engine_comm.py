"""The engine's communication streams: point-to-point sends, DP gradient buckets, ZeRO gathers.

Owns what a stage process of ``clustersim.simulator.step.engine`` hands off or waits for: a pass's
input (``input_ready``, ``input_event``, and ``log_wait``, which splits a wait into bubble and
exposed p2p), its output on the p2p link (``send``: one message at a time per link; ``send_flow``
with the streams as flows), the EP all-to-alls a pass exposes as flows (``ep_flow``), the DP stream
reducing buckets as the last backward releases them (``release``, ``dp_stream``, ``barrier`` across
replicas in full mode) and the ZeRO parameter gathers prefetched before the first forward
(``prefetch``, ``wait_gather``). With ``EngineInput.flows`` every call runs on the shared fabric
(``run_transfer``), logging its time alone and what sharing added.
"""

from __future__ import annotations

import simpy

from clustersim.simulator.network import Transfer
from clustersim.simulator.plan import Action, dependency, destination
from clustersim.simulator.step.costs import ChunkCost, StageCost
from clustersim.simulator.step.engine_state import Process, Run, log_wait_interval
from clustersim.simulator.step.interval import Interval


def input_event(st: Run, r: int, s: int, action: Action) -> simpy.Event:
    dep = dependency(action, s, st.pp, st.inp.vpp, st.inp.schedule)
    assert dep is not None, "a pass without an input is always ready"
    return st.event((r, dep[0], dep[1]))


def input_ready(st: Run, r: int, s: int, action: Action) -> bool:
    dep = dependency(action, s, st.pp, st.inp.vpp, st.inp.schedule)
    return dep is None or st.event((r, dep[0], dep[1])).triggered


def log_wait(st: Run, r: int, s: int, action: Action, t0: float) -> None:
    """Split a wait that ended now into bubble (producer still busy) and exposed p2p (each part
    ``log_wait_interval``: round-off is not logged)."""
    dep = dependency(action, s, st.pp, st.inp.vpp, st.inp.schedule)
    t1 = st.env.now
    if dep is None or t1 <= t0:
        return
    produced = min(max(st.produced.get((r, dep[0], dep[1]), t0), t0), t1)
    log_wait_interval(st, r, s, "bubble", t0, produced, "wait")
    log_wait_interval(st, r, s, "exposed_pp", produced, t1, "wait p2p")


def send(st: Run, r: int, s: int, action: Action) -> None:
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
        st.env.process(send_flow(st, (r, link_stage, direction), transfer, st.event(key), f"{kind}{mb}.{v}"))
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


def send_at(st: Run, r: int, s: int, action: Action, at: float) -> Process:
    """Ship ``action``'s output at time ``at`` (a paired forward, done before its pair)."""
    if at > st.env.now:
        yield st.env.timeout(at - st.env.now)
    send(st, r, s, action)


def send_flow(st: Run, link: tuple[int, int, str], transfer: Transfer, arrival: simpy.Event, label: str) -> Process:
    """A p2p message as flows: after the link's previous message (FIFO), then ``arrival`` fires."""
    before = st.link_done.get(link)
    done = st.link_done[link] = st.env.event()
    if before is not None and not before.processed:
        yield before
    yield from run_transfer(st, link[0], link[1], f"p2p-{link[2]}", "p2p", transfer, label)
    done.succeed()
    if not arrival.triggered:
        arrival.succeed()


def run_transfer(st: Run, r: int, s: int, stream: str, category: str, transfer: Transfer, label: str) -> Process:
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


def ep_flow(st: Run, r: int, s: int, transfer: Transfer, label: str) -> Process:
    """A pass's EP all-to-alls on the shared fabric: the compute stream waits for them (all of it
    ``exposed_ep``); the EP stream logs their time alone and what sharing added (``ep_shared``)."""
    t0 = st.env.now
    yield from run_transfer(st, r, s, "ep", "ep_comm", transfer, label)
    log_wait_interval(st, r, s, "exposed_ep", t0, st.env.now, label)


def _succeed(event: simpy.Event) -> None:
    """Trigger ``event`` (a callback: SimPy callbacks return nothing)."""
    event.succeed()


def bucket_count(stage: StageCost) -> int:
    return sum(len(c.buckets) for c in stage.chunks)


def release(st: Run, queue: simpy.Store, chunk: ChunkCost, start: float, dur: float) -> Process:
    """Hand the chunk's gradient buckets to the DP stream as the last backward produces them."""
    for i, b in enumerate(chunk.buckets):
        at = start + b.at * dur if st.inp.overlap_grad_reduce else start + dur
        if at > st.env.now:
            yield st.env.timeout(at - st.env.now)
        yield queue.put((chunk.chunk, i, b.time))


def dp_stream(st: Run, r: int, s: int, queue: simpy.Store, count: int) -> Process:
    """Reduce buckets one after another; in full mode each waits for every replica's copy."""
    for n in range(count):
        chunk, i, secs = yield queue.get()
        yield barrier(st, s, n)
        transfer = st.inp.flows.buckets.get((s, chunk, i)) if st.inp.flows is not None else None
        if transfer is not None:
            yield from run_transfer(st, r, s, "dp", "dp_comm", transfer, f"bucket {chunk}.{i}")
            continue
        t0 = st.env.now
        yield st.env.timeout(secs)
        st.log.append(Interval(r, s, "dp", "dp_comm", t0, st.env.now, f"bucket {chunk}.{i}"))


def barrier(st: Run, s: int, n: int) -> simpy.Event:
    """An event that fires when every replica has reached bucket ``n`` of stage ``s``."""
    waiting = st.barriers.setdefault((s, n), [])
    ev = st.env.event()
    waiting.append(ev)
    if len(waiting) == st.replicas:
        for e in waiting:
            e.succeed()
    return ev


def prefetch(st: Run, r: int, s: int) -> Process:
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
            yield from run_transfer(st, r, s, "dp", "dp_comm", transfer, f"param gather {chunk.chunk}")
        if not transfers:
            yield st.env.timeout(chunk.param_gather)
            st.log.append(Interval(r, s, "dp", "dp_comm", t0, st.env.now, f"param gather {chunk.chunk}"))
        if not ev.triggered:
            ev.succeed(st.env.now)


def wait_gather(st: Run, r: int, s: int, v: int) -> Process:
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
    log_wait_interval(st, r, s, "exposed_dp", t0, st.env.now, "wait param gather")

