"""CUDA graphs: what Megatron-Core's captured scopes leave the host to launch.

Megatron-Core replays captured parts of each layer as CUDA graphs (``--cuda-graph-impl
transformer_engine`` with ``--cuda-graph-scope``, or ``local`` for ``full_iteration``;
``plan.cuda_graph_scope``). The scopes, as megatron/training/arguments.py describes them (NVIDIA/
Megatron-LM, read via find_string id 253976787; ``transformer/enums.py`` ``CudaGraphScope``, id
6403441796):

- ``attn``: ``TransformerLayer._forward_attention()`` (input norm, attention, residual);
- ``mlp``: ``_forward_mlp()`` of a dense layer; ``moe``: of a MoE layer (drop-and-pad MoE only);
- ``moe_router``: ``_forward_mlp()`` up to ``MoELayer.router()``, shared experts included;
- ``moe_preprocess`` (with ``moe_router``): ``MoELayer.preprocess()``: the dispatcher's count
  kernels join the router's graph; the copies of the counts to the host stay outside it (the sync);
- ``mamba``: the Mamba layer; ``layer``: the whole layer (the scope an impl takes when no
  ``--cuda-graph-scope`` is given); ``full_iteration``: the whole step, one graph per iteration.

A captured part of a layer costs the host one launch per pass (Transformer Engine's
``make_graphed_callables`` captures the forward and the backward, weight gradients included, as
one graph each), everything else its ``host.kernel_launches``. Owns the per-op launch counts of a
layer under a plan's scopes (``layer_launches``). The memory the graphs' static buffers hold is not
modelled.
"""

from __future__ import annotations

from typing import Sequence

from clustersim.simulator.step.compute import Pass
from clustersim.simulator.step.host import kernel_launches
from clustersim.workloads import Op

BLOCK_SCOPES: dict[str, tuple[str, ...]] = {"attn": ("attn", "layer"), "mlp": ("mlp", "layer"),
                                            "moe": ("moe", "layer"), "mamba": ("mamba", "layer")}
"""Block kind -> the scopes that capture the whole block."""

PREPROCESS_KERNELS: dict[str, int] = {"permute": 8, "permute_no_ep": 2}
"""Of the permute op's forward launches (``host.MOE_PATH_LAUNCHES``), those of
``MoEAlltoAllTokenDispatcher.preprocess`` before its copies to the host: the eight count kernels
with EP (13 = 8 + 4 copies + the fused permute), ``routing_map.sum`` and ``.long()`` without (4)."""


def _block_kind(block: Sequence[Op]) -> str:
    roles = {o.role for o in block}
    for role, kind in (("ssm_scan", "mamba"), ("router", "moe"), ("attention_core", "attn"), ("dense_mlp", "mlp")):
        if role in roles:
            return kind
    return ""


def blocks(ops: Sequence[Op]) -> list[range]:
    """Index ranges of a layer's blocks: each starts at an input norm (attention, MLP or MoE, Mamba)."""
    starts = sorted({0} | {i for i, o in enumerate(ops) if o.role == "input_norm"})
    return [range(a, b) for a, b in zip(starts, starts[1:] + [len(ops)])]


def _captured(ops: Sequence[Op], block: range, scopes: Sequence[str]) -> list[int]:
    """Indices of ``block`` replayed as one graph: the whole block, or a MoE block's router part."""
    part = [ops[i] for i in block]
    kind = _block_kind(part)
    if any(s in scopes for s in BLOCK_SCOPES.get(kind, ())):
        return list(block)
    if kind == "moe" and "moe_router" in scopes:
        router = next(i for i in block if ops[i].role == "router")
        return [i for i in block if i <= router or ops[i].role == "shared_expert"]
    return []


def layer_launches(ops: Sequence[Op], which: Pass, scopes: Sequence[str], local_experts: int,
                   fused_grouped_mlp: bool, ep: int = 1) -> list[int]:
    """Kernels the host issues for each op of one layer's pass under ``scopes``: a captured part
    one launch (on its first op) in the forward and input-gradient passes, none in the weight-gradient
    pass (inside the backward graph); with ``moe_preprocess`` the permute's count kernels join the
    router's graph; ``full_iteration`` none at all."""
    counts = [kernel_launches(o, which, local_experts, fused_grouped_mlp, ep) for o in ops]
    if not scopes:
        return counts
    if "full_iteration" in scopes:
        return [0] * len(ops)
    for block in blocks(ops):
        captured = _captured(ops, block, scopes)
        if not captured:
            continue
        if "moe_preprocess" in scopes and which == "fwd":
            for i in block:
                if ops[i].role == "permute":
                    key = "permute" if ep > 1 else "permute_no_ep"
                    counts[i] = max(counts[i] - PREPROCESS_KERNELS[key], 0)
        launched = sum(counts[i] for i in captured)
        for i in captured:
            counts[i] = 0
        if launched and which != "bwd_weight":
            counts[captured[0]] = 1
    return counts

