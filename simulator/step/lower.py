"""Lowering: turn (workload, plan, cluster) into per-stage costs the engine schedules.

Owns the cost of one model chunk for one micro-batch on one device: compute by pass (forward,
input-gradient, weight-gradient, recompute), and the exposed communication inside it (TP
collectives on the critical path, CP ring exchange hidden behind attention, EP all-to-all, the
activation copies to and from the host that CPU offloading exposes: ``step.offload``); the
optimizer of each stage; the per-stage tally of every collective (``step_calls``); and, for the
Result, each stage's compute split by where it goes (``compute_parts``). The data-parallel traffic
(FSDP/ZeRO-3 units prefetched one layer ahead, DP gradient buckets, ZeRO-1/2 parameter gathers) is
priced by ``step.lower_dp``, the shared inputs are ``step.costing.Costing``. Every collective is
priced by ``CommPricer``. Scheduling is the engine's.
"""

from __future__ import annotations

from clustersim.simulator.network import CollectiveKind
from clustersim.simulator.step.compute import COMPUTE_PARTS, Pass, is_routed_expert, ops_time_parts, optimizer_time
from clustersim.simulator.plan import (
    Axis,
    num_microbatches,
    num_model_chunks,
)
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.costs import Call, ChunkCost, Lowered, StageCost
from clustersim.simulator.step.dispatch import dispatch_time, ep_shape
from clustersim.simulator.step.offload import chunk_offload
from clustersim.simulator.step.lower_dp import fsdp_calls, fsdp_exposed, grad_buckets, param_gathers, unit_calls
from clustersim.simulator.step.partition import ChunkPart, Partition, chunk_ops, partition_plan
from clustersim.simulator.step.tp_overlap import block_exposed, tp_blocks
from clustersim.simulator.step.recompute import full_recompute_ops, moe_recomputes_dispatch, recomputed_ops
from clustersim.workloads import Op
from clustersim.workloads.mamba import mamba_cp_alltoall_bytes


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


def _layer_comm(c: Costing, ops: list[Op], moe: bool, full_recompute: bool, n_blocks: int = 2) -> dict[str, float]:
    """Exposed TP, CP and EP seconds of one layer, forward and backward.

    ``n_blocks``: tensor-parallel blocks in the layer, each one gather in and one scatter out
    (2 for a transformer layer, attention and MLP; 1 for a layer of a hybrid ``layer_pattern``).
    With ``plan.tp_overlap`` (and no ``tp_comm_overlap`` override) each block's gather and scatter
    run chunk by chunk beside its GEMMs and what is exposed comes from their times
    (``step.tp_overlap``); otherwise the override's fraction of them is hidden.
    The CP ring runs only in layers with an attention core; a Mamba-2 layer with cp > 1 pays the
    sequence-to-head all-to-alls of its scan instead (``mamba_cp_alltoall_bytes``), unhidden."""
    plan, t, m = c.plan, c.training, c.model
    tokens = plan.micro_batch * t.seq_len / plan.cp
    priced = {kind: c.pricer.time(kind, size, "tp") for kind, size in tp_block_calls(c)}  # empty without tp
    if priced and plan.tp_overlap and plan.sp and plan.tp_comm_overlap == 0.0:
        per = [block_exposed(b, priced["all_gather"], priced["reduce_scatter"], plan.tp, lambda o, w: c.time([o], w),
                             c.profile.overlap_slowdown) for b in tp_blocks(ops, n_blocks)]
        fwd, bwd = sum(f for f, _ in per), sum(b for _, b in per)
        out = {"tp_fwd": fwd, "tp_bwd": bwd + (fwd if full_recompute else 0.0)}
    else:
        tp = n_blocks * sum(priced.values()) * (1.0 - plan.tp_comm_overlap)
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
        a2a = 2 * dispatch_time(plan.moe_dispatcher, m, tokens / plan.tp, m.expert_width * t.activation_bytes,
                                shape, c.pricer.cluster, c.profile)
    rec = 2 if full_recompute or moe_recomputes_dispatch(moe, plan.recomputed_modules) else 1
    paired = plan.pairs_passes
    exposed = 0.0 if paired else a2a * (1.0 - (plan.ep_comm_overlap or 0.0))
    out["ep_fwd"], out["ep_bwd"] = exposed, exposed * rec
    hideable = a2a if paired else 0.0
    out["ep_a2a_fwd"], out["ep_a2a_bwd"] = hideable, hideable * rec
    return out


def ep_alltoall_bytes(c: Costing) -> float:
    """Bytes per rank of one EP all-to-all (dispatch or combine) of one MoE layer and micro-batch,
    ``alltoall`` dispatcher: the tp group's tokens, ``top_k`` copies of each, at the experts' width
    (h, or a LatentMoE's latent size)."""
    plan, t, m = c.plan, c.training, c.model
    return plan.micro_batch * t.seq_len / plan.cp / plan.tp * m.top_k * m.expert_width * t.activation_bytes


def ep_pass_calls(c: Costing, per_layer: list[tuple[list[Op], bool]], n_full: int) -> tuple[Call | None, Call | None]:
    """(forward, backward) EP all-to-alls one pass of a chunk exposes on its compute stream, as
    calls (dispatch and combine of every MoE layer; the backward's recompute runs them again), for
    the flows over time; None where the exposed EP time is not whole calls (another dispatcher, a
    paired schedule that hides them, an ``ep_comm_overlap`` override) or there is none."""
    plan = c.plan
    if plan.ep <= 1 or plan.moe_dispatcher != "alltoall" or plan.pairs_passes or (plan.ep_comm_overlap or 0.0) > 0:
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


def _chunk_cost(c: Costing, chunk: int, layers: range, ops_all: list[Op]) -> ChunkCost:
    plan, model = c.plan, c.model
    per_layer = _per_layer(c, chunk, layers)
    n_full = len(layers) if plan.recompute_layers is None else min(plan.recompute_layers, len(layers))
    acc = {k: 0.0 for k in ("tp_fwd", "tp_bwd", "cp_fwd", "cp_bwd", "ep_fwd", "ep_bwd", "ep_a2a_fwd", "ep_a2a_bwd")}
    seen: dict[tuple[int, bool, bool, int], dict[str, float]] = {}  # layers of one kind share their op list
    for j, (ops, moe) in enumerate(per_layer):
        full = plan.recompute == "full" and j < n_full
        blocks = 2 if model.layer_kind(layers[j]) == "transformer" else 1
        key = (id(ops), moe, full, blocks)
        if key not in seen:
            seen[key] = _layer_comm(c, ops, moe, full, blocks)
        for k, v in seen[key].items():
            acc[k] += v
    last = chunk == num_model_chunks(plan.schedule, plan.pp, plan.vpp) - 1
    end_fwd, end_bwd = tp_end_calls(c, chunk == 0, last)
    acc["tp_fwd"] += sum(c.pricer.time(kind, size, "tp") for kind, size in end_fwd)
    acc["tp_bwd"] += sum(c.pricer.time(kind, size, "tp") for kind, size in end_bwd)
    recomputed = _recomputed(c, per_layer, n_full)
    host = c.host(per_layer, recomputed)
    recompute = sum(c.time(ops, "fwd") for ops in recomputed) + host.recompute
    rec_flops = sum(o.flops for ops in recomputed for o in ops)
    dp_fwd, dp_bwd = fsdp_exposed(c, ops_all, per_layer)
    gather, lead, gather_calls = param_gathers(c, ops_all, per_layer)
    ep_call_fwd, ep_call_bwd = ep_pass_calls(c, per_layer, n_full)
    offload_fwd, offload_bwd = chunk_offload(c, layers, per_layer)
    experts = [o for ops, moe in per_layer if moe for o in ops if o.role == "routed_expert"]
    return ChunkCost(
        chunk=chunk, fwd=c.time(ops_all, "fwd") + host.fwd, bwd_input=c.time(ops_all, "bwd_input") + host.bwd,
        bwd_weight=c.time(ops_all, "bwd_weight"), recompute=recompute, dp_fwd=dp_fwd, dp_bwd=dp_bwd,
        flops=sum(o.flops + o.bwd_flops for o in ops_all), recompute_flops=rec_flops,
        buckets=grad_buckets(c, ops_all), param_gather=gather, param_gather_lead=lead, param_gather_calls=gather_calls,
        ep_call_fwd=ep_call_fwd, ep_call_bwd=ep_call_bwd, offload_fwd=offload_fwd, offload_bwd=offload_bwd,
        moe_layers=sum(moe for _, moe in per_layer), expert_fwd=c.time(experts, "fwd"),
        expert_bwd_input=c.time(experts, "bwd_input"), expert_bwd_weight=c.time(experts, "bwd_weight"), **acc,
    )


def _recomputed(c: Costing, per_layer: list[tuple[list[Op], bool]], n_full: int) -> list[list[Op]]:
    """The ops each layer runs again in backward: all of its first ``n_full`` layers under full
    recompute, the plan's modules under selective (``step.recompute``), none otherwise."""
    match c.plan.recompute:
        case "full":
            return [full_recompute_ops(ops, c.plan.recompute_saved) for j, (ops, _) in enumerate(per_layer) if j < n_full]
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
                    for k in (k for calls in unit_calls(c, p, ops) for k in calls):
                        add(k.kind, k.size, k.axis, m)
                fwd_root, _, grad_root = unit_calls(c, root, None)
                for k in fwd_root + grad_root:
                    add(k.kind, k.size, k.axis, m)
            for b in grad_buckets(c, list(ch.ops)):
                if b.call is not None:
                    add(b.call.kind, b.call.size, b.call.axis, b.call.count)
            for gather in param_gathers(c, list(ch.ops), per_layer)[2]:
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
