"""The `Op` record and the small constructors that price one GEMM or one memory-bound op.

Owns the per-op cost conventions shared by every block of a layer:
- GEMM forward FLOPs = 2*m*n*k; backward = 2x forward (data gradient + weight gradient).
- GEMM HBM bytes = (m*k + k*n + m*n) * dtype_bytes (inputs, weights, output once each);
  backward moves about twice that (dgrad and wgrad each read two operands and write one).
- Memory-bound ops (norms, activations, residual adds) move elements*(reads+writes)*dtype_bytes
  and carry an approximate FLOP count that model FLOPs (workloads/flops.py) never include;
  their backward is taken as 2x forward bytes and FLOPs.
Also owns `LocalShape`, the sharding degrees and the token counts they imply. Does not know
which ops a transformer layer has (workloads/blocks.py) nor how long an op takes (simulator/).
"""

import math
from dataclasses import dataclass
from typing import Literal

from clustersim.workloads.errors import WorkloadError

OpKind = Literal["gemm", "bmm", "attention", "elementwise", "norm", "embedding", "loss", "router",
                 "alltoall_marker"]
"""'gemm': a linear layer (weights; its backward splits into input and weight gradients);
'bmm': a batched GEMM of two activations (unfused attention scores and context: GEMM speed, no
weight gradient); 'attention': a fused attention kernel (FlashAttention); the rest are memory-bound."""

OpRole = Literal["", "attention_core", "ssm_scan", "router", "permute", "dispatch", "routed_expert",
                 "combine", "unpermute", "shared_expert", "input_norm", "mla_up_proj", "dense_mlp",
                 "expert_sort", "qkv_proj", "latent_proj"]
"""What an op is for in its layer, for the simulator to select ops by (never by name):
'attention_core' the attention kernel (fused, or the score/context GEMMs of the unfused path);
'ssm_scan' the Mamba-2 SSD scan; the MoE path in order: 'router' (gate GEMM and top-k),
'permute' (token copies into expert order), 'dispatch' (the EP all-to-all out), 'routed_expert'
(the grouped expert GEMMs and their activation), 'combine' (the all-to-all back), 'unpermute'
(the weighted sum of the top-k outputs), 'shared_expert' (the shared experts' MLP), 'expert_sort'
(the all-to-all dispatcher's sort of the received tokens by local expert and the unsort before the
combine, ``blocks.expert_sort_ops``); 'latent_proj' a LatentMoE's down-projection after the router and
up-projection after the combine (``ModelSpec.moe_latent_size``);
'input_norm' a layer's pre-attention or pre-MLP norm; 'mla_up_proj' MLA's query and key/value
up-projections; 'dense_mlp' a dense MLP's GEMMs and activation; 'qkv_proj' the fused QKV
projection of MHA/GQA/MQA; '' none. Megatron-Core's ``recompute_modules`` and the outputs a full
recompute keeps (``ParallelPlan.recompute_saved``) select by these roles (``simulator.step.lower``)."""


@dataclass(frozen=True, kw_only=True)
class Op:
    """One kernel (or fused group) of a layer on one device for one micro-batch."""

    name: str
    """Stable name within the layer, e.g. 'qkv', 'attn_core', 'expert_fc1'."""
    kind: OpKind
    """What roofline applies; 'alltoall_marker' is not compute (its bytes are the all-to-all
    payload each device sends, for the engine to price on the network, never on HBM)."""
    flops: float
    """Forward FLOP on one device (attention: full s^2 convention, see causal_flops_fraction)."""
    bytes: float
    """Forward HBM bytes read + written on one device."""
    bwd_flops: float
    """Backward FLOP on one device."""
    bwd_bytes: float
    """Backward HBM bytes on one device."""
    params: int
    """Parameters this op holds on one device."""
    gemm_shape: tuple[int, int, int] | None = None
    """(m, n, k) of the largest device-local GEMM of the op (per expert / per head), or None."""
    fp8: bool = False
    """Runs at the FP8 peak when the training precision is fp8 (linear-layer GEMMs)."""
    recompute_selective: bool = False
    """Recomputed under selective recompute (attention core; Korthikanti et al. 2022, sec. 4)."""
    kernel: str = ""
    """Which attention kernel a fused attention op is ('flash3', 'flash2'); '' for other ops."""
    causal_flops_fraction: float = 1.0
    """Fraction of `flops` a causal-masked kernel really executes (0.5 for causal attention,
    FlashAttention skips the masked half); `flops` itself keeps the full-s^2 model convention."""
    role: OpRole = ""
    """The op's role in its layer (``OpRole``); kept when a module prefixes its name (MTP)."""
    quantize_elements: tuple[float, float] = (0.0, 0.0)
    """(forward, backward) elements a GEMM's separate FP8 quantize kernels convert before its math
    in an FP8 run: its input in the forward, its output gradient in the backward (priced by
    ``simulator.step.compute.fp8_cast_time``); (0, 0) where the cast is fused into the producer
    (a norm, a fused grouped MLP) or not modelled."""
    calls: int = 1
    """Kernels one pass of the op launches, each paying the profile's per-kernel ``kernel_overhead``
    (``simulator.step.compute.op_time``): 1, except a routed expert's grouped GEMM on the unfused
    path, one cuBLAS GEMM per local expert (``gemm_op`` with ``count``)."""


@dataclass(frozen=True, kw_only=True)
class LocalShape:
    """Micro-batch size and sharding degrees that fix every device-local tensor shape."""

    micro_batch: int
    """Sequences per micro-batch."""
    seq_len: int
    """Tokens per sequence (before context-parallel sharding)."""
    tp: int = 1
    """Tensor-parallel degree (heads, FFN columns, vocabulary)."""
    cp: int = 1
    """Context-parallel degree (sequence)."""
    ep: int = 1
    """Expert-parallel degree (routed experts)."""
    etp: int = 1
    """Expert tensor-parallel degree (columns of each expert)."""
    sp: bool = True
    """Sequence parallelism: norms/residuals/router run on 1/tp of the tokens."""
    dtype_bytes: int = 2
    """Bytes per activation and weight element."""
    attention_kernel: str = "flash3"
    """'flash3' | 'flash2' (fused kernels) | 'unfused' (score GEMMs, softmax and dropout in HBM)."""
    sort_by_local_expert: bool = False
    """The dispatcher sorts the tokens it receives by local expert and unsorts them before the
    combine (Megatron-Core's all-to-all dispatcher with several local experts: ``blocks.expert_sort_ops``)."""
    fused_grouped_mlp: bool = False
    """The routed experts run the fused grouped MLP (``plan.moe_fused_grouped_mlp``): its kernels
    write the FP8 copies of the second GEMM's input and of the first GEMM's output gradient
    themselves (``blocks.expert_quantize_elements``)."""

    @property
    def flash_attention(self) -> bool:
        return self.attention_kernel != "unfused"

    def __post_init__(self) -> None:
        for field in ("micro_batch", "seq_len", "tp", "cp", "ep", "etp", "dtype_bytes"):
            if getattr(self, field) < 1:
                raise WorkloadError(f"{field} = {getattr(self, field)}: must be >= 1")
        if self.seq_len % self.cp:
            raise WorkloadError(
                f"seq_len = {self.seq_len} is not divisible by cp = {self.cp}: pick cp dividing it"
            )
        if self.sp and self.tokens % self.tp:
            raise WorkloadError(
                f"micro_batch*seq_len/cp = {self.tokens} tokens not divisible by tp = {self.tp} "
                "under sequence parallelism: change micro_batch, seq_len or tp"
            )

    @property
    def tokens(self) -> int:
        """Tokens of the micro-batch on this device's sequence shard: micro_batch*seq_len/cp."""
        return self.micro_batch * self.seq_len // self.cp

    @property
    def tokens_sp(self) -> int:
        """Tokens outside tensor-parallel regions: tokens/tp with sp, else all tokens."""
        return self.tokens // self.tp if self.sp else self.tokens


def gemm_op(name: str, m: float, n: int, k: int, dtype_bytes: int, *, params: int,
            fp8: bool = True, kind: OpKind = "gemm", count: int = 1, role: OpRole = "") -> Op:
    """`count` identical GEMMs of (m x k) @ (k x n), e.g. the local experts of a grouped GEMM, each
    its own kernel (``Op.calls``)."""
    flops = 2.0 * m * n * k * count
    moved = (m * k + k * n + m * n) * dtype_bytes * count
    return Op(name=name, kind=kind, flops=flops, bytes=float(moved), bwd_flops=2.0 * flops,
              bwd_bytes=2.0 * moved, params=params, gemm_shape=(max(1, round(m)), n, k), fp8=fp8,
              role=role, calls=max(1, count))


def memory_op(name: str, kind: OpKind, elements: float, dtype_bytes: int, *, reads: float,
              writes: float, flops_per_element: float, params: int = 0, role: OpRole = "") -> Op:
    """A memory-bound op over `elements` values that reads/writes that many tensors of them."""
    moved = elements * (reads + writes) * dtype_bytes + params * dtype_bytes
    flops = elements * flops_per_element
    return Op(name=name, kind=kind, flops=flops, bytes=float(moved), bwd_flops=2.0 * flops,
              bwd_bytes=2.0 * moved, params=params, role=role)


def split(total: int, parts: int, field: str, axis: str) -> int:
    """total / parts, raising a WorkloadError naming the field when it does not divide."""
    if total % parts:
        raise WorkloadError(
            f"{field} = {total} is not divisible by {axis} = {parts}: "
            f"choose {axis} dividing {total}"
        )
    return total // parts


def split_padded(total: int, parts: int) -> int:
    """ceil(total / parts): Megatron pads the vocabulary so every tp rank holds an equal slice."""
    return math.ceil(total / parts)
