"""An optimistic bound on the engine's step time (and memory) of a plan, without running the engine.

Owns ``StepBound``: for one (model, training, cluster, profile) it prices, per plan, what the
SimPy engine cannot avoid, from the same per-op cost functions (``step.compute.ops_time``), the
same chunking (``step.partition.stage_chunks``), the same recompute rule and the same TP pricing
(``network.pricing.CommPricer``) that ``step.lower`` uses:

- every pass of a stage runs on its one compute stream, so the stage is busy at least
  m x sum over its chunks of (forward + input-gradient + weight-gradient + recompute + exposed TP);
- a stage's first pass is the forward of micro-batch 0 (every single-lane schedule), which needs
  the forwards of the stages before it (the pipeline fill); with GPipe, 1F1B and interleaved the
  last pass is a chunk-0 backward, which the stages before it must still run (the drain);
- the optimizer starts after the cross-stage sync, and the step overhead is added last.

So ``step_time(plan) <= engine step time`` for every plan (checked over a whole search space by a
test and by ``benchmarks/bench_search.py``). CP, EP, DP and PP communication, bubbles beyond
fill and drain, and waits are left out (they are >= 0). ``static_memory(plan)`` is the same kind
of bound for memory: weights, gradients, optimizer state and reserved buffers, no activations.
It simulates nothing and decides nothing (``search.search`` does).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Mapping

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network import CommPricer
from clustersim.simulator.plan import (
    ParallelPlan,
    Placement,
    num_microbatches,
    num_model_chunks,
    program_ends,
)
from clustersim.simulator.step import (
    RESERVED_BYTES,
    LayerSignature,
    Pass,
    expert_load,
    full_recompute_time,
    hidden_bound,
    is_routed_expert,
    layer_signature,
    op_kwargs,
    ops_time,
    optimizer_time,
    saved_forward,
    stage_chunks,
)
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec, Op, TrainingSpec, embedding_ops, head_ops, layer_ops

SAFETY = 1.0 - 1e-9
"""The bound sums per layer what lowering sums per chunk: float rounding, never physics."""

ChunkBound = tuple[float, float, float, float]
"""(forward, backward with recompute, dense params, expert params) of one chunk, one micro-batch."""


@dataclass(frozen=True)
class PassTimes:
    """Seconds of one layer (or embedding/head) for one micro-batch on one device, by pass."""

    fwd: float
    bwd_input: float
    bwd_weight: float
    selective: float
    """Forward of the ops selective recompute repeats (the attention core)."""
    kept: Mapping[str, float]
    """Forward of the ops producing each output a full recompute may keep (``step.saved_forward``)."""
    params: float
    expert_params: float


@dataclass
class StepBound:
    """Optimistic step time and memory of plans of one (model, training, cluster, profile)."""

    model: ModelSpec
    training: TrainingSpec
    cluster: Cluster
    profile: CalibrationProfile
    _times: dict[tuple[object, ...], PassTimes] = field(default_factory=dict)
    _pricers: dict[str, CommPricer] = field(default_factory=dict)
    _chunks: dict[tuple[object, ...], ChunkBound] = field(default_factory=dict)
    _lanes: dict[tuple[str, int, int, int], list[tuple[bool, bool]]] = field(default_factory=dict)
    _runs: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    _ids: dict[LayerSignature, int] = field(default_factory=dict)

    # -- cached pieces ---------------------------------------------------------------------------
    def _run(self, layers: range) -> tuple[int, ...]:
        """The chunk's layers as signature ids: chunks of the same layers in the same order cost the same."""
        key = (layers.start, layers.stop)
        if key not in self._runs:
            self._runs[key] = tuple(self._ids.setdefault(self._signature(i), len(self._ids)) for i in layers)
        return self._runs[key]

    def _signature(self, i: int) -> LayerSignature:
        return layer_signature(self.model, i)

    def _pass_times(self, ops: tuple[Op, ...], imbalance: float) -> PassTimes:
        acc, prof, prec = self.cluster.accelerator, self.profile, self.training.precision
        def t(sel: list[Op] | tuple[Op, ...], which: Pass) -> float:
            return ops_time(sel, acc, prof, prec, which, imbalance)
        expert = sum(o.params for o in ops if is_routed_expert(o))
        return PassTimes(fwd=t(ops, "fwd"), bwd_input=t(ops, "bwd_input"), bwd_weight=t(ops, "bwd_weight"),
                         selective=t([o for o in ops if o.recompute_selective], "fwd"),
                         kept=saved_forward(ops, lambda sel: t(sel, "fwd")),
                         params=float(sum(o.params for o in ops)), expert_params=float(expert))

    def layer(self, i: int, plan: ParallelPlan) -> PassTimes:
        """Pass times of layer ``i`` under ``plan``'s sharding (cached by signature and shard)."""
        kw = op_kwargs(plan, self.training)
        key = ("layer", self._signature(i), tuple(sorted(kw.items())), plan.expert_imbalance)
        if key not in self._times:
            ops = layer_ops(self.model, i, attention_kernel=self.training.attention_kernel, **kw)
            self._times[key] = self._pass_times(tuple(ops), expert_load(plan.expert_imbalance, self.model.capacity_factor))
        return self._times[key]

    def _end(self, which: str, plan: ParallelPlan) -> PassTimes:
        kw = op_kwargs(plan, self.training)
        key = (which, tuple(sorted(kw.items())), plan.expert_imbalance)
        if key not in self._times:
            ops = embedding_ops(self.model, **kw) if which == "embedding" else head_ops(self.model, **kw)
            self._times[key] = self._pass_times(tuple(ops), expert_load(plan.expert_imbalance, self.model.capacity_factor))
        return self._times[key]

    def _tp_block(self, plan: ParallelPlan) -> float:
        """Seconds of one TP block's collectives (gather in, scatter out), as ``lower._layer_comm``."""
        if plan.tp <= 1:
            return 0.0
        placement = Placement(plan, self.cluster.gpus_per_node)
        groups = placement.groups("tp")
        key = hashlib.sha1(groups.tobytes() + str(groups.shape).encode()).hexdigest()
        if key not in self._pricers:
            self._pricers[key] = CommPricer(self.cluster, placement, self.profile)
        pricer, t = self._pricers[key], self.training
        size = plan.micro_batch * t.seq_len / plan.cp * self.model.hidden_size * t.activation_bytes
        if plan.sp:
            return pricer.time("reduce_scatter", size, "tp") + pricer.time("all_gather", size, "tp")
        return pricer.time("all_reduce", size, "tp")

    # -- the bound -------------------------------------------------------------------------------
    def chunks(self, plan: ParallelPlan) -> list[list[ChunkBound]]:
        """Per stage, per chunk: (forward, backward incl. weight gradient and recompute, dense
        params, expert params) for one micro-batch: compute and exposed TP as lowering prices them."""
        one = self._tp_block(plan) * (1.0 - hidden_bound(plan.tp_comm_overlap, plan.tp_overlap))
        last = num_model_chunks(plan.schedule, plan.pp, plan.vpp) - 1
        shard = (tuple(op_kwargs(plan, self.training).values()), plan.expert_imbalance, one, plan.recompute,
                 plan.recompute_layers, plan.recompute_saved)
        out = []
        for chunks in stage_chunks(plan, self.model.num_layers):
            row = []
            for k, layers in chunks:
                key = (shard, k == 0, k == last, self._run(layers))
                if key not in self._chunks:
                    self._chunks[key] = self._chunk(plan, layers, one, k == 0, k == last)
                row.append(self._chunks[key])
            out.append(row)
        return out

    def _chunk(self, plan: ParallelPlan, layers: range, one: float, first_chunk: bool, last_chunk: bool) -> ChunkBound:
        ends = ([self._end("embedding", plan)] if first_chunk else []) + ([self._end("head", plan)] if last_chunk else [])
        n_full = len(layers) if plan.recompute_layers is None else min(plan.recompute_layers, len(layers))
        fwd = bwd = 0.0
        rep: dict[tuple[str, bool], PassTimes] = {}  # lowering recomputes the chunk's first layer of a kind
        parts = list(ends)
        for j, i in enumerate(layers):
            lt = self.layer(i, plan)
            parts.append(lt)
            first = rep.setdefault((self.model.layer_kind(i), self.model.is_moe_layer(i)), lt)
            full = plan.recompute == "full" and j < n_full
            tp = (2 if self.model.layer_kind(i) == "transformer" else 1) * one
            rec = (full_recompute_time(first.fwd, first.kept, plan.recompute_saved) if full
                   else first.selective if plan.recompute == "selective" else 0.0)
            fwd += lt.fwd + tp
            bwd += lt.bwd_input + lt.bwd_weight + rec + tp * (2 if full else 1)
        for e in ends:
            fwd += e.fwd
            bwd += e.bwd_input + e.bwd_weight
        expert = sum(p.expert_params for p in parts)
        return fwd, bwd, sum(p.params for p in parts) - expert, expert

    def step_time(self, plan: ParallelPlan) -> float:
        """A lower bound of the engine's step time of ``plan`` (symmetric mode), seconds."""
        m = num_microbatches(plan, self.training)
        per = self.chunks(plan)
        # passes of each chunk per step (schedules.lanes): m, or for DualPipe m//2 down and the rest up
        counts = [m // 2, m - m // 2] if plan.schedule == "dualpipe" else [m] * plan.vpp
        work = [sum(n * (c[0] + c[1]) for n, c in zip(counts, chunks)) for chunks in per]
        opt = max(optimizer_time(sum(plan.sharded_state(c[2], c[3]) for c in chunks), self.cluster.accelerator,
                                 self.profile) for chunks in per)
        fill, drain = self._fill_drain(plan, m, per)
        busiest = max(fill[s] + work[s] + drain[s] for s in range(plan.pp))
        return (busiest + opt + self.profile.step_overhead) * SAFETY

    def _fill_drain(self, plan: ParallelPlan, m: int, per: list[list[ChunkBound]]) -> tuple[list[float], list[float]]:
        """Per stage: forwards of micro-batch 0 before its first pass, backwards after its last."""
        ends = self._ends(plan.schedule, plan.pp, m, plan.vpp)
        f_before = list(itertools.accumulate((per[j][0][0] for j in range(plan.pp)), initial=0.0))
        b_before = list(itertools.accumulate((per[j][0][1] for j in range(plan.pp)), initial=0.0))
        fill = [f_before[s] if ends[s][0] else 0.0 for s in range(plan.pp)]
        drain = [b_before[s] if ends[s][1] else 0.0 for s in range(plan.pp)]
        return fill, drain

    def _ends(self, schedule: str, pp: int, m: int, vpp: int) -> list[tuple[bool, bool]]:
        """Per stage: (its first pass is micro-batch 0's chunk-0 forward, its last a chunk-0
        backward whose gradient the stages before it still carry); from ``schedules.lanes``."""
        key = (schedule, pp, m, vpp)
        if key not in self._lanes:
            out = []
            for s in range(pp):
                if schedule == "dualpipe" or s == 0:
                    out.append((False, False))
                    continue
                first, last = program_ends(schedule, s, pp, m, vpp)
                out.append((first == ("F", 0, 0), schedule != "zb-h1" and last[0] == "B" and last[2] == 0))
            self._lanes[key] = out
        return self._lanes[key]

    def static_memory(self, plan: ParallelPlan) -> float:
        """A lower bound of the peak bytes per device (``partition_memory``'s states and buffers)."""
        t = self.training
        best = 0.0
        for costs in self.chunks(plan):
            dense, expert = sum(c[2] for c in costs), sum(c[3] for c in costs)
            params = dense + expert
            states = (params * t.param_bytes / plan.param_shard + params * plan.grad_dtype_bytes / plan.grad_shard
                      + plan.sharded_state(dense, expert, t.master_param_bytes + t.optimizer_state_bytes))
            best = max(best, states)
        return (best + RESERVED_BYTES) * SAFETY
