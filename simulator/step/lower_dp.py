"""Lowering of the data-parallel traffic: FSDP/ZeRO-3 units, DP gradient buckets, ZeRO-1/2
parameter gathers, and the flow shop that prices a prefetched gather beside the compute it hides
behind.

Owns, for one model chunk: the FSDP/ZeRO-3 units (the root and each layer) with their gathers and
scatters, tensor by tensor where the framework issues one call per tensor (DeepSpeed ZeRO-3's list
API, ``step.host.list_api_time``), and the exposed part of their prefetch; the DP gradient buckets
(DDP's first bucket, even buckets, HSDP's two levels); the ZeRO-1/2 parameter gathers. Every
collective is priced by ``CommPricer`` through ``step.costing.Costing``; the chunk's compute and
its TP, CP and EP calls are ``step.lower``'s, scheduling the engine's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

from clustersim.simulator.network import CollectiveKind
from clustersim.simulator.plan import Axis, ParallelPlan
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.compute import is_routed_expert
from clustersim.simulator.step import zeropp
from clustersim.simulator.step.costs import Bucket, Call
from clustersim.simulator.step.host import list_api_time
from clustersim.workloads import Op


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


def tensor_copies_time(c: Costing, nbytes: float, ranks: int | None = None) -> float:
    """PyTorch's list-API collectives (``param_gather_unit = tensor``): ProcessGroupNCCL gathers into
    a flat buffer and copies it out to the n per-rank views (``allgather``), or copies n views into
    one before reducing (``reduce_scatter``, ``flatten_for_scatter_gather``): n eager copy ops, each
    the profile's per-op overhead, moving the buffer once through HBM (read and write); n =
    ``ranks``, the shard group by default. The GPU side only: the host's loops that issue them are
    ``step.host.list_api_time``. 0 for ``module`` (one flat buffer, ``_all_gather_base``)."""
    if c.plan.param_gather_unit == "module" or nbytes <= 0:
        return 0.0
    return (ranks or c.plan.param_shard) * c.profile.kernel_overhead + 2.0 * nbytes / c.hbm_bandwidth


def tensor_call_time(c: Costing, kind: Literal["all_gather", "reduce_scatter"], nbytes: float,
                     axis: Literal["dp_shard", "dp_hpz"] = "dp_shard") -> float:
    """Seconds of one parameter collective of ``nbytes`` on ``axis``: the NCCL call for ``module``;
    for ``tensor`` the list API's host loops and copies around it (``step.host.list_api_time``)."""
    coll = c.pricer.time(kind, nbytes, axis)
    if c.plan.param_gather_unit == "module" or nbytes <= 0:
        return coll
    ranks = c.plan.zero_hpz_partition_size if axis == "dp_hpz" else c.plan.param_shard  # the group's size
    return list_api_time(kind, ranks, coll, tensor_copies_time(c, nbytes, ranks), c.profile)


def _call_time(c: Costing, call: Call) -> float:
    """Seconds of one unit call: a parameter gather or gradient scatter as ``tensor_call_time``,
    ZeRO++ qgZ's all-to-alls (one coalesced call each, not the list API) as priced."""
    if call.kind in ("all_gather", "reduce_scatter") and call.axis in ("dp_shard", "dp_hpz"):
        return tensor_call_time(c, call.kind, call.size, call.axis)
    return c.pricer.time(call.kind, call.size, call.axis)


def unit_time(c: Costing, params: float, ops: list[Op] | None, phase: Literal["fwd", "bwd", "grad"]) -> float:
    """Seconds of one unit's parameter all-gather before its forward (``fwd``) or backward (``bwd``),
    or of its gradient reduction (``grad``), tensor by tensor, with ZeRO++'s calls and kernels
    (``step.zeropp``) where the plan turns them on."""
    tensors = unit_tensors(c.plan, params, ops)
    if phase == "grad":
        return sum(_call_time(c, k) for k in zeropp.scatter_calls(c, tensors)) + zeropp.scatter_kernels(c, tensors)
    return (sum(_call_time(c, k) for k in zeropp.gather_calls(c, tensors, phase))
            + zeropp.gather_kernels(c, tensors, phase))


def fsdp_exposed(c: Costing, ops_all: list[Op], per_layer: list[tuple[list[Op], bool]]) -> tuple[float, float]:
    """FSDP/ZeRO-3: gather each layer's weights before forward and backward, reduce-scatter grads;
    the root unit (``fsdp_calls``) gathered before the first layer, reduce-scattered after the last.
    Each unit's collectives are ``unit_tensors`` (one flat buffer, or one per tensor); under ZeRO++
    the backward gathers and the reductions are ``step.zeropp``'s."""
    plan = c.plan
    if plan.param_shard <= 1 or not per_layer:
        return 0.0, 0.0
    root, layers = fsdp_calls(c, ops_all, per_layer)
    # nccl-tests convention: all-gather / reduce-scatter size is the full (gathered) buffer
    gathers = [unit_time(c, p, ops, "fwd") for p, (ops, _) in zip(layers, per_layer)]
    regathers = [unit_time(c, p, ops, "bwd") for p, (ops, _) in zip(layers, per_layer)]
    scatters = [unit_time(c, p, ops, "grad") for p, (ops, _) in zip(layers, per_layer)]
    root_gather = unit_time(c, root, None, "fwd")
    root_scatter = unit_time(c, root, None, "grad")
    fwd = [c.time(ops, "fwd") for ops, _ in per_layer]
    bwd = [c.time(ops, "bwd") for ops, _ in per_layer]
    if not plan.overlap_param_gather:
        return root_gather + sum(gathers), sum(regathers) + sum(scatters) + root_scatter
    # backward: the comm stream carries the next layer's gather and the previous layer's scatter
    comm_b = [g + (scatters[i - 1] if i > 0 else 0.0) for i, g in enumerate(regathers)]
    slow = c.profile.overlap_slowdown
    f_ag, f_rs = slow.get("all_gather", 0.0), slow.get("reduce_scatter", 0.0)
    f_b = (f_ag * sum(regathers) + f_rs * sum(scatters[:-1])) / max(sum(regathers) + sum(scatters[:-1]), 1e-300)
    return (root_gather + flow_shop(fwd, gathers, f_ag),
            flow_shop(bwd[::-1], comm_b, f_b) + scatters[-1] + root_scatter)


def unit_calls(c: Costing, params: float, ops: list[Op] | None) -> tuple[list[Call], list[Call], list[Call]]:
    """One unit's calls per micro-batch: (forward gathers, backward gathers, gradient reductions)."""
    tensors = unit_tensors(c.plan, params, ops)
    return (zeropp.gather_calls(c, tensors, "fwd"), zeropp.gather_calls(c, tensors, "bwd"),
            zeropp.scatter_calls(c, tensors))


def _grad_axis(plan: ParallelPlan) -> tuple[CollectiveKind, Axis]:
    """(DP reduction kind, dense axis): all-reduce without ZeRO, reduce-scatter with ZeRO-1/2."""
    kind: CollectiveKind = "reduce_scatter" if plan.zero in (1, 2) else "all_reduce"
    return kind, ("dp+cp" if plan.cp > 1 else "dp")


def grad_buckets(c: Costing, ops: list[Op]) -> tuple[Bucket, ...]:
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


def param_gathers(c: Costing, ops: list[Op],
                  per_layer: list[tuple[list[Op], bool]]) -> tuple[float, float, tuple[Call, ...]]:
    """ZeRO-1/2: (seconds to all-gather the chunk's updated bf16 weights after the sharded optimizer
    step, in buckets; how long the chunk's first forward waits for them when overlapped; the calls).

    The dense parameters gather over the dense DP axis (dp, or dp+cp), the routed experts' over the
    expert-DP group (``edp``), each part in its own buckets of at most ``plan.bucket_size``: the
    distributed optimizer shards and re-gathers each buffer over the group that reduces its
    gradients (Megatron-LM megatron/core/distributed/distributed_data_parallel.py @ 00119989:
    ``allreduce = False`` expert parameters get their own ``expert_parallel_buffers`` on
    ``intra_expt_dp_group``, and ``start_param_sync`` all-gathers ``bucket_groups +
    expert_parallel_bucket_groups``); with edp = 1 the experts are not sharded and nothing gathers.

    Overlapped, the gathers run in forward order, the parameters outside the layers (embedding)
    first, then layer by layer, each layer's dense part then its expert part on the one stream;
    each layer's forward waits only for its own gather (a flow shop), so the wait is the first
    gather plus whatever the gathers fall behind the forward pass (-1 without layers: the forward
    waits for the whole gather).
    """
    plan = c.plan
    if plan.zero not in (1, 2) or plan.fsdp != "none":
        return 0.0, -1.0, ()
    _, axis = _grad_axis(plan)
    dense, expert = _dense_expert(ops)
    calls = tuple(call for call in (_gather_call(c, dense, axis), _gather_call(c, expert, "edp")) if call is not None)
    total = sum(call.count * c.pricer.time(call.kind, call.size, call.axis) for call in calls)
    if not per_layer:
        return total, -1.0, calls
    layers = [_dense_expert(layer) for layer, _ in per_layer]
    rest = (dense - sum(d for d, _ in layers), expert - sum(e for _, e in layers))
    items = ([rest] if sum(rest) > 0 else []) + layers
    gathers = [_item_gather_time(c, d, e, axis) for d, e in items]
    fwd = ([0.0] if sum(rest) > 0 else []) + [c.time(layer, "fwd") for layer, _ in per_layer]
    return total, flow_shop(fwd, gathers, c.profile.overlap_slowdown.get("all_gather", 0.0)), calls


def _dense_expert(ops: list[Op]) -> tuple[float, float]:
    """(dense, routed-expert) parameters of ``ops``."""
    expert = float(sum(o.params for o in ops if is_routed_expert(o)))
    return float(sum(o.params for o in ops)) - expert, expert


def _gather_call(c: Costing, params: float, axis: Axis) -> Call | None:
    """The bucketed all-gather of ``params`` weights over ``axis`` (``ceil(bytes / bucket_size)``
    equal buckets, nccl-tests size: the gathered bucket); None when nothing is sharded on it (no
    parameters, or the expert part with edp = 1)."""
    nbytes = params * c.training.param_bytes
    if nbytes <= 0 or (axis == "edp" and c.plan.expert_dp <= 1):
        return None
    n = max(1, math.ceil(nbytes / c.plan.bucket_size))
    return Call("all_gather", nbytes / n, axis, n)


def _item_gather_time(c: Costing, dense: float, expert: float, axis: Axis) -> float:
    """Seconds of one layer's gathers, its dense part over ``axis`` then its expert part over edp."""
    wbytes = c.training.param_bytes
    out = c.pricer.time("all_gather", dense * wbytes, axis)
    return out + (c.pricer.time("all_gather", expert * wbytes, "edp") if c.plan.expert_dp > 1 else 0.0)
