"""A forward and a backward chunk run together as two streams (DualPipe, Megatron-Core's combined 1F1B).

Owns ``run_pair``: the compute stream runs the forward's compute then the backward's, the EP stream their
all-to-alls; a combined-1F1B pair (``EngineInput.paired``) lasts what ``step.pairing.combined_pair``
gives layer by layer (``layered_pair``), DualPipe's slows while its EP stream is busy (``slowed``). Called
by ``clustersim.simulator.step.engine`` for the paired steps of a fixed program.
"""

from __future__ import annotations

from collections import Counter

import simpy

from clustersim.simulator.plan import Action
from clustersim.simulator.step.costs import ChunkCost
from clustersim.simulator.step.engine_comm import release, send, send_at
from clustersim.simulator.step.engine_state import Process, Run, log_wait_interval, split_w, sync_wait
from clustersim.simulator.step.interval import Interval
from clustersim.simulator.step.lower_dp import overlapped_duration
from clustersim.simulator.step.pairing import combined_pair


def run_pair(st: Run, r: int, s: int, pair: tuple[Action, Action], dp_queue: simpy.Store,
          left: Counter[int]) -> Process:
    """A forward and a backward chunk run together (DualPipe, DeepSeek-V3 report Figure 4), as two
    streams: the compute stream runs the forward's compute (and its TP/CP/DP waits), then the
    backward's; the EP stream runs the forward's all-to-alls, then the backward's. The forward is
    done when its compute and its all-to-alls are (its output leaves then), the pair when both
    streams are; what the all-to-alls outlast the compute by is logged as exposed EP. A pair of a
    combined-1F1B plan (``EngineInput.paired``) lasts what ``step.pairing.combined_pair`` gives for
    its MoE layers (Megatron-Core's node order and the all-to-all slowdown) plus the waits outside
    them; DualPipe's compute slows while the EP stream is busy (``slowed``)."""
    env, split = st.env, split_w(st.inp)
    start = t = env.now
    comm = 0.0
    first, second = sorted(pair, key=lambda a: a[0] != "F")  # forward first
    pair = (first, second)
    done: list[float] = []
    chunks = [st.inp.stages[s].chunks[v] for _, _, v in pair]
    total = sum(ch.hideable_ep(k) for ch, (k, _, _) in zip(chunks, pair))
    key = (r, s, pair[0][2], pair[1][2])
    if key not in st.layered:
        st.layered[key] = layered_pair(st, r, s, chunks[0], chunks[1])
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
                        t = slowed(st, r, s, d, t, start + total - (t - d), f"{kind}{mb}.{v}")
                    t = sync_wait(st, r, s, d, t, f"{kind}{mb}.{v}")
        done.append(max(t, start + comm))
    if layered is not None:  # the layers' chains and the slowdown; the waits outside them add as they are
        other = t - start - compute
        done = [start + layered[1] + other, start + max(t - start, layered[0] + other)]
    end = done[-1]
    label = "+".join(f"{k}{mb}.{v}" for k, mb, v in pair)
    if comm > 0:
        st.log.append(Interval(r, s, "ep", "ep_comm", start, start + comm, label))
    log_wait_interval(st, r, s, "exposed_ep", t, end, f"wait all-to-all {label}")
    for kind, _, v in pair:
        if kind == ("W" if split else "B"):
            left[v] -= 1
            if left[v] == 0:
                st.env.process(release(st, dp_queue, st.inp.stages[s].chunks[v], start, end - start))
    env.process(send_at(st, r, s, pair[0], done[0]))
    yield env.timeout(end - start)
    send(st, r, s, pair[1])


def layered_pair(st: Run, r: int, s: int, fwd: ChunkCost, bwd: ChunkCost) -> tuple[float, float] | None:
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


def slowed(st: Run, r: int, s: int, compute: float, t: float, beside: float, label: str) -> float:
    """After ``compute`` seconds of a paired pass ending at ``t``, of which the EP stream's
    all-to-alls ran beside the first ``beside`` seconds: the time the all-to-alls' share of SMs and
    HBM bandwidth cost it (``EngineInput.ep_slowdown``; ``lower_dp.overlapped_duration``), logged as
    exposed EP; returns when the pass's compute ends."""
    extra = overlapped_duration(compute, beside, st.inp.ep_slowdown) - compute
    if extra <= 0:
        return t
    st.log.append(Interval(r, s, "compute", "exposed_ep", t, t + extra, f"slowed by all-to-all {label}"))
    return t + extra

