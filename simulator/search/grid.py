"""``StepBound`` over a whole plan grid at once: the optimistic step time and static memory of every
candidate as numpy arrays.

Owns ``grid_bounds`` (over ``ParallelPlan``s) and ``column_bounds`` (over ``plan.PlanColumns``, the
search's grid as numpy columns: a ``ParallelPlan`` is built only per distinct shard and per
layout, and the figures are ``grid_bounds``' bit for bit). The scalar ``search.bound.StepBound`` stays the reference and the source of
every per-layer figure: this module asks it for the pass times of each distinct (layer signature,
shard) and the exposed TP seconds of each distinct TP layout, lays them out per layer as prefix
sums, and then prices all plans of one pipeline layout (schedule, pp, vpp, layer split) together:
a chunk is a difference of two prefix sums plus its embedding or head, a stage the sum of its
chunks times their passes, and fill, drain, optimizer and memory follow ``StepBound.step_time`` and
``StepBound.static_memory`` term by term. The sums are reordered (prefix differences instead of a
running sum), so figures agree with the scalar bound to float rounding (a test holds every plan of
several grids to 1e-12 relative), not bit for bit.

Plans the layout does not cover are priced by the scalar bound, one by one: a full recompute of
only some layers (``recompute_layers``), and every plan of a model whose layers of one kind differ
in shape (sliding-window layers among full ones: lowering recomputes with the chunk's first layer
of a kind, which a per-layer prefix sum cannot express). It decides nothing (``search.search``
does) and simulates nothing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Callable, Sequence

import numpy as np

from clustersim.simulator.plan import FSDPS, ParallelPlan, PlanColumns, num_model_chunks
from clustersim.simulator.search.bound import SAFETY, PassTimes, StepBound
from clustersim.simulator.step import (
    ADAM_BYTES_PER_PARAM,
    RESERVED_BYTES,
    full_recompute_time,
    hidden_bound,
    op_kwargs,
    stage_chunks,
)

Layout = tuple[str, int, int, tuple[int, ...] | None]
"""What fixes which layers each stage holds: (schedule, pp, vpp, layer_split)."""
_SHARD_FIELDS = attrgetter("tp", "cp", "dp", "pp", "ep", "etp", "order", "micro_batch", "sp", "tp_comm_overlap",
                           "tp_overlap", "expert_imbalance", "recompute")
"""What a plan's shard depends on: its sharding keywords, recompute and (through its placement) its TP seconds."""
_TP_FIELDS = attrgetter("tp", "cp", "dp", "pp", "ep", "etp", "order", "micro_batch", "sp", "tp_comm_overlap",
                        "tp_overlap")
"""What a plan's TP block seconds depend on: the TP groups (placement) and the tensor size."""


def _tp_key(p: ParallelPlan) -> tuple[object, ...]:
    """What ``StepBound._tp_block`` depends on: the TP groups (its pricer is cached by them) and the
    tensor (micro-batch, cp, sp) and the overlap. With tp fastest in the rank order the groups are
    consecutive blocks of tp ranks whatever the other degrees (``Placement.groups``), so the other
    degrees drop out of the key; with any other order they stay in it."""
    if [a for a in p.order.split("-") if a != "ep"][0] == "tp":
        return ("blocks", p.tp, p.world_size, p.micro_batch, p.cp, p.sp, p.tp_comm_overlap, p.tp_overlap)
    return _TP_FIELDS(p)


_COLUMNS = attrgetter("tp", "dp", "cp", "micro_batch", "zero", "grad_dtype_bytes", "ep", "etp")
_NCOLUMNS = 8
_DEFAULT = ParallelPlan()


@dataclass(frozen=True)
class GridBounds:
    """``StepBound``'s figures of every plan of a grid, in the grid's order."""

    step_time: np.ndarray
    """Optimistic step time, seconds (``StepBound.step_time``)."""
    static_memory: np.ndarray
    """Optimistic peak bytes per device (``StepBound.static_memory``)."""
    scalar: int = 0
    """Plans the layout did not cover, priced one by one by the scalar bound."""


@dataclass(frozen=True)
class _Table:
    """The distinct shards (sharding keywords, recompute, exposed TP) of a grid, one row each: per-layer
    prefix sums for one micro-batch (``x[r, i]`` = the sum over layers 0..i-1) and the embedding's
    and head's figures (``x_ends[r] = (embedding, head)``)."""

    fwd: np.ndarray
    """Forward seconds: compute and exposed TP."""
    bwd: np.ndarray
    """Backward seconds: input and weight gradient, recompute and exposed TP."""
    params: np.ndarray
    expert: np.ndarray
    fwd_ends: np.ndarray
    bwd_ends: np.ndarray
    params_ends: np.ndarray
    expert_ends: np.ndarray


def grid_bounds(sb: StepBound, plans: Sequence[ParallelPlan]) -> GridBounds:
    """``sb.step_time(p)`` and ``sb.static_memory(p)`` for every ``p`` of ``plans``, as arrays."""
    n = len(plans)
    step, memory = np.empty(n), np.empty(n)
    by_layout: dict[Layout, list[int]] = {}
    scalar = []
    uniform = _uniform_kinds(sb)
    for i, p in enumerate(plans):
        if uniform and p.recompute_layers is None:
            by_layout.setdefault((p.schedule, p.pp, p.vpp, p.layer_split), []).append(i)
        else:
            scalar.append(i)
    for i in scalar:
        step[i], memory[i] = sb.step_time(plans[i]), sb.static_memory(plans[i])
    shards = _Shards(sb)
    rows = np.array([shards.row(plans[i]) for idx in by_layout.values() for i in idx], dtype=np.int64)
    table, start = shards.table(), 0
    for layout, idx in by_layout.items():
        group = [plans[i] for i in idx]
        step[idx], memory[idx] = _price_layout(sb, table, layout, group[0], _Degrees.of(group),
                                               rows[start:start + len(idx)])
        start += len(idx)
    return GridBounds(step_time=step, static_memory=memory, scalar=len(scalar))


def column_bounds(sb: StepBound, plans: PlanColumns) -> GridBounds:
    """``grid_bounds`` of the plans of ``plans`` without building a ``ParallelPlan`` per plan: one
    per distinct shard (its pass times) and one per layout (its chunks). The same figures, bit for
    bit, as ``grid_bounds(sb, plans.plans())``."""
    n = len(plans)
    if not _uniform_kinds(sb):
        every = plans.plans()
        step = np.array([sb.step_time(p) for p in every], dtype=float).reshape(n)
        memory = np.array([sb.static_memory(p) for p in every], dtype=float).reshape(n)
        return GridBounds(step_time=step, static_memory=memory, scalar=n)
    step, memory = np.empty(n), np.empty(n)
    shards = _Shards(sb)
    firsts, which = _distinct(plans.tp, plans.cp, plans.dp, plans.pp, plans.ep, plans.micro_batch, plans.sp,
                              plans.recompute)  # _SHARD_FIELDS that vary in columns
    rows = np.array([shards.row(plans.plan(int(i))) for i in firsts], dtype=np.int64).reshape(-1)[which]
    table, degrees = shards.table(), _Degrees.of_columns(plans)
    firsts, which = _distinct(plans.schedule, plans.pp, plans.vpp)
    for u, i in enumerate(firsts):
        first = plans.plan(int(i))
        idx = np.flatnonzero(which == u)
        layout = (first.schedule, first.pp, first.vpp, first.layer_split)
        step[idx], memory[idx] = _price_layout(sb, table, layout, first, degrees.take(idx), rows[idx])
    return GridBounds(step_time=step, static_memory=memory, scalar=0)


def _distinct(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the first row of each distinct combination of ``columns``, in first-seen order; each row's
    combination as an index into those)."""
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    radix = [int(c.max(initial=0)) + 1 for c in cols]
    if min(int(c.min(initial=0)) for c in cols) >= 0 and math.prod(radix) < 2**62:
        key = np.zeros(len(cols[0]), dtype=np.int64)
        for c, r in zip(cols, radix):  # one integer per combination (mixed radix): a 1-d unique
            key = key * r + c
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return first[order], rank[np.asarray(inverse).reshape(-1)]


@dataclass(frozen=True)
class _Degrees:
    """The per-plan integers ``_price_layout`` reads, one array each."""

    tp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    micro_batch: np.ndarray
    zero: np.ndarray
    grad_bytes: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    fsdp: np.ndarray
    """FSDP of any kind (bool)."""
    shard: np.ndarray
    """``ParallelPlan.shard_degree`` / cp: dp_shard (or dp) under hybrid sharding, else dp."""

    @staticmethod
    def of(group: Sequence[ParallelPlan]) -> _Degrees:
        n = len(group)
        cols = np.fromiter(itertools.chain.from_iterable(map(_COLUMNS, group)), dtype=np.int64, count=n * _NCOLUMNS)
        tp, dp, cp, mb, zero, grad_bytes, ep, etp = cols.reshape(n, _NCOLUMNS).T
        fsdp = np.fromiter((p.fsdp != "none" for p in group), dtype=bool, count=n)
        shard = np.fromiter(((p.dp_shard or p.dp) if p.fsdp == "hybrid" else p.dp for p in group), dtype=np.int64, count=n)
        return _Degrees(tp=tp, dp=dp, cp=cp, micro_batch=mb, zero=zero, grad_bytes=grad_bytes, ep=ep, etp=etp,
                        fsdp=fsdp, shard=shard)

    @staticmethod
    def of_columns(c: PlanColumns) -> _Degrees:
        """Columns' plans: grad_dtype_bytes, etp and dp_shard at ``ParallelPlan``'s defaults (hybrid shards over dp)."""
        full = np.full(len(c), 1, dtype=np.int64)
        return _Degrees(tp=c.tp, dp=c.dp, cp=c.cp, micro_batch=c.micro_batch, zero=c.zero,
                        grad_bytes=full * _DEFAULT.grad_dtype_bytes, ep=c.ep, etp=full * _DEFAULT.etp,
                        fsdp=c.fsdp != FSDPS.index("none"), shard=c.dp)

    def take(self, idx: np.ndarray) -> _Degrees:
        return _Degrees(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})


def _uniform_kinds(sb: StepBound) -> bool:
    """True when all layers of one (kind, MoE) share one signature, so each layer's recompute is its own forward."""
    seen: dict[tuple[str, bool], object] = {}
    m = sb.model
    for i in range(m.num_layers):
        sig = sb._signature(i)
        if seen.setdefault(sig[:2], sig) != sig:
            return False
    return True


class _Shards:
    """Collects the distinct shards of a grid (``row``), then lays them out as one ``_Table``."""

    def __init__(self, sb: StepBound) -> None:
        self.sb = sb
        self._rows: dict[tuple[object, ...], int] = {}
        self._by_fields: dict[tuple[object, ...], int] = {}
        self._tp: dict[tuple[object, ...], float] = {}
        self._built: list[tuple[np.ndarray, ...]] = []
        m = sb.model
        self._ids = np.array(sb._run(range(m.num_layers)))  # each layer's signature id, 0..n-1 in first-seen order
        self._first = {sig: i for i, sig in reversed(list(enumerate(self._ids.tolist())))}
        self._blocks = np.array([2.0 if m.layer_kind(i) == "transformer" else 1.0 for i in range(m.num_layers)])
        """TP blocks per layer: attention and MLP in a transformer layer, one in a hybrid layer."""

    def tp_block(self, p: ParallelPlan) -> float:
        """Exposed seconds of one TP block (``StepBound._tp_block``), once per placement of TP and size."""
        key = _tp_key(p)
        if key not in self._tp:
            self._tp[key] = self.sb._tp_block(p) * (1.0 - hidden_bound(p.tp_comm_overlap, p.tp_overlap))
        return self._tp[key]

    def row(self, p: ParallelPlan) -> int:
        """The row of ``p``'s shard (built on first use; plans alike in ``_SHARD_FIELDS`` share it)."""
        fields = _SHARD_FIELDS(p)
        if fields not in self._by_fields:
            one = self.tp_block(p)
            key = (tuple(op_kwargs(p, self.sb.training).values()), p.expert_imbalance, one, p.recompute, p.recompute_saved)
            if key not in self._rows:
                self._rows[key] = len(self._built)
                self._built.append(self._build(p, one))
            self._by_fields[fields] = self._rows[key]
        return self._by_fields[fields]

    def table(self) -> _Table:
        """The rows built so far, stacked."""
        if not self._built:
            return _Table(*[np.zeros((0, 2))] * 8)
        return _Table(*[np.stack(column) for column in zip(*self._built)])

    def _build(self, p: ParallelPlan, one: float) -> tuple[np.ndarray, ...]:
        """The terms of ``StepBound._chunk`` layer by layer, from one ``PassTimes`` per layer signature."""
        sb = self.sb
        times = [sb.layer(self._first[j], p) for j in range(len(self._first))]

        def per_layer(value: Callable[[PassTimes], float]) -> np.ndarray:
            out: np.ndarray = np.array([value(t) for t in times])[self._ids]
            return out

        def prefix(x: np.ndarray) -> np.ndarray:
            return np.concatenate([[0.0], np.cumsum(x)])

        full = p.recompute == "full"
        rec = per_layer(lambda t: full_recompute_time(t.fwd, t.kept, p.recompute_saved) if full
                        else t.selective if p.recompute == "selective" else 0.0)
        tp = self._blocks * one
        f = per_layer(lambda t: t.fwd) + tp
        b = per_layer(lambda t: t.bwd_input) + per_layer(lambda t: t.bwd_weight) + rec + tp * (2 if full else 1)
        ends = (sb._end("embedding", p), sb._end("head", p))
        return (prefix(f), prefix(b), prefix(per_layer(lambda t: t.params)), prefix(per_layer(lambda t: t.expert_params)),
                np.array([e.fwd for e in ends]), np.array([e.bwd_input + e.bwd_weight for e in ends]),
                np.array([e.params for e in ends]), np.array([e.expert_params for e in ends]))


@dataclass(frozen=True)
class _Chunks:
    """Per plan, stage and chunk of one layout: forward, backward, dense and expert params (one micro-batch)."""

    fwd: np.ndarray
    bwd: np.ndarray
    dense: np.ndarray
    expert: np.ndarray


def _chunks(sb: StepBound, table: _Table, layout: Layout, rows: np.ndarray, first: ParallelPlan) -> _Chunks:
    """The chunk figures of ``StepBound.chunks`` for the plans of one layout whose shards are
    ``rows`` of ``table``, shape (plans, pp, chunks)."""
    spans = stage_chunks(first, sb.model.num_layers)
    last = num_model_chunks(layout[0], layout[1], layout[2]) - 1
    a = np.array([[r.start for _, r in st] for st in spans])
    z = np.array([[r.stop for _, r in st] for st in spans])
    k = np.array([[c for c, _ in st] for st in spans])
    emb, head = (k == 0).astype(float), (k == last).astype(float)  # chunk 0 holds the embedding, the last the head
    r = rows[:, None, None]

    def chunk(prefix: np.ndarray, ends: np.ndarray) -> np.ndarray:  # layers a..z-1: a difference of prefix sums
        out: np.ndarray = prefix[r, z] - prefix[r, a] + (ends[r, 0] * emb + ends[r, 1] * head)
        return out

    expert = chunk(table.expert, table.expert_ends)
    params = chunk(table.params, table.params_ends)
    return _Chunks(fwd=chunk(table.fwd, table.fwd_ends), bwd=chunk(table.bwd, table.bwd_ends),
                   dense=params - expert, expert=expert)


def _price_layout(sb: StepBound, table: _Table, layout: Layout, first: ParallelPlan, d: _Degrees,
                  rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(step time, static memory) of every plan of one layout (``first`` one of them, ``d`` their
    degrees), as ``StepBound`` prices them."""
    schedule, pp, vpp, _ = layout
    n = len(rows)
    tp, dp, cp, mb, zero, grad_bytes, ep, etp, fsdp = d.tp, d.dp, d.cp, d.micro_batch, d.zero, d.grad_bytes, d.ep, d.etp, d.fsdp
    shard_degree = d.shard * cp
    param_shard = np.where((zero >= 3) | fsdp, shard_degree, 1)
    grad_shard = np.where((zero >= 2) | fsdp, shard_degree, 1)
    opt_shard = np.where((zero >= 1) | fsdp, shard_degree, 1)
    expert_dp = tp * cp * dp // (ep * etp)
    c = _chunks(sb, table, layout, rows, first)

    def sharded(dense: np.ndarray, expert: np.ndarray, per_param: float = 1.0) -> np.ndarray:  # ParallelPlan.sharded_state
        o, e = opt_shard.reshape(-1, *[1] * (dense.ndim - 1)), expert_dp.reshape(-1, *[1] * (dense.ndim - 1))
        return np.where(o > 1, dense * per_param / o + expert * per_param / e, dense * per_param + expert * per_param)

    m = sb.training.global_batch_size // (dp * mb)
    counts = np.stack([m // 2, m - m // 2], 1) if schedule == "dualpipe" else np.repeat(m[:, None], vpp, 1)
    work = (counts[:, None, :] * (c.fwd + c.bwd)).sum(axis=2)
    acc, prof = sb.cluster.accelerator, sb.profile
    opt = (sharded(c.dense, c.expert).sum(axis=2) * ADAM_BYTES_PER_PARAM
           / (acc.hbm_bandwidth * prof.optimizer_efficiency)).max(axis=1)
    distinct, which = np.unique(m, return_inverse=True)
    ends = np.array([sb._ends(schedule, pp, int(mi), vpp) for mi in distinct], dtype=bool).reshape(-1, pp, 2)[which]
    f_before = np.concatenate([np.zeros((n, 1)), np.cumsum(c.fwd[:, :, 0], axis=1)[:, :-1]], axis=1)
    b_before = np.concatenate([np.zeros((n, 1)), np.cumsum(c.bwd[:, :, 0], axis=1)[:, :-1]], axis=1)
    fill, drain = np.where(ends[:, :, 0], f_before, 0.0), np.where(ends[:, :, 1], b_before, 0.0)
    step = ((fill + work + drain).max(axis=1) + opt + prof.step_overhead) * SAFETY
    t = sb.training
    dense, expert = c.dense.sum(axis=2), c.expert.sum(axis=2)
    params = dense + expert
    states = (params * t.param_bytes / param_shard[:, None] + params * grad_bytes[:, None] / grad_shard[:, None]
              + sharded(dense, expert, t.master_param_bytes + t.optimizer_state_bytes))
    memory = (np.maximum(states.max(axis=1), 0.0) + RESERVED_BYTES) * SAFETY
    return step, memory
