"""Tensor-parallel communication overlapped chunk by chunk with the GEMMs it feeds (``plan.tp_overlap``).

Transformer Engine's userbuffers overlap (Megatron-Core ``tp_comm_overlap``, sequence parallel only)
splits each TP collective of a transformer layer into the tp chunks of its GEMM and runs them side by
side, so what stays exposed comes from the two times, not from a fixed fraction. The methods are
those of the configurations NVIDIA ships per model and GPU (NVIDIA/NeMo
``nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py`` @ 26005325d0cf22928521593fd68e9f8c7be24ec0,
``TransformerLayerTPOverlapCfg``):

- ``ring_exchange`` for the all-gather into the column-parallel GEMM of a block (``qkv_fprop``,
  ``fc1_fprop``) and for the all-gather of the output gradient into the row-parallel GEMM's input
  gradient (``proj_dgrad``, ``fc2_dgrad``), and, in the FP8 and most B200 configurations, for the
  reduce-scatter out of the row-parallel GEMM (``proj_fprop``, ``fc2_fprop``);
- ``bulk`` for the column-parallel GEMM's backward: the all-gather of its sequence-parallel input
  (the weight gradient needs it whole) runs beside the input-gradient GEMM (``qkv_dgrad``,
  ``fc1_dgrad``), the reduce-scatter of that input gradient beside the weight-gradient GEMM
  (``qkv_wgrad``, ``fc1_wgrad``).

In a ring exchange over n ranks the GEMM of the local chunk starts at once and each later chunk when
it has arrived (all-gather), or each chunk's partial result leaves while the next chunk is computed
and the last is the local one (reduce-scatter): the pair takes max(GEMM, collective + GEMM / n), so
``ring_exposed`` = max(0, collective - GEMM (n - 1) / n). A bulk overlap runs the whole collective
beside the whole GEMM: ``bulk_exposed`` = max(0, collective - GEMM). While a collective runs beside
a GEMM the GEMM slows by the profile's ``overlap_slowdown`` of that collective kind (the cited 18.9 %,
``profile.OVERLAP_SLOWDOWN_MEASURED``: communication kernels take SMs and HBM bandwidth), as the
FSDP prefetches do. Not modelled: the BF16 H100 configurations' ``pipeline`` reduce-scatter out of
the row-parallel GEMM (4 splits, which exposes at least a quarter of it), and a layer whose MLP is
routed experts (its TP traffic goes through the token dispatcher, not userbuffers: exposed in full).
Measured as the published rows' default it predicted worse out of sample than a fixed half hidden
(``calibration.validate_plan.TP_COMM_OVERLAP``), which the rows keep; a plan sets it explicitly.

Owns the exposure rules and the GEMMs of a layer's TP blocks (``tp_blocks``); the collectives' times
are the pricer's, the GEMMs' the lowering's (``step.lower``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from clustersim.simulator.step.compute import Pass
from clustersim.simulator.step.lower_dp import overlapped_duration
from clustersim.workloads import Op

OpTime = Callable[[Op, Pass], float]
"""Seconds of one op in one pass on this plan's device."""


def ring_exposed(collective: float, gemm: float, n: int) -> float:
    """Exposed seconds of a ring-exchange all-gather or reduce-scatter over ``n`` ranks beside the
    GEMM it feeds or drains: max(0, collective - gemm (n - 1) / n)."""
    if n <= 1:
        return 0.0
    return max(0.0, collective - gemm * (n - 1) / n)


def bulk_exposed(collective: float, gemm: float) -> float:
    """Exposed seconds of a collective run in bulk beside an independent GEMM: max(0, collective - gemm)."""
    return max(0.0, collective - gemm)


@dataclass(frozen=True)
class TPBlock:
    """One tensor-parallel block of a layer: the column-parallel GEMM its all-gather feeds and the
    row-parallel GEMM whose output it reduce-scatters; ``None`` where the block has no such pair
    (routed experts, whose tokens reach them through the dispatcher)."""

    entry: Op | None
    exit: Op | None


def tp_blocks(ops: Sequence[Op], blocks: int) -> list[TPBlock]:
    """The layer's ``blocks`` TP blocks (2 for attention and MLP, 1 for a hybrid layer), each
    starting at its input norm (role ``input_norm``): its first and last GEMM that are not the
    router; a block holding routed experts has no pair."""
    starts = [i for i, o in enumerate(ops) if o.role == "input_norm"][:blocks]
    if len(starts) < blocks:
        starts = [0] * blocks if not starts else starts + [starts[-1]] * (blocks - len(starts))
    out = []
    for b, s in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) and starts[b + 1] > s else len(ops)
        block = ops[s:end]
        if any(o.role == "routed_expert" for o in block):
            out.append(TPBlock(None, None))
            continue
        gemms = [o for o in block if o.kind == "gemm" and o.role != "router"]
        out.append(TPBlock(gemms[0], gemms[-1]) if gemms else TPBlock(None, None))
    return out


def block_exposed(block: TPBlock, gather: float, scatter: float, tp: int, time: OpTime,
                  slowdown: Mapping[str, float] | None = None) -> tuple[float, float]:
    """(forward, backward) seconds one block's TP traffic adds to one micro-batch.

    ``gather`` and ``scatter``: one all-gather and one reduce-scatter of the block's activations.
    Forward: the gather into the entry GEMM and the scatter out of the exit GEMM, ring exchanges.
    Backward: the output gradient's gather into the exit GEMM's input gradient (ring exchange);
    the entry GEMM's input gathered again beside its input gradient and that gradient's scatter
    beside its weight gradient (bulk). Each GEMM runs slower while its collective runs beside it,
    by the profile's ``overlap_slowdown`` of that kind (``step.lower_dp.overlapped_duration``, the
    same rule as the FSDP prefetches): what it loses counts with what stays exposed. Without a
    pair, everything in full (one gather and one scatter each way)."""
    if block.entry is None or block.exit is None:
        return gather + scatter, gather + scatter
    slow = slowdown or {}

    def ring(comm: float, kind: str, op: Op, which: Pass) -> float:
        g = time(op, which)
        g_slow = overlapped_duration(g, comm, slow.get(kind, 0.0))
        return ring_exposed(comm, g_slow, tp) + g_slow - g

    def bulk(comm: float, kind: str, op: Op, which: Pass) -> float:
        g = time(op, which)
        g_slow = overlapped_duration(g, comm, slow.get(kind, 0.0))
        return bulk_exposed(comm, g_slow) + g_slow - g

    fwd = ring(gather, "all_gather", block.entry, "fwd") + ring(scatter, "reduce_scatter", block.exit, "fwd")
    bwd = (ring(gather, "all_gather", block.exit, "bwd_input") + bulk(gather, "all_gather", block.entry, "bwd_input")
           + bulk(scatter, "reduce_scatter", block.entry, "bwd_weight"))
    return fwd, bwd


def hidden_bound(tp_comm_overlap: float, tp_overlap: bool) -> float:
    """The largest fraction of a plan's TP seconds its overlap can hide, for the search tiers' bounds
    and estimates (``search.bound``, ``search.grid``, ``search.estimate``): the override where set,
    all of it under ``tp_overlap`` (a lower bound: ``ring_exposed`` and ``bulk_exposed`` reach 0 when
    the GEMMs are long enough), else 0."""
    if tp_comm_overlap > 0.0 or not tp_overlap:
        return tp_comm_overlap
    return 1.0
