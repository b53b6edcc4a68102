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
(``layer_syncs_host``, ``sync_pieces``), the combining rule (``host_bound``), the seconds the host adds to one
chunk's passes (``host_excess``) and to one list-API collective of a synchronised ZeRO-3 gather
(``list_api_time``). Does not own any op's GPU time (``step.compute``) nor the schedule
(``step.engine``); what CUDA graphs leave to launch is ``step.graphs``' (``host_excess`` takes the
per-op counts from it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Sequence

from clustersim.simulator.profile import HOST_LAUNCH_RANGE, CalibrationProfile
from clustersim.simulator.step.compute import Pass
from clustersim.workloads import ModelSpec, Op


LIST_API_HOST_OP: float = math.sqrt(HOST_LAUNCH_RANGE[0] * HOST_LAUNCH_RANGE[1])
"""CPU seconds of one eager op of a list-API collective's per-rank loops when the profile has no
measured ``host_launch_time``: the geometric middle of the cited 5-25 us per eager op
(``profile.HOST_LAUNCH_RANGE``), 11.2 us, as the other priors taken from a cited range."""


@dataclass(frozen=True, kw_only=True)
class HostExcess:
    """Seconds the host adds to one micro-batch of one chunk, by pass (0 where the GPU binds)."""

    fwd: float = 0.0
    bwd: float = 0.0
    recompute: float = 0.0


@dataclass(frozen=True)
class PassLaunches:
    """Kernels one op issues in its forward, input-gradient and weight-gradient passes."""

    fwd: int
    bwd_input: int
    bwd_weight: int


MOE_PATH_LAUNCHES: dict[str, PassLaunches] = {
    # Router (TopKRouter with moe_router_fusion, aux-loss load balancing, no z-loss):
    # fwd: the gating GEMM (moe_utils.RouterGatingLinearFunction), fused top-k
    # (fused_topk_with_score_function), the aux loss's scores (fused_compute_score_for_moe_aux_loss),
    # its token counts (router.aux_loss_load_balancing: loss_routing_map.sum(dim=0)) and the fused
    # loss (fused_moe_aux_loss) = 5; input gradient: GEMM dgrad, the backward of the fused top-k,
    # score and loss kernels, and MoEAuxLossAutoScaler.backward's ones_like x scale (2) = 6; weight
    # gradient: the GEMM's wgrad = 1.
    "router": PassLaunches(fwd=5, bwd_input=6, bwd_weight=1),
    # Permute, with the dispatcher's preprocess (MoEAlltoAllTokenDispatcher.preprocess, EP > 1):
    # routing_map.sum, .long(), the input splits' reshape-sum, the all-gather of the counts over
    # TPxEP, the local-expert slice .contiguous(), the three sums of output_splits,
    # output_splits_tp and tokens per local expert = 8; _maybe_dtoh_and_synchronize copies
    # tokens_per_expert, input_splits, output_splits, output_splits_tp to the host = 4; the fused
    # permute with probs (moe_utils.permute, fused) = 1: 13. Backward: the fused permute's = 1.
    "permute": PassLaunches(fwd=13, bwd_input=1, bwd_weight=0),
    # Without EP (and TP) the preprocess is routing_map.sum and .long(), one copy to the host.
    "permute_no_ep": PassLaunches(fwd=4, bwd_input=1, bwd_weight=0),
    # Dispatch (dispatch_all_to_all): two all-to-alls, tokens and probs; the fused sort of the
    # received chunks by local expert (dispatch_postprocess: sort_chunks_by_idxs with probs)
    # counted with the local experts below. The backward mirrors it.
    "dispatch": PassLaunches(fwd=2, bwd_input=2, bwd_weight=0),
    # Combine: one all-to-all (combine_all_to_all), the unsort by local expert counted below.
    "combine": PassLaunches(fwd=1, bwd_input=1, bwd_weight=0),
    # Unpermute: the fused unpermute with the merging probs (moe_utils.unpermute, fused).
    "unpermute": PassLaunches(fwd=1, bwd_input=1, bwd_weight=0),
}
"""Kernel launches of the MoE path's ops, read from NVIDIA/Megatron-LM
megatron/core/transformer/moe/ (router.py @ 005742ff1f002035922b88a648fa615aec22eeff
``TopKRouter.routing`` / ``aux_loss_load_balancing``; moe_utils.py @
00611e6eeb0b09b5ee074750956855215ddbd67f ``topk_routing_with_score_function``,
``compute_routing_scores_for_aux_loss``, ``switch_load_balancing_loss_func``,
``MoEAuxLossAutoScaler``, ``permute`` / ``unpermute`` / ``sort_chunks_by_idxs`` with ``fused``;
token_dispatcher.py @ 0014f13713bfa38a8bab4ae11edd6917d35165ce ``MoEAlltoAllTokenDispatcher``
``preprocess``, ``dispatch_all_to_all``, ``dispatch_postprocess``, ``combine_preprocess``,
``combine_all_to_all``, ``_maybe_dtoh_and_synchronize``), for the configuration Megatron-Bridge's
MoE recipes set: ``moe_permute_fusion`` and ``moe_grouped_gemm`` True (NVIDIA-NeMo/Megatron-Bridge
src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py @ 04eb4f8d6045526331113ba3f0d39b7a4d22bb85),
``moe_router_fusion`` True in its performance configs. One launch per fused Transformer Engine
call; a D2H copy counts as one. Not counted: the force-balancing benchmark's random logits,
z-loss, fp8 quantisation kernels, CUDA graphs."""


def kernel_launches(op: Op, which: Pass, local_experts: int, fused_grouped_mlp: bool, ep: int = 1) -> int:
    """Kernels the host issues for one pass of ``op``: the MoE path's ops as ``MOE_PATH_LAUNCHES``
    (an all-to-all only where ``ep`` > 1; the dispatcher's sort and unsort of the received tokens by
    local expert one fused kernel where a rank holds several experts); a routed expert's GEMM on the
    unfused path one cuBLAS GEMM per local expert (Transformer Engine's GroupedLinear,
    ``general_grouped_gemm`` over ``m_splits``: transformer_engine/pytorch/module/grouped_linear.py
    @ 0069563f606859d4fb5d663e1c92509a30e99f35 ``_GroupedLinear.forward`` / ``backward``: fprop,
    dgrad and wgrad each one GEMM per expert); any other op one per pass (a GEMM's backward two);
    a pass with no work none."""
    if which == "bwd":
        return kernel_launches(op, "bwd_input", local_experts, fused_grouped_mlp, ep) + \
            kernel_launches(op, "bwd_weight", local_experts, fused_grouped_mlp, ep)
    if op.role == "expert_sort":
        return 0  # its fused sort kernel is counted with the all-to-all marker (``_moe_path_launches``)
    if op.kind == "alltoall_marker" or op.role in MOE_PATH_LAUNCHES:
        return _moe_path_launches(op, which, local_experts, ep)
    flops, nbytes = {"fwd": (op.flops, op.bytes), "bwd_input": (op.bwd_flops, op.bwd_bytes),
                     "bwd_weight": (op.bwd_flops if op.kind == "gemm" else 0.0,
                                    op.bwd_bytes if op.kind == "gemm" else 0.0)}[which]
    if flops <= 0 and nbytes <= 0:
        return 0
    if op.role == "routed_expert" and op.kind == "gemm" and not fused_grouped_mlp:
        return max(1, local_experts)
    return 1


def _moe_path_launches(op: Op, which: Pass, local_experts: int, ep: int) -> int:
    counts = MOE_PATH_LAUNCHES.get("permute_no_ep" if op.role == "permute" and ep <= 1 else op.role)
    if counts is None:
        return 0
    n: int = getattr(counts, which)
    if op.kind != "alltoall_marker" or which == "bwd_weight":
        return n
    return (n if ep > 1 else 0) + (1 if local_experts > 1 else 0)


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


Launches = Callable[[Sequence[Op], Pass], Sequence[int]]
"""Kernels the host issues for each op of one layer's pass (``graphs.layer_launches``: the plan's
CUDA graphs applied; ``kernel_launches`` per op without)."""


def host_excess(model: ModelSpec, per_layer: Sequence[Sequence[Op]], recomputed: Sequence[Sequence[Op]],
                gpu_time: Callable[[Sequence[Op], Pass], float], launch: float, launches: Launches) -> HostExcess:
    """What the host adds to one chunk's forward, backward and recomputed forward over their GPU
    time, at ``launch`` seconds per kernel and ``launches`` kernels per op: the forward split at each
    syncing MoE layer, the backward (input and weight gradients) one stretch, the recompute split
    like the forward."""
    if launch <= 0:
        return HostExcess()

    def forward(layers: Sequence[Sequence[Op]]) -> float:
        gpu: list[float] = []
        host: list[float] = []
        syncs: list[bool] = []
        for ops in layers:
            counts, start = launches(ops, "fwd"), 0
            for piece, sync in sync_pieces(model, ops):
                gpu.append(gpu_time(piece, "fwd"))
                host.append(launch * sum(counts[start:start + len(piece)]))
                syncs.append(sync)
                start += len(piece)
        return host_bound(gpu, host, syncs) - sum(gpu)

    bwd_gpu = sum(gpu_time(ops, "bwd_input") + gpu_time(ops, "bwd_weight") for ops in per_layer)
    bwd_host = launch * sum(sum(launches(ops, "bwd_input")) + sum(launches(ops, "bwd_weight")) for ops in per_layer)
    return HostExcess(fwd=forward(per_layer), bwd=max(0.0, bwd_host - bwd_gpu),
                      recompute=forward([ops for ops in recomputed if ops]))


def list_api_time(kind: Literal["all_gather", "reduce_scatter"], ranks: int, collective: float, copies: float,
                  profile: CalibrationProfile) -> float:
    """Seconds of one parameter all-gather (gradient reduce-scatter) of DeepSpeed ZeRO-3 of 2021
    through PyTorch's list API, ``collective`` the NCCL call and ``copies`` the GPU side of its
    per-rank copies (``step.lower_dp.tensor_copies_time``), with the two host loops over the ``ranks``:

    - the caller's: ``Init._allgather_param`` builds ``partitions`` with one ``flat_tensor.narrow``
      per rank, ``_reduce_scatter_gradient`` its ``input_list`` with one ``param.grad.view(-1).narrow``
      per rank (deepspeed/runtime/zero/partition_parameters.py, 2021, find_string id 2323018133),
      after ``torch.cuda.synchronize()`` for the gather: nothing queued, so the host binds;
    - ProcessGroupNCCL's: ``allgather`` copies the flat output into each rank's view after the NCCL
      launch (its ``post`` loop, one ``copy_`` per rank: it runs while the NCCL kernel does);
      ``reduce_scatter`` copies each view into the flat input before it (``flatten_for_scatter_gather``).

    Each loop costs ``ranks`` eager ops of the profile's ``host_launch_time`` (``LIST_API_HOST_OP``
    when 0: the profile's 0 says the host runs ahead, which a synchronised loop cannot). So:
    all-gather = loop + max(collective + copies, loop); reduce-scatter = loop + max(loop, copies)
    + collective. Linear in ``ranks`` at a fixed size: at hundreds of ranks the loops, not the
    bytes, set the time of a tensor's collective."""
    loop = ranks * (profile.host_launch_time or LIST_API_HOST_OP)
    if kind == "all_gather":
        return loop + max(collective + copies, loop)
    return loop + max(loop, copies) + collective


def eager_excess(per_layer: Sequence[Sequence[Op]], eager: Mapping[str, float], kernel_overhead: float,
                 gpu_time: Callable[[Sequence[Op], Pass], float] | None = None) -> HostExcess:
    """Host seconds eager PyTorch adds to one micro-batch of a chunk.

    On a CPU rank (``gpu_time`` None), where the host thread runs the kernels too, they add: per
    layer, the profile's measured eager overhead of the pass (``CalibrationProfile.eager_layer_overhead``)
    less the per-op ``kernel_overhead`` the layer's priced ops already carry (one per op and pass with
    work, ``kernel_launches``), at least 0. On a GPU (``gpu_time``: a pass's device seconds;
    ``CalibrationProfile.kernels_async``) the host launches ahead of the device and the two overlap:
    a layer's pass takes max(host, device), so what the host adds is its eager overhead less the
    layer's device time, at least 0 (``host_bound`` with one stretch per layer and pass). ``recompute``
    is 0 (the backend does not recompute).

    Issue 21: the backend's single-rank step (2 threads, near-quiet) spent 1.4 ms in autograd
    nodes and 3.3 ms between ops against 0.6 ms of priced per-op overhead. On one H200 the same
    GPT's layers spend 0.4 / 1.0 ms of host time per forward / backward against ~6 ms of kernels."""
    if not eager:
        return HostExcess()
    if gpu_time is not None:
        return HostExcess(
            fwd=sum(max(eager.get("fwd", 0.0) - gpu_time(ops, "fwd"), 0.0) for ops in per_layer),
            bwd=sum(max(eager.get("bwd", 0.0) - gpu_time(ops, "bwd_input") - gpu_time(ops, "bwd_weight"), 0.0)
                    for ops in per_layer))
    fwd = bwd = 0.0
    for ops in per_layer:
        n_fwd = sum(kernel_launches(o, "fwd", o.calls, False) for o in ops)  # o.calls: an unfused grouped
        n_bwd = sum(kernel_launches(o, "bwd", o.calls, False) for o in ops)  # GEMM's per-expert kernels
        fwd += max(eager.get("fwd", 0.0) - n_fwd * kernel_overhead, 0.0)
        bwd += max(eager.get("bwd", 0.0) - n_bwd * kernel_overhead, 0.0)
    return HostExcess(fwd=fwd, bwd=bwd)
