"""Phase 1: which layers live on which pipeline stage, and what each device holds.

Owns the layer split (even, with embedding on the first and loss on the last stage), each
chunk's ops, and the per-device memory (weights, gradients, optimizer state, activations at the schedule's peak of
in-flight micro-batches, buffers) and the out-of-memory check. Activation sizes come from
``workloads.activations`` (Korthikanti et al. 2022). It hands lowering one value, the
``Partition`` (stages, their chunks and ops, memory), so lowering rebuilds none of it. It times
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from clustersim.units import GIB
from clustersim.simulator.step.compute import is_routed_expert
from clustersim.simulator.step.zeropp import gather_buffer_bytes, secondary_weight_bytes
from clustersim.simulator.errors import OutOfMemoryError
from clustersim.simulator.plan import (
    ParallelPlan,
    chunks_per_stage,
    model_chunk,
    num_microbatches,
    num_model_chunks,
    stage_in_flight_peak,
)
from clustersim.topologies import Cluster
from clustersim.workloads import (
    ModelSpec,
    Op,
    TrainingSpec,
    embedding_activation_bytes,
    embedding_ops,
    head_activation_bytes,
    head_ops,
    layer_activation_bytes,
    layer_ops,
    moe_dispatch_buffer_bytes,
    mtp_activation_bytes,
)

RESERVED_BYTES = 2.0 * 2**30  # CUDA context, cuBLAS/NCCL workspaces, allocator slack (~2 GiB, as seen in Megatron runs)


def layer_split(num_layers: int, chunks: int) -> list[range]:
    """Layers of each model chunk: even, the remainder on the middle chunks (ends carry embedding/loss)."""
    base, extra = divmod(num_layers, chunks)
    middle = list(range(1, chunks - 1)) or list(range(chunks))
    bonus = {middle[i % len(middle)] for i in range(extra)} if extra <= len(middle) else set(range(extra))
    out, start = [], 0
    for c in range(chunks):
        n = base + (1 if c in bonus else 0)
        out.append(range(start, start + n))
        start += n
    return out


def pipeline_split(num_layers: int, pp: int, vpp: int, *, embedding: bool, loss: bool) -> tuple[int, ...] | None:
    """Transformer layers per model chunk (model order) as Megatron-Core builds them with
    ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``
    (``get_num_layers_to_build`` in megatron/core/transformer/transformer_block.py): the embedding
    and the loss each count as one layer of an even split of num_layers + 1 + 1 over pp * vpp
    chunks, and the first (last) model chunk builds one transformer layer fewer. None where
    Megatron-Core's divisibility assert would fail or a chunk would go below zero layers."""
    chunks = pp * vpp
    total = num_layers + int(embedding) + int(loss)
    if chunks < 1 or total % chunks:
        return None
    sizes = [total // chunks] * chunks
    sizes[0] -= int(embedding)
    sizes[-1] -= int(loss)
    return tuple(sizes) if min(sizes) >= 0 else None


def _explicit(sizes: tuple[int, ...]) -> list[range]:
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [range(a, a + n) for a, n in zip(starts, sizes)]


def stage_chunks(plan: ParallelPlan, num_layers: int) -> list[list[tuple[int, range]]]:
    """For each stage, its (model chunk index, layers) pairs; chunk v of stage s is v*pp + s
    (DualPipe: stage s holds model chunks s and pp-1-s)."""
    total = num_model_chunks(plan.schedule, plan.pp, plan.vpp)
    split = _explicit(plan.layer_split) if plan.layer_split else layer_split(num_layers, total)
    per = chunks_per_stage(plan.schedule, plan.vpp)
    return [[(k, split[k]) for k in (model_chunk(plan.schedule, s, v, plan.pp) for v in range(per))]
            for s in range(plan.pp)]


class OpKwargs(TypedDict):
    """The sharding keywords of ``workloads.layer_ops``, ``embedding_ops`` and ``head_ops``."""

    micro_batch: int
    seq_len: int
    tp: int
    cp: int
    ep: int
    etp: int
    dtype_bytes: int
    sp: bool


class _Shard(TypedDict):
    micro_batch: int
    seq_len: int
    tp: int
    cp: int
    sp: bool


def op_kwargs(plan: ParallelPlan, training: TrainingSpec) -> OpKwargs:
    """The sharding keywords of ``workloads.layer_ops`` for this plan."""
    return {
        "micro_batch": plan.micro_batch,
        "seq_len": training.seq_len,
        "tp": plan.tp,
        "cp": plan.cp,
        "ep": plan.ep,
        "etp": plan.etp,
        "dtype_bytes": training.activation_bytes,
        "sp": plan.sp,
    }


def sorts_by_local_expert(plan: ParallelPlan) -> bool:
    """Whether the plan's dispatcher sorts received tokens by local expert: Megatron-Core's
    all-to-all dispatcher does (``workloads.blocks.expert_sort_ops``); the flex dispatchers
    (DeepEP, HybridEP) permute once after their fused dispatch, which ``moe_permute`` already
    counts. Search bounds leave the copies out (still lower bounds)."""
    return plan.moe_dispatcher == "alltoall"


LayerSignature = tuple[str, bool, int | None]
"""All that ``workloads.layer_ops`` and ``layer_activation_bytes`` read of a layer index besides the
shard: (layer kind, MoE or not, attention window)."""


def layer_signature(model: ModelSpec, i: int) -> LayerSignature:
    """Layer ``i``'s signature: layers with equal signatures have the same ops and activations."""
    return model.layer_kind(i), model.is_moe_layer(i), model.attention_window(i)


class LayerMemo:
    """One plan's layer ops and activation bytes, computed once per layer signature (a model's 80
    identical layers cost one ``layer_ops`` call, not 80); bound to one (model, training, plan)."""

    def __init__(self, model: ModelSpec, training: TrainingSpec, plan: ParallelPlan) -> None:
        self.model, self.training, self.plan = model, training, plan
        self._ops: dict[LayerSignature, tuple[Op, ...]] = {}
        self._bytes: dict[LayerSignature, float] = {}

    def ops(self, i: int) -> tuple[Op, ...]:
        """``workloads.layer_ops`` of layer ``i`` under the plan's sharding."""
        key = layer_signature(self.model, i)
        if key not in self._ops:
            kw = op_kwargs(self.plan, self.training)
            self._ops[key] = tuple(layer_ops(self.model, i, attention_kernel=self.training.attention_kernel,
                                             sort_by_local_expert=sorts_by_local_expert(self.plan),
                                             fused_grouped_mlp=self.plan.moe_fused_grouped_mlp, **kw))
        return self._ops[key]

    def activation_bytes(self, i: int) -> float:
        """``layer_bytes`` of layer ``i``."""
        key = layer_signature(self.model, i)
        if key not in self._bytes:
            self._bytes[key] = layer_bytes(self.model, self.training, self.plan, i)
        return self._bytes[key]


def chunk_ops(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, chunk: int, layers: range,
              memo: LayerMemo | None = None) -> list[Op]:
    """Every op of one model chunk on one device, for one micro-batch (``memo``: the plan's layer
    memo, made here when not given)."""
    kw = op_kwargs(plan, training)
    memo = memo or LayerMemo(model, training, plan)
    ops: list[Op] = []
    if chunk == 0:
        ops += embedding_ops(model, **kw)
    for i in layers:
        ops += memo.ops(i)
    if chunk == num_model_chunks(plan.schedule, plan.pp, plan.vpp) - 1:
        ops += head_ops(model, **kw)
    return ops


@dataclass(frozen=True)
class StageMemory:
    """Bytes held by one device of a pipeline stage at its peak."""

    stage: int
    weights: float
    grads: float
    optimizer: float
    activations: float
    buffers: float

    @property
    def total(self) -> float:
        """Sum of every part, bytes."""
        return self.weights + self.grads + self.optimizer + self.activations + self.buffers

    def parts(self) -> dict[str, float]:
        """Name -> bytes of every part."""
        return {"weights": self.weights, "grads": self.grads, "optimizer": self.optimizer,
                "activations": self.activations, "buffers": self.buffers}


def _params(ops: list[Op]) -> tuple[float, float]:
    """(dense params, routed-expert params) on one device."""
    expert = sum(op.params for op in ops if is_routed_expert(op))
    return float(sum(op.params for op in ops) - expert), float(expert)


def layer_bytes(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, layer: int) -> float:
    """Activations one micro-batch leaves on a device for ``layer`` (Korthikanti et al. 2022, with the
    plan's recompute and per-module recompute)."""
    return layer_activation_bytes(model, layer, **_layer_memory_kwargs(training, plan))


def _layer_memory_kwargs(training: TrainingSpec, plan: ParallelPlan) -> dict[str, Any]:
    """The plan's and training's arguments of ``layer_activation_bytes`` (shard, recompute, dtypes)."""
    shard = _Shard(micro_batch=plan.micro_batch, seq_len=training.seq_len, tp=plan.tp, cp=plan.cp, sp=plan.sp)
    return dict(recompute=plan.recompute, dtype_bytes=training.activation_bytes, ep=plan.ep, etp=plan.etp,
                flash_attention=training.flash_attention, gemm_input_bytes=training.gemm_input_bytes,
                recompute_modules=plan.recompute_modules, recompute_saved=plan.recompute_saved,
                act_input_fp8=plan.activation_fp8_input_store, **shard)


def kept_layer_bytes(per_layer: list[float], offloaded: int) -> float:
    """Bytes of ``per_layer`` left on the device when the first ``offloaded`` layers go to the host:
    the others, plus one offloaded layer's copy in flight (TE's CPU offload double-buffers one
    layer group: the one being copied out in forward, or prefetched back in backward). An upper
    bound by that one layer: Transformer Engine's windowed handler (``step.offload``) releases each
    offloaded group when its copy is issued, and its later rewrite states the peak as
    ``(num_layers - num_offloaded_layers) * T`` (``transformer_engine/pytorch/cpu_offload.py`` at
    00382b96b46cac38fdfc7f2cbca438145708a398, ``OffloadSynchronizer._default_offload_sync_init``)."""
    out = per_layer[offloaded:]
    return sum(out) + max(per_layer[:offloaded], default=0.0)


def _activation_bytes(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, chunk: int, layers: range,
                      memo: LayerMemo) -> float:
    """Activations one micro-batch leaves on a device of this chunk (Korthikanti et al. 2022)."""
    shard = _Shard(micro_batch=plan.micro_batch, seq_len=training.seq_len, tp=plan.tp, cp=plan.cp, sp=plan.sp)
    per_layer = [memo.activation_bytes(i) for i in layers]
    total = kept_layer_bytes(per_layer, min(plan.cpu_offloading_num_layers, len(per_layer)))
    if chunk == 0:
        total += embedding_activation_bytes(model, **shard)
    if chunk == num_model_chunks(plan.schedule, plan.pp, plan.vpp) - 1:
        te_ce = plan.cross_entropy_fusion_impl == "te"
        total += head_activation_bytes(model, dtype_bytes=training.activation_bytes, te_cross_entropy=te_ce, **shard)
        total += mtp_activation_bytes(model, te_cross_entropy=te_ce, **_layer_memory_kwargs(training, plan))
    return total


def _peak_activations(plan: ParallelPlan, m: int, stage: int, chunk_bytes: list[float]) -> float:
    """Largest sum of activations held at once under the schedule (F holds, B frees)."""
    return stage_in_flight_peak(plan.schedule, stage, plan.pp, m, plan.vpp, chunk_bytes, plan.paired_steady)


def _largest_layer(memo: LayerMemo, layers: range) -> float:
    """Parameters on one device of the largest layer among ``layers`` (FSDP gathers one at a time)."""
    kinds = {(memo.model.layer_kind(i), memo.model.is_moe_layer(i)): i for i in layers}
    return max((sum(o.params for o in memo.ops(i)) for i in kinds.values()), default=0.0)


@dataclass(frozen=True)
class ChunkPart:
    """One model chunk on a stage: its index, its layers and its ops (one micro-batch, one device)."""

    chunk: int
    layers: range
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class StagePart:
    """What one pipeline stage holds: its model chunks (in schedule order) and one device's memory."""

    stage: int
    chunks: tuple[ChunkPart, ...]
    memory: StageMemory


@dataclass(frozen=True)
class Partition:
    """Phase 1's value, handed to lowering: the stage split, each chunk's ops and the memory."""

    stages: tuple[StagePart, ...]

    @property
    def memory(self) -> tuple[StageMemory, ...]:
        """Memory of one device of every stage."""
        return tuple(s.memory for s in self.stages)


def stage_part(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, stage: int,
               memo: LayerMemo | None = None) -> StagePart:
    """The chunks, ops and memory of one device of ``stage`` (ops computed once, shared by both;
    ``memo``: the plan's layer memo, shared by its stages)."""
    memo = memo or LayerMemo(model, training, plan)
    chunks = tuple(ChunkPart(chunk=k, layers=layers, ops=tuple(chunk_ops(model, training, plan, k, layers, memo)))
                   for k, layers in stage_chunks(plan, model.num_layers)[stage])
    return StagePart(stage=stage, chunks=chunks, memory=_stage_memory(model, training, plan, stage, chunks, memo))


def stage_memory(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, stage: int) -> StageMemory:
    """Memory of one device of ``stage``."""
    return stage_part(model, training, plan, stage).memory


def _stage_memory(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, stage: int,
                  chunks: tuple[ChunkPart, ...], memo: LayerMemo) -> StageMemory:
    dense = expert = 0.0
    act: list[float] = []
    largest_layer = 0.0
    for part in chunks:
        chunk, layers = part.chunk, part.layers
        d, e = _params(list(part.ops))
        dense, expert = dense + d, expert + e
        act.append(_activation_bytes(model, training, plan, chunk, layers, memo))
        largest_layer = max(largest_layer, _largest_layer(memo, layers))
    params = dense + expert
    optimizer = plan.sharded_state(dense, expert, training.master_param_bytes + training.optimizer_state_bytes)
    weights = params * training.param_bytes / plan.param_shard + secondary_weight_bytes(plan, params, training)
    gathered = 2 * largest_layer * gather_buffer_bytes(plan, training) if plan.param_shard > 1 else 0.0
    return StageMemory(
        stage=stage,
        weights=weights + gathered,
        grads=params * plan.grad_dtype_bytes / plan.grad_shard,  # the DP grad buffer's dtype
        optimizer=optimizer,
        activations=_peak_activations(plan, num_microbatches(plan, training), stage, act),
        buffers=RESERVED_BYTES + _dispatch_buffers(model, training, plan, chunks),
    )


def _dispatch_buffers(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan,
                      chunks: tuple[ChunkPart, ...]) -> float:
    """One MoE layer's dispatch send and receive copies, if the stage has an MoE layer
    (``workloads.moe_dispatch_buffer_bytes``): live while that layer dispatches, once per stage."""
    if not any(model.is_moe_layer(i) for part in chunks for i in part.layers):
        return 0.0
    return moe_dispatch_buffer_bytes(model, micro_batch=plan.micro_batch, seq_len=training.seq_len, tp=plan.tp,
                                     cp=plan.cp, etp=plan.etp, dtype_bytes=training.activation_bytes,
                                     gemm_input_bytes=training.gemm_input_bytes)


def partition_plan(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan) -> Partition:
    """The partition of ``plan`` without the fit check (lowering alone, tests)."""
    memo = LayerMemo(model, training, plan)
    return Partition(stages=tuple(stage_part(model, training, plan, s, memo) for s in range(plan.pp)))


def partition(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, cluster: Cluster) -> Partition:
    """Phase 1: the stage split, each chunk's ops and the memory of every stage; raises
    ``OutOfMemoryError`` naming the largest part if a stage does not fit."""
    part = partition_plan(model, training, plan)
    _check_fits(part.memory, cluster)
    return part


def partition_memory(model: ModelSpec, training: TrainingSpec, plan: ParallelPlan, cluster: Cluster) -> tuple[StageMemory, ...]:
    """Memory of every stage; raises ``OutOfMemoryError`` naming the largest part if one does not fit."""
    return partition(model, training, plan, cluster).memory


def _check_fits(mems: tuple[StageMemory, ...], cluster: Cluster) -> None:
    cap = cluster.accelerator.hbm_capacity
    worst = max(mems, key=lambda m: m.total)
    if worst.total > cap:
        parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in worst.parts().items())
        big = max(worst.parts(), key=lambda k: worst.parts()[k])
        raise OutOfMemoryError(
            f"stage {worst.stage} needs {worst.total / GIB:.1f} GiB > {cap / GIB:.1f} GiB on "
            f"{cluster.accelerator.name} ({parts} GiB); largest part: {big}; "
            f"{_oom_hint(big)}"
        )


def _oom_hint(part: str) -> str:
    return {
        "activations": "try recompute=selective/full, recompute_modules, cpu_offloading_num_layers, a smaller "
                       "micro_batch, or more tp/cp/pp",
        "optimizer": "try zero=1 (distributed optimizer) or more dp/tp/pp",
        "grads": "try zero=2 or fsdp=full, or more tp/pp",
        "weights": "try more tp/pp or fsdp=full",
        "buffers": "the device is too small for this framework's reserved memory",
    }[part]
