"""Host (CPU) launch cost: when issuing a pass's kernels takes longer than running them.

PyTorch issues kernels asynchronously: the CPU runs ahead of the GPU, queueing work, until
something reads a GPU value on the host. From such a sync to the next the GPU queue starts empty,
so that stretch takes max(GPU time, host time), host time = kernels issued x the profile's
``host_launch_time``; without syncs a pass takes max(sum GPU, sum host).

The sync that matters (issue 13): Megatron-Core's dropless token dispatchers need the tokens each
expert receives as host integers (all-to-all split sizes, the grouped GEMM's ``m_splits``), so every
MoE layer's forward drains the stream: ``MoEAlltoAllTokenDispatcher.preprocess`` sets
``cuda_sync_point`` to ``before_ep_alltoall`` (EP or TP > 1) or ``before_finish``, and
``_maybe_dtoh_and_synchronize`` synchronises the stream there; only drop-and-pad
(``moe_pad_expert_input_to_capacity``) fixes the counts on the host and returns before any sync
point is set (NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py, commit
0014f13713bfa38a8bab4ae11edd6917d35165ce, ``preprocess`` and ``dispatch_preprocess``). The backward
reuses the host counts saved by the forward, so it has no sync; a recomputed forward that re-runs
the dispatcher syncs again. The flex dispatcher's HybridEP backend does the same: its blocking
dispatch "learns the permuted row count by draining the compute stream
(``torch.cuda.current_stream().synchronize()`` after metadata preprocessing) on every MoE layer,
forward and activation-checkpoint recompute" (NVIDIA-NeMo/Automodel pull request 3931), so every
dispatcher kind (``plan.moe_dispatcher``) syncs unless its input is padded to capacity.

Owns the kernel count of an op (``kernel_launches``), whether a MoE layer syncs the host
(``layer_syncs_host``, ``sync_pieces``), the combining rule (``host_bound``) and the seconds the host adds to one
chunk's passes (``host_excess``). Does not own any op's GPU time (``step.compute``) nor the schedule
(``step.engine``). CUDA graphs (which replace a captured scope's launches by one) are not modelled:
no bundled row records them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from clustersim.simulator.step.compute import Pass
from clustersim.workloads import ModelSpec, Op


@dataclass(frozen=True, kw_only=True)
class HostExcess:
    """Seconds the host adds to one micro-batch of one chunk, by pass (0 where the GPU binds)."""

    fwd: float = 0.0
    bwd: float = 0.0
    recompute: float = 0.0


def kernel_launches(op: Op, which: Pass, local_experts: int, fused_grouped_mlp: bool) -> int:
    """Kernels the host issues for one pass of ``op``: one per op, except a routed expert's GEMM
    on the unfused path, which Transformer Engine's GroupedLinear issues as one cuBLAS GEMM per
    local expert (``step.compute.gemm_call_flops``); an all-to-all marker is one collective launch in
    the forward and one in the input-gradient pass; a pass with no work issues none."""
    if op.kind == "alltoall_marker":
        return 1 if which in ("fwd", "bwd_input") else 0
    flops, nbytes = {"fwd": (op.flops, op.bytes), "bwd": (op.bwd_flops, op.bwd_bytes),
                     "bwd_input": (op.bwd_flops, op.bwd_bytes),
                     "bwd_weight": (op.bwd_flops if op.kind == "gemm" else 0.0,
                                    op.bwd_bytes if op.kind == "gemm" else 0.0)}[which]
    if flops <= 0 and nbytes <= 0:
        return 0
    if op.role == "routed_expert" and op.kind == "gemm" and not fused_grouped_mlp:
        return max(1, local_experts) * (2 if which == "bwd" else 1)
    return 2 if which == "bwd" and op.kind == "gemm" else 1


def layer_syncs_host(model: ModelSpec, ops: Sequence[Op]) -> bool:
    """True when these ops of one layer run a MoE dispatcher that waits for the GPU's token counts:
    every dropless dispatcher, and a capacity without padding (Megatron-Core syncs
    ``before_permutation_1`` for ``num_out_tokens``); drop-and-pad does not."""
    dispatches = any(o.role == "dispatch" or o.role == "router" for o in ops)
    return dispatches and not (model.capacity_factor is not None and model.pad_to_capacity)


def sync_pieces(model: ModelSpec, ops: Sequence[Op]) -> list[tuple[Sequence[Op], bool]]:
    """One layer's forward ops as (ops, ends at a sync) pieces: a syncing MoE layer splits where
    its dispatch starts (attention, norm and router before the sync; dispatch, experts and combine
    after it), any other layer is one piece without a sync."""
    if not layer_syncs_host(model, ops):
        return [(ops, False)]
    k = next((i for i, o in enumerate(ops) if o.role in ("dispatch", "routed_expert")), len(ops))
    return [(ops[:k], True), (ops[k:], False)]


def host_bound(gpu: Sequence[float], host: Sequence[float], syncs: Sequence[bool]) -> float:
    """Seconds of a pass of consecutive pieces (``sync_pieces``): each stretch that ends at a sync
    (and the tail after the last) takes max(GPU seconds, host seconds) of its pieces."""
    total, g, h = 0.0, 0.0, 0.0
    for gi, hi, si in zip(gpu, host, syncs):
        g, h = g + gi, h + hi
        if si:
            total, g, h = total + max(g, h), 0.0, 0.0
    return total + max(g, h)


def host_excess(model: ModelSpec, per_layer: Sequence[Sequence[Op]], recomputed: Sequence[Sequence[Op]],
                gpu_time: Callable[[Sequence[Op], Pass], float], launch: float, local_experts: int,
                fused_grouped_mlp: bool) -> HostExcess:
    """What the host adds to one chunk's forward, backward and recomputed forward over their GPU
    time, at ``launch`` seconds per kernel: the forward split at each syncing MoE layer, the
    backward (input and weight gradients) one stretch, the recompute split like the forward."""
    if launch <= 0:
        return HostExcess()

    def host(ops: Sequence[Op], which: Pass) -> float:
        return launch * sum(kernel_launches(o, which, local_experts, fused_grouped_mlp) for o in ops)

    def forward(layers: Sequence[Sequence[Op]]) -> float:
        pieces = [piece for ops in layers for piece in sync_pieces(model, ops)]
        gpu = [gpu_time(ops, "fwd") for ops, _ in pieces]
        return host_bound(gpu, [host(ops, "fwd") for ops, _ in pieces], [s for _, s in pieces]) - sum(gpu)

    bwd_gpu = sum(gpu_time(ops, "bwd_input") + gpu_time(ops, "bwd_weight") for ops in per_layer)
    bwd_host = sum(host(ops, "bwd_input") + host(ops, "bwd_weight") for ops in per_layer)
    return HostExcess(fwd=forward(per_layer), bwd=max(0.0, bwd_host - bwd_gpu),
                      recompute=forward([ops for ops in recomputed if ops]))
