"""Device-local ops of the layers of hybrid Mamba-2/attention/MoE models and the SSD scan FLOPs.

Owns `hybrid_layer_ops` (the op list of one layer of a model with a `layer_pattern`: one pre-norm,
one block, one residual add), `mamba_ops` (the Mamba-2 mixer after tensor parallelism) and
`ssd_flops_per_token` (the chunked state-space-dual scan). Does not own the attention, MLP and
MoE blocks (workloads/blocks.py), activation memory (workloads/activations.py) nor parameter
counts (workloads/model.py).

Mamba-2 mixer under tensor parallelism (Megatron-Core megatron/core/ssm/mamba_mixer.py): in_proj
is column-parallel (each rank holds H/tp heads and G/tp groups of z, x, B, C, dt), the conv1d,
the scan and the gated RMSNorm run on the local heads, out_proj is row-parallel; like attention,
one all-gather (or all-reduce) in and one reduce-scatter out per layer with sequence parallelism.

SSD scan FLOPs (Dao & Gu 2024, "Transformers are SSMs", sec. 6, chunked algorithm with chunk Q,
state N, head width P, H heads, G groups, d_inner = H*P), per token, forward:
- chunk states B^T X: 2*N*P per head -> 2*d_inner*N;
- state-to-output C h: 2*N*P per head -> 2*d_inner*N;
- diagonal (intra-chunk) blocks: C B^T, 2*Q*N per group -> 2*Q*G*N, then the masked (Q x Q)
  product with X, 2*Q*P per head -> 2*Q*d_inner (counted in full, like the s^2 convention).
Total 4*d_inner*N + 2*Q*(d_inner + G*N); the inter-chunk state recurrence (N*P per head per
chunk) is negligible and left out.

SSD scan backward FLOPs, per token, as mamba_ssm runs it (state-spaces/mamba
mamba_ssm/ops/triton/ssd_combined.py @ d757aef `_mamba_chunk_scan_combined_bwd`, kernels in
ssd_chunk_scan.py / ssd_chunk_state.py / ssd_bmm.py). The backward first recomputes the forward's
C B^T blocks (`_bmm_chunk_fwd`, 2*Q*G*N) and chunk states (`_chunk_state_fwd`, 2*d_inner*N), then:
- `_chunk_scan_bwd_dstates`, dstates = C^T dout: 2*d_inner*N;
- `_chunk_scan_chunk_state_bwd_dx`, dx = B dstates + (C B^T o L)^T dout: 2*d_inner*N + 2*Q*d_inner;
- `_chunk_state_bwd_db`, dB = x^T dstates: 2*d_inner*N;  `_chunk_scan_bwd_dC`, dC = dout states^T:
  2*d_inner*N;
- `_chunk_scan_bwd_dcb`, dCB = dout x^T: 2*Q*d_inner;  two `_bmm_chunk_bwd`, dB += dCB^T C and
  dC += dCB B: 4*Q*G*N;
- `_chunk_scan_bwd_ddAcs_stable`, (dout x^T) o CB for the decay gradient: 2*Q*d_inner.
Total 10*d_inner*N + 6*Q*d_inner + 6*Q*G*N (`ssd_bwd_flops`): 2.69x the forward for Nemotron 3
Nano (d_inner 4,096, N 128, G 8, Q 128), where the 2x convention of the other ops would count 2x.
The cumsum and state-passing kernels are O(d_inner*N/Q) and left out, as in the forward. The
scan is HBM-bound at these shapes (~30-40 FLOP per byte), so its backward time follows its bytes
(``ssd_scan_bwd_bytes_per_token``, the same kernels' traffic), not these FLOPs. The model-FLOPs count of MFU
(workloads/flops.py `scan_flops_per_token`) keeps its 3x-forward convention: it is a convention,
not a cost.
"""

from clustersim.workloads.blocks import mha_ops, mla_ops, mlp_ops, moe_ops, norm_op, residual_op
from clustersim.workloads.model import LayerKind, ModelSpec
from clustersim.workloads.op_primitives import LocalShape, Op, gemm_op, memory_op, split

CONV_FLOPS_PER_TAP = 2.0  # one multiply-add per kernel tap of the depthwise conv1d
SILU_FLOPS = 4.0  # x * sigmoid(x) after the conv1d
GATED_NORM_FLOPS = 8.0  # RMSNorm (4) times silu(z) (4) in Mamba-2's gated norm


def ssd_flops(d_inner: int, groups: int, state: int, chunk: int) -> float:
    """Forward SSD scan FLOPs per token: 4*d_inner*N + 2*Q*(d_inner + G*N) (formula above)."""
    return 4.0 * d_inner * state + 2.0 * chunk * (d_inner + groups * state)


def ssd_bwd_flops(d_inner: int, groups: int, state: int, chunk: int) -> float:
    """Backward SSD scan FLOPs per token as mamba_ssm's Triton backward runs it, forward
    recomputation included: 10*d_inner*N + 6*Q*d_inner + 6*Q*G*N (kernel by kernel above)."""
    return 10.0 * d_inner * state + 6.0 * chunk * d_inner + 6.0 * chunk * groups * state


def ssd_flops_per_token(model: ModelSpec) -> float:
    """Forward SSD scan FLOPs per token of one Mamba-2 layer of `model` (unsharded)."""
    return ssd_flops(model.mamba_d_inner, model.mamba_num_groups, model.mamba_state_dim,
                     model.mamba_chunk_size)


FP32_BYTES = 4
"""The scan's intermediates (cumulative decay, chunk states, C B^T blocks) are fp32."""


def ssd_scan_bytes_per_token(d_local: int, heads_local: int, groups_local: int, state: int, chunk: int,
                             dtype_bytes: int) -> float:
    """HBM bytes per token of the chunked SSD forward as the Triton kernels run it
    (mamba_ssm ops/triton/ssd_combined.py: chunk_cumsum, chunk_state, state_passing, bmm_chunk,
    chunk_scan), with a = dtype_bytes and f = 4 (fp32 intermediates):
    - dt in, dA_cumsum and dt out, then read twice more: H (a + 2f + 4f);
    - x read twice, y written: 3 a d_inner;  B read twice, C twice: 4 a G N;
    - the C B^T blocks written and read: 2 f G Q;
    - chunk states (d_inner N per chunk of Q tokens) written, read and rewritten by the state
      passing, read by the scan: 4 f d_inner N / Q.
    Only the states of one chunk and the Q x Q blocks stay on chip (within a kernel)."""
    a, f = dtype_bytes, FP32_BYTES
    return (heads_local * (a + 6 * f) + 3 * a * d_local + 4 * a * groups_local * state
            + 2 * f * groups_local * chunk + 4 * f * d_local * state / chunk)


def ssd_scan_bwd_bytes_per_token(d_local: int, heads_local: int, groups_local: int, state: int, chunk: int,
                                 dtype_bytes: int) -> float:
    """HBM bytes per token of the chunked SSD backward as `_mamba_chunk_scan_combined_bwd` runs it
    (kernels listed in the module docstring; z is None, Megatron-Core's mixer gates in its own
    norm), with a = dtype_bytes, f = 4, the conventions of ``ssd_scan_bytes_per_token`` (C B^T blocks
    counted once per group):
    - x read by chunk_state (recompute), dx, dB, dcb and ddAcs; dout by dstates, dx, dC, dcb and
      ddAcs; dx written: 11 a d_inner;
    - B and C: read by the recomputed C B^T (2), chunk_state, dstates, dx, dB, dC and the two
      bmm_chunk_bwd (2 each, reading and writing dB / dC), dB and dC written fp32 by their kernels
      and read as residuals: (11 a + 4 f) G N;
    - the C B^T blocks and dCB (fp32): written by the recompute, read by dx and ddAcs, dCB written
      once and read by both bmm_chunk_bwd: 6 f G Q;
    - chunk states and their gradients per chunk: the recomputed states written (f), read and
      written by the state passing (2 f), dstates written (f), read and rewritten by its passing
      (2 f + 2 a), read in bf16 by dx, dB and dC (3 a): (6 f + 5 a) d_inner N / Q;
    - per head: dt read (a), dA_cumsum / dt / ddt / ddA read and written across the kernels: 22 f.
    2.76x the forward's bytes for Nemotron 3 Nano (d_inner 4,096, H 64, G 8, N 128, Q 128)."""
    a, f = dtype_bytes, FP32_BYTES
    return (heads_local * (a + 22 * f) + 11 * a * d_local + (11 * a + 4 * f) * groups_local * state
            + 6 * f * groups_local * chunk + (6 * f + 5 * a) * d_local * state / chunk)


def ssd_scan_op(model: ModelSpec, shape: LocalShape, heads_local: int, groups_local: int) -> Op:
    """The chunked SSD scan of the local heads for the device's tokens (kind 'attention': its
    math priced like the attention core, its HBM traffic by ``ssd_scan_bytes_per_token``, its
    backward by ``ssd_bwd_flops`` and ``ssd_scan_bwd_bytes_per_token``).
    Holds dt_bias, A_log and D."""
    p, n, dt = model.mamba_head_dim, model.mamba_state_dim, shape.dtype_bytes
    d_local = heads_local * p
    flops = shape.tokens * ssd_flops(d_local, groups_local, n, model.mamba_chunk_size)
    bwd = shape.tokens * ssd_bwd_flops(d_local, groups_local, n, model.mamba_chunk_size)
    bwd_moved = float(shape.tokens * ssd_scan_bwd_bytes_per_token(d_local, heads_local, groups_local, n,
                                                                  model.mamba_chunk_size, dt))
    moved = float(shape.tokens * ssd_scan_bytes_per_token(d_local, heads_local, groups_local, n,
                                                          model.mamba_chunk_size, dt))
    return Op(name="ssd_scan", kind="attention", flops=flops, bytes=moved, bwd_flops=bwd,
              bwd_bytes=bwd_moved, params=3 * heads_local,
              gemm_shape=(model.mamba_chunk_size, model.mamba_chunk_size, p), role="ssm_scan")


def mamba_ops(model: ModelSpec, shape: LocalShape) -> tuple[Op, ...]:
    """in_proj (column-parallel), conv1d + SiLU, SSD scan, gated RMSNorm, out_proj (row-parallel)."""
    h, dt, T = model.hidden_size, shape.dtype_bytes, shape.tokens
    heads = split(model.mamba_num_heads, shape.tp, "mamba_num_heads", "tp")
    groups = split(model.mamba_num_groups, shape.tp, "mamba_num_groups", "tp")
    d_local = heads * model.mamba_head_dim
    conv_local = d_local + 2 * groups * model.mamba_state_dim
    n_in = d_local + conv_local + heads  # z, (x, B, C), dt
    k = model.mamba_conv_kernel
    conv = memory_op("mamba_conv1d", "elementwise", T * conv_local, dt, reads=1, writes=1,
                     flops_per_element=CONV_FLOPS_PER_TAP * k + SILU_FLOPS,
                     params=conv_local * (k + 1))
    gated_norm = memory_op("mamba_gated_norm", "norm", T * d_local, dt, reads=2, writes=1,
                           flops_per_element=GATED_NORM_FLOPS, params=model.norm_params(d_local))
    return (
        gemm_op("mamba_in_proj", T, n_in, h, dt, params=h * n_in),
        conv,
        ssd_scan_op(model, shape, heads, groups),
        gated_norm,
        gemm_op("mamba_out_proj", T, h, d_local, dt, params=d_local * h),
    )


def hybrid_layer_ops(model: ModelSpec, layer_index: int, shape: LocalShape) -> tuple[Op, ...]:
    """Pre-norm, the one block the pattern names for this layer, residual add."""
    return hybrid_block_ops(model, model.layer_kind(layer_index), shape, model.attention_window(layer_index))


def hybrid_block_ops(model: ModelSpec, kind: LayerKind, shape: LocalShape, window: int | None = None) -> tuple[Op, ...]:
    """Pre-norm, one block of ``kind`` (attention with ``window`` keys, None = full), residual add:
    a hybrid layer, or one layer of an MTP depth's pattern (``ModelSpec.mtp_layer_pattern``)."""
    h, t_sp, dt = model.hidden_size, shape.tokens_sp, shape.dtype_bytes
    if kind == "mamba":
        block = mamba_ops(model, shape)
    elif kind == "attention":
        build = mla_ops if model.attention == "mla" else mha_ops
        block = build(model, shape, window)
    elif kind == "mlp":
        block = mlp_ops(model, shape, model.ffn_hidden_size, role="dense_mlp")
    else:
        block = moe_ops(model, shape)
    return (
        norm_op(model, f"{kind}_norm", t_sp, h, dt, role="input_norm"),
        *block,
        residual_op(f"{kind}_residual", t_sp, h, dt),
    )


def mamba_cp_alltoall_bytes(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                            cp: int = 1, dtype_bytes: int = 2) -> float:
    """Bytes one device sends in the context-parallel all-to-alls of one Mamba-2 layer's forward
    (the same again in backward); 0 when cp == 1.

    Megatron-Core (megatron/core/ssm/mamba_context_parallel.py) turns the sequence sharding into
    head sharding for the scan: the in_proj output z|xBC|dt goes out before the conv1d and the
    scan output y (d_inner) comes back after it; each on the device's tp slice of the widths.
    """
    if cp == 1:
        return 0.0
    tokens = micro_batch * seq_len / cp
    width = 2 * model.mamba_d_inner + model.mamba_conv_dim + model.mamba_num_heads
    return tokens * width / tp * dtype_bytes
