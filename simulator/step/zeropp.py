"""ZeRO++: the collectives and quantisation kernels of one ZeRO-3 unit under DeepSpeed's three switches.

ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant Model
Training", arXiv:2306.10209; DeepSpeed's tutorial docs/_tutorials/zeropp.md @ 13c52bea: "qwZ
applies block-based quantization to reduce ZeRO parameter all-gather communication volume by half
from FP16 to INT8", "hpZ eliminates inter-node backward parameter all-gather communication", "qgZ
replaces gradients allreduce collective with a new communication efficient all-to-all based
quantized gradient averaging"; together "4x" less volume than ZeRO-3) changes what a ZeRO-3 unit
(a layer, or the root) moves:

- qwZ (``plan.zero_quantized_weights``): the parameter all-gathers carry int8 weights and one fp32
  scale per quantisation group of at most ``QWZ_GROUP`` elements (DeepSpeed
  deepspeed/runtime/zero/partition_parameters.py ``CUDAQuantizer.target_group_size = 8000``, read via
  find_string id 86264923); before the gather each rank quantises its shard, after it every rank
  dequantises the gathered unit (HBM-bound kernels on the gather's path);
- hpZ (``plan.zero_hpz_partition_size`` > 1): the backward gathers read the secondary copy, sharded
  over ``dp_hpz`` groups, in the weights' dtype (its memory: ``secondary_weight_bytes``);
- qgZ (``plan.zero_quantized_gradients``): the gradient reduce-scatter becomes DeepSpeed's
  ``all_to_all_quant_reduce`` (deepspeed/runtime/comm/coalesced_collectives.py, find_string id
  16248476902): quantise the gradient to int4, all-to-all inside the node (``dp_local``), reduce the
  node's chunks and re-quantise to int4, all-to-all across nodes (``dp_across``) of 1/local of it,
  dequantise and reduce. A shard group inside one node keeps the plain reduce-scatter (the function
  is used across nodes only); scales (one per row-group) are not counted.

Owns the unit's calls (``gather_calls``, ``scatter_calls``), the quantisation kernels' seconds
(``gather_kernels``, ``scatter_kernels``) and the memory the switches add (``secondary_weight_bytes``,
``gather_buffer_bytes``; ``step.partition`` sums them). With every switch off the calls are ZeRO-3's own (one
all-gather of the weights' dtype and one reduce-scatter of the gradients' over ``dp_shard``, per
``lower_dp.unit_tensors``) and the kernels 0, so a plan without ZeRO++ is priced as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.step.costs import Call
from clustersim.workloads import TrainingSpec

if TYPE_CHECKING:  # costing imports the step's compute and host models; the constants below need none
    from clustersim.simulator.step.costing import Costing

QWZ_GROUP: int = 8000
"""Elements per qwZ quantisation group at most (DeepSpeed ``CUDAQuantizer.target_group_size``)."""
QWZ_BYTES: float = 1.0 + 4.0 / QWZ_GROUP
"""Bytes per gathered element under qwZ: int8 plus its group's fp32 scale."""
QGZ_BYTES: float = 0.5
"""Bytes per gradient element on qgZ's wire: int4 (``all_to_all_quant_reduce``: ``swizzle_quant(.., 4, ..)``)."""
Which = Literal["fwd", "bwd"]


def gather_calls(c: Costing, tensors: list[float], which: Which) -> list[Call]:
    """The all-gathers of one unit's parameter ``tensors`` (elements each; ``lower_dp.unit_tensors``)
    before its forward (``fwd``) or its backward (``bwd``)."""
    plan = c.plan
    if which == "bwd" and plan.zero_hpz_partition_size > 1:
        return [Call("all_gather", t * c.training.param_bytes, "dp_hpz") for t in tensors]
    per = QWZ_BYTES if plan.zero_quantized_weights else c.training.param_bytes
    return [Call("all_gather", t * per, "dp_shard") for t in tensors]


def gather_kernels(c: Costing, tensors: list[float], which: Which) -> float:
    """Seconds of qwZ's quantise (this rank's shard: read the dtype, write int8) and dequantise (the
    gathered unit: read int8, write the dtype) around a quantised gather; 0 otherwise."""
    plan = c.plan
    if not plan.zero_quantized_weights or (which == "bwd" and plan.zero_hpz_partition_size > 1):
        return 0.0
    elements = sum(tensors)
    moved = (elements / plan.param_shard + elements) * (c.training.param_bytes + QWZ_BYTES)
    return moved / c.hbm_bandwidth


def _qgz_hops(c: Costing) -> int:
    """Ranks of a shard group per node under qgZ; 0 when qgZ does not run (off, or one node)."""
    if not c.plan.zero_quantized_gradients:
        return 0
    local = c.pricer.placement.node_local_shard()
    return 0 if local >= c.plan.shard_degree else local


def scatter_calls(c: Costing, tensors: list[float]) -> list[Call]:
    """The gradient reduction of one unit's ``tensors``: ZeRO-3's reduce-scatter per tensor, or qgZ's
    two all-to-alls of the unit's int4 gradient (nccl-tests size: what each rank sends in all)."""
    local = _qgz_hops(c)
    if not local:
        return [Call("reduce_scatter", t * c.plan.grad_dtype_bytes, "dp_shard") for t in tensors]
    elements = sum(tensors)
    return [Call("all_to_all", elements * QGZ_BYTES, "dp_local"), Call("all_to_all", elements / local * QGZ_BYTES,
                                                                        "dp_across")]


def scatter_kernels(c: Costing, tensors: list[float]) -> float:
    """Seconds of qgZ's three HBM-bound passes: quantise the gradient (read its dtype, write int4),
    the quantised reduction of the node's chunks (read them, write 1/local of it), dequantise and
    reduce the nodes' chunks (read int4, write the dtype, of 1/local); 0 without qgZ."""
    local = _qgz_hops(c)
    if not local:
        return 0.0
    elements, g = sum(tensors), c.plan.grad_dtype_bytes
    moved = elements * (g + QGZ_BYTES) + elements * QGZ_BYTES * (1 + 1 / local) + elements / local * (QGZ_BYTES + g)
    return moved / c.hbm_bandwidth


def secondary_weight_bytes(plan: ParallelPlan, params: float, training: TrainingSpec) -> float:
    """Bytes of ZeRO++ hpZ's secondary weight copy on one device: the weights in their dtype sharded
    over ``plan.zero_hpz_partition_size`` ranks; 0 without hpZ."""
    hpz = plan.zero_hpz_partition_size
    return params * training.param_bytes / hpz if hpz > 1 and plan.param_shard > 1 else 0.0


def gather_buffer_bytes(plan: ParallelPlan, training: TrainingSpec) -> float:
    """Bytes per element of a gathered ZeRO-3/FSDP unit: the weights' dtype, plus qwZ's int8 receive
    buffer (one fp32 scale per ``QWZ_GROUP`` elements) that the dequantise reads."""
    return training.param_bytes + (QWZ_BYTES if plan.zero_quantized_weights else 0.0)
