"""Lowering: turn (workload, plan, cluster) into per-stage costs the engine schedules.

Owns the cost of one model chunk for one micro-batch on one device: compute by pass (forward,
input-gradient, weight-gradient, recompute), and the exposed communication inside it (TP
collectives on the critical path, CP ring exchange hidden behind attention, EP all-to-all, FSDP
gathers prefetched one layer ahead); plus the DP gradient buckets, the ZeRO-1/2 parameter gathers
(their total, and the lead the chunk's first forward waits for when they run layer by layer ahead
of it) and the optimizer of each stage; and, for the Result, each stage's compute split by where it
goes (``compute_parts``). Every collective is priced by ``CommPricer``. Scheduling is the engine's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network import CollectiveKind, CommPricer
from clustersim.simulator.step.compute import COMPUTE_PARTS, Pass, is_routed_expert, ops_time, ops_time_parts, optimizer_time
from clustersim.simulator.plan import (
    Axis,
    ParallelPlan,
    num_microbatches,
    num_model_chunks,
    pairs_forward_backward,
)
from clustersim.simulator.step.costs import Bucket, Call, ChunkCost, Lowered, StageCost
from clustersim.simulator.step.dispatch import dispatch_time, ep_shape, expert_load
from clustersim.simulator.step.host import HostExcess, eager_excess, host_excess, list_api_time
from clustersim.simulator.step.partition import ChunkPart, Partition, chunk_ops, partition_plan
from clustersim.simulator.step.recompute import moe_recomputes_dispatch, recomputed_ops
from clustersim.topologies import AcceleratorSpec
from clustersim.workloads import ModelSpec, Op, TrainingSpec
from clustersim.workloads.mamba import mamba_cp_alltoall_bytes


@dataclass(frozen=True)
class Costing:
    """The inputs shared by every chunk's costing."""

    model: ModelSpec
    training: TrainingSpec
    plan: ParallelPlan
    accelerator: AcceleratorSpec
    profile: CalibrationProfile
    pricer: CommPricer

    @property
    def expert_scale(self) -> float:
        """The busiest expert rank's tokens over the mean (imbalance, capped by a capacity factor)."""
        return expert_load(self.plan.expert_imbalance, self.model.capacity_factor)

    def time(self, ops: list[Op], which: Pass) -> float:
        return ops_time(ops, self.accelerator, self.profile, self.training.precision, which, self.expert_scale)

    def host(self, per_layer: list[tuple[list[Op], bool]], recomputed: list[list[Op]]) -> HostExcess:
        """Seconds the host's kernel launches add to one micro-batch of a chunk (``step.host``)."""
        local = max(1, self.model.num_experts // max(1, self.plan.ep))
        launch = host_excess(self.model, [ops for ops, _ in per_layer], recomputed,
                             lambda ops, which: self.time(list(ops), which), self.profile.host_launch_time,
                             local, self.plan.moe_fused_grouped_mlp, self.plan.ep)
        eager = eager_excess([ops for ops, _ in per_layer], self.profile.eager_layer_overhead,
                             self.profile.kernel_overhead,
                             (lambda ops, which: self.time(list(ops), which)) if self.profile.kernels_async else None)
        return HostExcess(fwd=launch.fwd + eager.fwd, bwd=launch.bwd + eager.bwd, recompute=launch.recompute)


def lower(c: Costing, part: Partition | None = None) -> Lowered:
    """Per-stage costs of the whole plan, from phase 1's ``Partition`` (split here when not given),
    with the table of the collectives priced for them."""
    plan, training, model = c.plan, c.training, c.model
    part = part or partition_plan(model, training, plan)
    act = plan.micro_batch * training.seq_len / plan.cp * model.hidden_size * training.activation_bytes
    p2p_size = act / (plan.tp if plan.sp else 1)
    out = []
    for stage in part.stages:
        costs = tuple(_chunk_cost(c, ch.chunk, ch.layers, list(ch.ops)) for ch in stage.chunks)
        norms = sp_norm_grad_call(c, [o for ch in stage.chunks for o in ch.ops])
        out.append(StageCost(stage=stage.stage, chunks=costs, p2p=c.pricer.p2p_time(p2p_size, stage.stage),
                             optimizer=_optimizer(c, stage.chunks), p2p_size=p2p_size,
                             grad_sync=c.pricer.time(norms[0], norms[1], "tp") if norms else 0.0))
    return Lowered(stages=tuple(out), collectives=c.pricer.summary())


def _optimizer(c: Costing, chunks: tuple[ChunkPart, ...]) -> float:
    plan = c.plan
    local = 0.0
    for ch in chunks:
        ops = ch.ops
        expert = sum(o.params for o in ops if is_routed_expert(o))
        local += plan.sharded_state(sum(o.params for o in ops) - expert, expert)
    # eager PyTorch's optimizer loops over every parameter tensor of the stage's layers (measured
    # per layer: ``CalibrationProfile.eager_layer_overhead["optimizer"]``; 0 when not measured)
    eager = c.profile.eager_layer_overhead.get("optimizer", 0.0) * sum(len(ch.layers) for ch in chunks)
    device = optimizer_time(local, c.accelerator, c.profile)
    # on a GPU the host's loop launches the device's kernels ahead of them (``kernels_async``)
    return max(device, eager) if c.profile.kernels_async else device + eager


def _layer_comm(c: Costing, ops: list[Op], moe: bool, full_recompute: bool, tp_blocks: int = 2) -> dict[str, float]:
    """Exposed TP, CP and EP seconds of one layer, forward and backward.

    ``tp_blocks``: tensor-parallel blocks in the layer, each one gather in and one scatter out
    (2 for a transformer layer, attention and MLP; 1 for a layer of a hybrid ``layer_pattern``).
    The CP ring runs only in layers with an attention core; a Mamba-2 layer with cp > 1 pays the
    sequence-to-head all-to-alls of its scan instead (``mamba_cp_alltoall_bytes``), unhidden."""
    plan, t, m = c.plan, c.training, c.model
    tokens = plan.micro_batch * t.seq_len / plan.cp
    one = sum(c.pricer.time(kind, size, "tp") for kind, size in tp_block_calls(c))
    tp = tp_blocks * one * (1.0 - plan.tp_comm_overlap)
    out = {"tp_fwd": tp, "tp_bwd": tp * (2 if full_recompute else 1)}
    attn = [o for o in ops if o.recompute_selective]  # the attention core, fused or not
    kv_local = max(m.num_kv_heads // plan.tp, 1) * m.attn_head_dim
    kv = 2 * tokens * kv_local * t.activation_bytes * plan.cp  # gathered K and V of the CP ring
    ring = c.pricer.time("all_gather", kv, "cp") if any(o.role == "attention_core" for o in ops) else 0.0
    out["cp_fwd"] = max(0.0, ring - c.time(attn, "fwd"))
    out["cp_bwd"] = max(0.0, 2 * ring - c.time(attn, "bwd"))
    if plan.cp > 1 and any(o.role == "ssm_scan" for o in ops):
        payload = mamba_cp_alltoall_bytes(m, micro_batch=plan.micro_batch, seq_len=t.seq_len, tp=plan.tp,
                                          cp=plan.cp, dtype_bytes=t.activation_bytes)
        scan_a2a = c.pricer.time("all_to_all", payload, "cp")
        out["cp_fwd"] += scan_a2a
        out["cp_bwd"] += scan_a2a * (2 if full_recompute else 1)
    a2a = 0.0
    if moe and plan.ep > 1 and plan.moe_dispatcher == "alltoall":
        a2a = 2 * c.pricer.time("all_to_all", ep_alltoall_bytes(c), "ep")
    elif moe and plan.ep > 1:  # dispatch and combine by the plan's dispatcher, bytes per tier
        shape = ep_shape(c.pricer.placement, c.pricer.cluster)
        a2a = 2 * dispatch_time(plan.moe_dispatcher, m, tokens / plan.tp, m.hidden_size * t.activation_bytes,
                                shape, c.pricer.cluster, c.profile)
    rec = 2 if full_recompute or moe_recomputes_dispatch(moe, plan.recomputed_modules) else 1
    paired = plan.ep_comm_overlap is None and pairs_forward_backward(plan.schedule, plan.ep_overlap)
    exposed = 0.0 if paired else a2a * (1.0 - (plan.ep_comm_overlap or 0.0))
    out["ep_fwd"], out["ep_bwd"] = exposed, exposed * rec
    hideable = a2a if paired else 0.0
    out["ep_a2a_fwd"], out["ep_a2a_bwd"] = hideable, hideable * rec
    return out


def ep_alltoall_bytes(c: Costing) -> float:
    """Bytes per rank of one EP all-to-all (dispatch or combine) of one MoE layer and micro-batch,
    ``alltoall`` dispatcher: the tp group's tokens, ``top_k`` copies of each, full-width."""
    plan, t, m = c.plan, c.training, c.model
    return plan.micro_batch * t.seq_len / plan.cp / plan.tp * m.top_k * m.hidden_size * t.activation_bytes


def ep_pass_calls(c: Costing, per_layer: list[tuple[list[Op], bool]], n_full: int) -> tuple[Call | None, Call | None]:
    """(forward, backward) EP all-to-alls one pass of a chunk exposes on its compute stream, as
    calls (dispatch and combine of every MoE layer; the backward's recompute runs them again), for
    the flows over time; None where the exposed EP time is not whole calls (another dispatcher, a
    paired schedule that hides them, an ``ep_comm_overlap`` override) or there is none."""
    plan = c.plan
    paired = plan.ep_comm_overlap is None and pairs_forward_backward(plan.schedule, plan.ep_overlap)
    if plan.ep <= 1 or plan.moe_dispatcher != "alltoall" or paired or (plan.ep_comm_overlap or 0.0) > 0:
        return None, None
    fwd = bwd = 0
    for j, (_, moe) in enumerate(per_layer):
        if moe:
            full = plan.recompute == "full" and j < n_full
            fwd += 2
            bwd += 2 * (2 if full or moe_recomputes_dispatch(moe, plan.recomputed_modules) else 1)
    size = ep_alltoall_bytes(c)
    return (Call("all_to_all", size, "ep", fwd) if fwd else None,
            Call("all_to_all", size, "ep", bwd) if bwd else None)


TPCall = tuple[CollectiveKind, float]
"""A tensor-parallel collective: (kind, bytes in the nccl-tests convention), on the tp axis."""

LOSS_ALL_REDUCES = 3
"""Per-token fp32 all-reduces of the vocabulary-parallel cross-entropy over tp: the max logit, the
target's logit and the sum of exponentials (Megatron-LM ``_VocabParallelCrossEntropy``; torch's
``loss_parallel`` issues the same three)."""


def _tp_tokens_bytes(c: Costing) -> tuple[float, float]:
    """(tokens of one micro-batch on one tp group, bytes of their full-width activations)."""
    tokens = c.plan.micro_batch * c.training.seq_len / c.plan.cp
    return tokens, tokens * c.model.hidden_size * c.training.activation_bytes


def tp_block_calls(c: Costing) -> tuple[TPCall, ...]:
    """The TP collectives of one tensor-parallel block (attention or MLP) in one direction: the
    all-reduce of its row-parallel output, or with SP a reduce-scatter out and an all-gather in
    (Megatron-LM; Korthikanti et al. 2022). Empty without tp."""
    if c.plan.tp <= 1:
        return ()
    size = _tp_tokens_bytes(c)[1]
    return (("reduce_scatter", size), ("all_gather", size)) if c.plan.sp else (("all_reduce", size),)


def tp_end_calls(c: Costing, first: bool, last: bool) -> tuple[tuple[TPCall, ...], tuple[TPCall, ...]]:
    """(forward, backward) TP collectives of one micro-batch outside the layers.

    First chunk: the vocabulary-parallel embedding reduces its output (all-reduce; with SP a
    reduce-scatter, whose backward all-gathers the gradient). Last chunk: the column-parallel
    output layer's input (its gradient all-reduced in backward; with SP all-gathered forward and
    reduce-scattered backward) and the loss's ``LOSS_ALL_REDUCES`` per-token fp32 all-reduces
    (Megatron-LM ``VocabParallelEmbedding``, ``ColumnParallelLinear``; torch's ``RowwiseParallel``
    embedding, ``ColwiseParallel`` output and ``loss_parallel`` do the same)."""
    if c.plan.tp <= 1:
        return (), ()
    tokens, size = _tp_tokens_bytes(c)
    fwd: list[TPCall] = []
    bwd: list[TPCall] = []
    if first:
        fwd.append(("reduce_scatter" if c.plan.sp else "all_reduce", size))
        bwd += [("all_gather", size)] if c.plan.sp else []
    if last:
        fwd += [("all_gather", size)] if c.plan.sp else []
        bwd.append(("reduce_scatter" if c.plan.sp else "all_reduce", size))
        fwd += [("all_reduce", tokens * 4.0)] * LOSS_ALL_REDUCES
    return tuple(fwd), tuple(bwd)


def sp_norm_grad_call(c: Costing, ops: list[Op]) -> TPCall | None:
    """With SP, the one all-reduce over tp of the norms' gradients of ``ops`` (each tp rank saw only
    its part of the sequence) after the backward, before the optimizer (Megatron-LM
    ``finalize_model_grads``: ``_allreduce_layernorm_grads``, coalesced); None without SP."""
    if c.plan.tp <= 1 or not c.plan.sp:
        return None
    params = sum(o.params for o in ops if o.kind == "norm")
    return ("all_reduce", params * c.plan.grad_dtype_bytes) if params > 0 else None


def flow_shop(compute: list[float], comm: list[float], slowdown: float = 0.0) -> float:
    """Two streams, comm prefetching one item ahead: item i computes after comm i finishes.

    Returns the extra seconds over sum(compute) that waiting for comm costs, and, with
    ``slowdown`` f > 0, what the overlap costs: while comm i + 1 runs (from the start of compute i)
    compute advances at 1 / (1 + f) (NCCL's kernels take SMs and HBM bandwidth), so compute i of
    cp seconds beside a comm of cm seconds lasts cp (1 + f) if that ends within cm, else
    cp + cm f / (1 + f). f = 0: the plain flow shop; nothing overlapping: no slowdown.
    """
    comm_end = c_start = c_end = 0.0
    for i, (cp, cm) in enumerate(zip(compute, comm)):
        comm_end = max(comm_end, c_start if i > 0 else 0.0) + cm
        c_start = max(c_end, comm_end)
        beside = comm[i + 1] if slowdown > 0 and i + 1 < len(comm) else 0.0  # the prefetch during compute i
        c_end = c_start + overlapped_duration(cp, beside, slowdown)
    return c_end - sum(compute)


def overlapped_duration(compute: float, comm: float, slowdown: float) -> float:
    """Seconds ``compute`` seconds of work take when a collective of ``comm`` seconds starts with it
    and slows it by 1 + ``slowdown`` while both run (the collective's own time unchanged)."""
    if slowdown <= 0 or comm <= 0:
        return compute
    if compute * (1.0 + slowdown) <= comm:
        return compute * (1.0 + slowdown)
    return compute + comm * slowdown / (1.0 + slowdown)


def _chunk_cost(c: Costing, chunk: int, layers: range, ops_all: list[Op]) -> ChunkCost:
    plan, model = c.plan, c.model
    per_layer = _per_layer(c, chunk, layers)
    n_full = len(layers) if plan.recompute_layers is None else min(plan.recompute_layers, len(layers))
    acc = {k: 0.0 for k in ("tp_fwd", "tp_bwd", "cp_fwd", "cp_bwd", "ep_fwd", "ep_bwd", "ep_a2a_fwd", "ep_a2a_bwd")}
    for j, (ops, moe) in enumerate(per_layer):
        full = plan.recompute == "full" and j < n_full
        blocks = 2 if model.layer_kind(layers[j]) == "transformer" else 1
        for k, v in _layer_comm(c, ops, moe, full, blocks).items():
            acc[k] += v
    last = chunk == num_model_chunks(plan.schedule, plan.pp, plan.vpp) - 1
    end_fwd, end_bwd = tp_end_calls(c, chunk == 0, last)
    acc["tp_fwd"] += sum(c.pricer.time(kind, size, "tp") for kind, size in end_fwd)
    acc["tp_bwd"] += sum(c.pricer.time(kind, size, "tp") for kind, size in end_bwd)
    recomputed = _recomputed(c, per_layer, n_full)
    host = c.host(per_layer, recomputed)
    recompute = sum(c.time(ops, "fwd") for ops in recomputed) + host.recompute
    rec_flops = sum(o.flops for ops in recomputed for o in ops)
    dp_fwd, dp_bwd = _fsdp_exposed(c, ops_all, per_layer)
    gather, lead, gather_call = _param_gathers(c, ops_all, per_layer)
    ep_call_fwd, ep_call_bwd = ep_pass_calls(c, per_layer, n_full)
    return ChunkCost(
        chunk=chunk, fwd=c.time(ops_all, "fwd") + host.fwd, bwd_input=c.time(ops_all, "bwd_input") + host.bwd,
        bwd_weight=c.time(ops_all, "bwd_weight"), recompute=recompute, dp_fwd=dp_fwd, dp_bwd=dp_bwd,
        flops=sum(o.flops + o.bwd_flops for o in ops_all), recompute_flops=rec_flops,
        buckets=_buckets(c, ops_all), param_gather=gather, param_gather_lead=lead, param_gather_call=gather_call,
        ep_call_fwd=ep_call_fwd, ep_call_bwd=ep_call_bwd, **acc,
    )


def _recomputed(c: Costing, per_layer: list[tuple[list[Op], bool]], n_full: int) -> list[list[Op]]:
    """The ops each layer runs again in backward: all of its first ``n_full`` layers under full
    recompute, the plan's modules under selective (``step.recompute``), none otherwise."""
    match c.plan.recompute:
        case "full":
            return [ops for j, (ops, _) in enumerate(per_layer) if j < n_full]
        case "selective":
            mla, modules = c.model.attention == "mla", c.plan.recomputed_modules
            return [recomputed_ops(ops, moe, mla, modules) for ops, moe in per_layer]
    return []


def compute_parts(c: Costing, partition: Partition | None = None) -> tuple[dict[str, float], ...]:
    """Per stage: the compute seconds of one step on one device (every pass of every chunk, as the
    engine runs them) split into ``compute.COMPUTE_PARTS``; each sums to the stage's compute."""
    m = num_microbatches(c.plan, c.training)
    counts = [m // 2, m - m // 2] if c.plan.schedule == "dualpipe" else [m] * c.plan.vpp  # passes per chunk
    partition = partition or partition_plan(c.model, c.training, c.plan)
    out = []
    for stage in partition.stages:
        total = dict.fromkeys(COMPUTE_PARTS, 0.0)
        for n, ch in zip(counts, stage.chunks):
            for part, secs in _chunk_parts(c, ch.chunk, ch.layers, list(ch.ops)).items():
                total[part] += n * secs
        out.append(total)
    return tuple(out)


def _chunk_parts(c: Costing, chunk: int, layers: range, ops_all: list[Op]) -> dict[str, float]:
    """One micro-batch of one chunk: forward, input- and weight-gradient split by part, recompute whole."""
    plan = c.plan
    out = dict.fromkeys(COMPUTE_PARTS, 0.0)
    passes: tuple[Pass, ...] = ("fwd", "bwd_input", "bwd_weight")
    for which in passes:
        for part, secs in ops_time_parts(ops_all, c.accelerator, c.profile, c.training.precision, which,
                                         c.expert_scale).items():
            out[part] += secs
    n_full = len(layers) if plan.recompute_layers is None else min(plan.recompute_layers, len(layers))
    per_layer = _per_layer(c, chunk, layers)
    recomputed = _recomputed(c, per_layer, n_full)
    host = c.host(per_layer, recomputed)
    out["recompute"] = sum(c.time(ops, "fwd") for ops in recomputed) + host.recompute
    out["overhead"] += host.fwd + host.bwd  # the GPU waits for the host's launches
    return out


def _per_layer(c: Costing, chunk: int, layers: range) -> list[tuple[list[Op], bool]]:
    """Each layer's ops (shared between layers of the same kind and MoE-ness) and whether it is MoE."""
    cache: dict[tuple[str, bool], list[Op]] = {}
    out = []
    for i in layers:
        moe = c.model.is_moe_layer(i)
        key = (c.model.layer_kind(i), moe)
        if key not in cache:
            cache[key] = chunk_ops(c.model, c.training, c.plan, -1, range(i, i + 1))
        out.append((cache[key], moe))
    return out


def fsdp_calls(c: Costing, ops_all: list[Op], per_layer: list[tuple[list[Op], bool]]) -> tuple[float, list[float]]:
    """FSDP/ZeRO-3 units of one chunk: (parameters outside the layers, parameters of each layer).

    Each layer is a unit (all-gathered before its forward and again before its backward, its
    gradients reduce-scattered); the rest of the chunk (embedding, final norm, output layer) is the
    root unit, gathered once before the forward and kept for the backward, its gradients
    reduce-scattered once (torch FSDP2 ``fully_shard`` per block then the root). Sizes in the
    nccl-tests convention are these counts times the parameter or gradient bytes."""
    layers = [float(sum(o.params for o in ops)) for ops, _ in per_layer]
    return max(float(sum(o.params for o in ops_all)) - sum(layers), 0.0), layers


def unit_tensors(plan: ParallelPlan, params: float, ops: list[Op] | None) -> list[float]:
    """Elements of each parameter collective of one FSDP/ZeRO-3 unit of ``params`` elements.

    ``module``: the unit's one flat buffer. ``tensor``: each op's parameters above
    ``plan.param_persistence_threshold`` (an op's weight with its bias; a bias alone, at most a
    hidden size, is under DeepSpeed's 1e5 default), the smaller ones persisting unsharded; the root
    unit (``ops`` None) as one tensor, its embedding table dominating it."""
    if plan.param_gather_unit == "module" or ops is None:
        return [params] if params > plan.param_persistence_threshold or plan.param_gather_unit == "module" else []
    return [float(o.params) for o in ops if o.params > plan.param_persistence_threshold]


def tensor_copies_time(c: Costing, nbytes: float) -> float:
    """PyTorch's list-API collectives (``param_gather_unit = tensor``): ProcessGroupNCCL gathers into
    a flat buffer and copies it out to the n per-rank views (``allgather``), or copies n views into
    one before reducing (``reduce_scatter``, ``flatten_for_scatter_gather``): n eager copy ops, each
    the profile's per-op overhead, moving the buffer once through HBM (read and write). The GPU side
    only: the host's loops that issue them are ``step.host.list_api_time``. 0 for ``module`` (one
    flat buffer, ``_all_gather_base``)."""
    if c.plan.param_gather_unit == "module" or nbytes <= 0:
        return 0.0
    hbm = c.accelerator.hbm_bandwidth * c.profile.memory_efficiency
    return c.plan.param_shard * c.profile.kernel_overhead + 2.0 * nbytes / hbm


def tensor_call_time(c: Costing, kind: Literal["all_gather", "reduce_scatter"], nbytes: float) -> float:
    """Seconds of one parameter collective of ``nbytes``: the NCCL call for ``module``; for ``tensor``
    the list API's host loops and copies around it (``step.host.list_api_time``)."""
    coll = c.pricer.time(kind, nbytes, "dp_shard")
    if c.plan.param_gather_unit == "module" or nbytes <= 0:
        return coll
    return list_api_time(kind, c.plan.param_shard, coll, tensor_copies_time(c, nbytes), c.profile)


def _unit_time(c: Costing, kind: Literal["all_gather", "reduce_scatter"], params: float, ops: list[Op] | None,
               nbytes: int) -> float:
    """Seconds of one unit's parameter all-gather or gradient reduce-scatter, tensor by tensor."""
    return sum(tensor_call_time(c, kind, p * nbytes) for p in unit_tensors(c.plan, params, ops))


def _fsdp_exposed(c: Costing, ops_all: list[Op], per_layer: list[tuple[list[Op], bool]]) -> tuple[float, float]:
    """FSDP/ZeRO-3: gather each layer's weights before forward and backward, reduce-scatter grads;
    the root unit (``fsdp_calls``) gathered before the first layer, reduce-scattered after the last.
    Each unit's collectives are ``unit_tensors`` (one flat buffer, or one per tensor)."""
    plan = c.plan
    if plan.param_shard <= 1 or not per_layer:
        return 0.0, 0.0
    wbytes, gbytes = c.training.param_bytes, plan.grad_dtype_bytes
    root, layers = fsdp_calls(c, ops_all, per_layer)
    # nccl-tests convention: all-gather / reduce-scatter size is the full (gathered) buffer
    gathers = [_unit_time(c, "all_gather", p, ops, wbytes) for p, (ops, _) in zip(layers, per_layer)]
    scatters = [_unit_time(c, "reduce_scatter", p, ops, gbytes) for p, (ops, _) in zip(layers, per_layer)]
    root_gather = _unit_time(c, "all_gather", root, None, wbytes)
    root_scatter = _unit_time(c, "reduce_scatter", root, None, gbytes)
    fwd = [c.time(ops, "fwd") for ops, _ in per_layer]
    bwd = [c.time(ops, "bwd") for ops, _ in per_layer]
    if not plan.overlap_param_gather:
        return root_gather + sum(gathers), sum(gathers) + sum(scatters) + root_scatter
    # backward: the comm stream carries the next layer's gather and the previous layer's scatter
    comm_b = [g + (scatters[i - 1] if i > 0 else 0.0) for i, g in enumerate(gathers)]
    slow = c.profile.overlap_slowdown
    f_ag, f_rs = slow.get("all_gather", 0.0), slow.get("reduce_scatter", 0.0)
    f_b = (f_ag * sum(gathers) + f_rs * sum(scatters[:-1])) / max(sum(gathers) + sum(scatters[:-1]), 1e-300)
    return (root_gather + flow_shop(fwd, gathers, f_ag),
            flow_shop(bwd[::-1], comm_b, f_b) + scatters[-1] + root_scatter)


def _grad_axis(plan: ParallelPlan) -> tuple[CollectiveKind, Axis]:
    """(DP reduction kind, dense axis): all-reduce without ZeRO, reduce-scatter with ZeRO-1/2."""
    kind: CollectiveKind = "reduce_scatter" if plan.zero in (1, 2) else "all_reduce"
    return kind, ("dp+cp" if plan.cp > 1 else "dp")


def _buckets(c: Costing, ops: list[Op]) -> tuple[Bucket, ...]:
    """DP gradient buckets of one chunk.

    Without ZeRO-3/FSDP: all-reduce (or reduce-scatter with ZeRO-1/2) of dense grads over dp(+cp)
    and of expert grads over the expert-dp group. FSDP reduce-scatters per layer inside the chunk;
    only hybrid sharding (HSDP) adds an all-reduce of each shard's grads across replicas.
    """
    plan = c.plan
    if plan.param_shard > 1:
        return _hsdp_buckets(c, ops)
    if plan.dp * plan.cp == 1:
        return ()
    kind, axis = _grad_axis(plan)
    expert = sum(o.params for o in ops if is_routed_expert(o))
    dense = sum(o.params for o in ops) - expert
    out: list[Bucket] = []
    out += _split(c, kind, dense * plan.grad_dtype_bytes, axis, _first_bucket(c, ops))
    out += _split(c, kind, expert * plan.grad_dtype_bytes, "edp")
    return tuple(sorted(out, key=lambda b: b.at))


def _first_bucket(c: Costing, ops: list[Op]) -> float:
    """Bytes of PyTorch DDP's first bucket: whole parameters in the order the backward makes their
    gradients ready (the chunk's ops in reverse) until they reach ``plan.first_bucket_size``
    (torch's reducer closes a bucket once it holds at least the cap); 0 when the plan sets none."""
    cap = c.plan.first_bucket_size
    total = 0.0
    if cap <= 0:
        return total
    for o in reversed(ops):
        if not is_routed_expert(o):
            total += o.params * c.plan.grad_dtype_bytes
            if total >= cap:
                break
    return total


def _split(c: Costing, kind: CollectiveKind, nbytes: float, axis: Axis, first: float = 0.0) -> list[Bucket]:
    """``nbytes`` of gradients in buckets of at most ``plan.bucket_size``, ready evenly through
    backward; with ``first`` (PyTorch DDP) that many bytes in a bucket of their own first."""
    if nbytes <= 0:
        return []
    if 0 < first < nbytes:  # PyTorch DDP: a small first bucket, then the rest
        head = [Bucket(at=first / nbytes, time=c.pricer.time(kind, first, axis), call=Call(kind, first, axis))]
        return head + [replace(b, at=(first + b.at * (nbytes - first)) / nbytes)
                       for b in _even_buckets(c, kind, nbytes - first, axis)]
    return _even_buckets(c, kind, nbytes, axis)


def _even_buckets(c: Costing, kind: CollectiveKind, nbytes: float, axis: Axis) -> list[Bucket]:
    """``nbytes`` in equal buckets of at most ``plan.bucket_size``, ready evenly through backward."""
    n = max(1, math.ceil(nbytes / c.plan.bucket_size))
    call = Call(kind, nbytes / n, axis)
    return [Bucket(at=(i + 1) / n, time=c.pricer.time(kind, nbytes / n, axis), call=call) for i in range(n)]


def _hsdp_buckets(c: Costing, ops: list[Op]) -> tuple[Bucket, ...]:
    plan = c.plan
    if plan.fsdp != "hybrid" or plan.shard_degree == plan.dp:
        return ()
    nbytes = sum(o.params for o in ops) * plan.grad_dtype_bytes / plan.shard_degree  # this device's grad shard
    return tuple(_split(c, "all_reduce", nbytes, "dp_rep"))


def _param_gathers(c: Costing, ops: list[Op], per_layer: list[tuple[list[Op], bool]]) -> tuple[float, float, Call | None]:
    """ZeRO-1/2: (seconds to all-gather the chunk's updated bf16 weights after the sharded optimizer
    step, in buckets; how long the chunk's first forward waits for them when overlapped).

    Overlapped, the gathers run in forward order, the parameters outside the layers (embedding)
    first, then layer by layer; each layer's forward waits only for its own gather (a flow shop), so
    the wait is the first gather plus whatever the gathers fall behind the forward pass (-1 without
    layers: the forward waits for the whole gather).
    """
    plan = c.plan
    if plan.zero not in (1, 2) or plan.fsdp != "none":
        return 0.0, -1.0, None
    _, axis = _grad_axis(plan)
    wbytes = c.training.param_bytes
    nbytes = sum(o.params for o in ops) * wbytes
    n = max(1, math.ceil(nbytes / plan.bucket_size))
    total = n * c.pricer.time("all_gather", nbytes / n, axis)
    call = Call("all_gather", nbytes / n, axis, n)
    if not per_layer:
        return total, -1.0, call
    layers = [sum(o.params for o in layer) for layer, _ in per_layer]
    rest = nbytes / wbytes - sum(layers)
    items = ([rest] if rest > 0 else []) + layers
    gathers = [c.pricer.time("all_gather", p * wbytes, axis) for p in items]
    fwd = ([0.0] if rest > 0 else []) + [c.time(layer, "fwd") for layer, _ in per_layer]
    return total, flow_shop(fwd, gathers, c.profile.overlap_slowdown.get("all_gather", 0.0)), call


def step_calls(c: Costing, part: Partition | None = None) -> tuple[tuple[Call, ...], ...]:
    """Per stage, every collective one device of it makes in one step as lowering prices them
    (``Call.count`` of each): the TP calls of every layer and of the model's ends per micro-batch
    and pass, the SP norms' gradient all-reduce, the FSDP/ZeRO-3 unit gathers and scatters, the DP
    gradient buckets, the ZeRO-1/2 parameter gathers and the pipeline sends (``send_recv``: one per
    micro-batch and direction to each neighbouring stage). Counts only: the engine times them.
    CP, EP and the recompute's extra calls are not listed."""
    plan, model = c.plan, c.model
    part = part or partition_plan(model, c.training, plan)
    m = num_microbatches(plan, c.training)
    act = plan.micro_batch * c.training.seq_len / plan.cp * model.hidden_size * c.training.activation_bytes
    p2p_size = act / (plan.tp if plan.sp else 1)
    last_chunk = num_model_chunks(plan.schedule, plan.pp, plan.vpp) - 1
    out = []
    for stage in part.stages:
        tally: dict[tuple[CollectiveKind, float, Axis], int] = {}

        def add(kind: CollectiveKind, size: float, axis: Axis, n: int) -> None:
            if size > 0 and n > 0:
                tally[(kind, float(size), axis)] = tally.get((kind, float(size), axis), 0) + n

        for ch in stage.chunks:
            per_layer = _per_layer(c, ch.chunk, ch.layers)
            blocks = sum(2 if model.layer_kind(i) == "transformer" else 1 for i in ch.layers)
            for kind, size in tp_block_calls(c):
                add(kind, size, "tp", 2 * blocks * m)  # forward and backward
            for calls in tp_end_calls(c, ch.chunk == 0, ch.chunk == last_chunk):
                for kind, size in calls:
                    add(kind, size, "tp", m)
            if plan.param_shard > 1 and per_layer:
                root, layers = fsdp_calls(c, list(ch.ops), per_layer)
                for p, (ops, _) in zip(layers, per_layer):
                    for t in unit_tensors(plan, p, ops):
                        add("all_gather", t * c.training.param_bytes, "dp_shard", 2 * m)
                        add("reduce_scatter", t * plan.grad_dtype_bytes, "dp_shard", m)
                for t in unit_tensors(plan, root, None):
                    add("all_gather", t * c.training.param_bytes, "dp_shard", m)
                    add("reduce_scatter", t * plan.grad_dtype_bytes, "dp_shard", m)
            for b in _buckets(c, list(ch.ops)):
                if b.call is not None:
                    add(b.call.kind, b.call.size, b.call.axis, b.call.count)
            gather = _param_gathers(c, list(ch.ops), per_layer)[2]
            if gather is not None:
                add(gather.kind, gather.size, gather.axis, gather.count)
        norms = sp_norm_grad_call(c, [o for ch in stage.chunks for o in ch.ops])
        if norms is not None:
            add(norms[0], norms[1], "tp", 1)
        # each chunk receives its input and sends its output (forward), the gradients the other
        # way (backward), except at the model's two ends
        ends = sum(int(ch.chunk > 0) + int(ch.chunk < last_chunk) for ch in stage.chunks) if plan.pp > 1 else 0
        add("send_recv", p2p_size, "pp", 2 * m * ends)
        out.append(tuple(Call(k, s, a, n) for (k, s, a), n in sorted(tally.items())))
    return tuple(out)
