"""Per-device ops of one transformer layer, of the embedding and of the output head.

Owns the public op-list functions the simulator lowers to kernels: `layer_ops`,
`embedding_ops`, `head_ops` (re-exporting `Op`). Each returns the forward ops of one micro-batch
on one device after tp/cp/ep/etp sharding, in execution order, with forward and backward FLOPs,
HBM bytes and the parameters held. Does not own cost conventions (workloads/op_primitives.py),
block sharding rules (workloads/blocks.py), activation memory (workloads/activations.py) or
communication, apart from the `alltoall_marker` ops that show where EP all-to-alls sit.

Conventions:
- FLOPs of attention use the full s^2 (PaLM/Megatron model-FLOPs convention); the attention op's
  causal_flops_fraction (0.5) tells the compute model what a causal kernel really executes.
  Sliding-window layers count the s x window band they execute (fraction 1).
- Summed over the tp*cp ranks of a group, GEMM and attention FLOPs equal the unsharded layer's;
  ep ranks are data-parallel for the dense part, so each processes its own micro-batch.
- Tied embeddings: the head op holds no parameters (the embedding op does); a partitioner that
  puts embedding and head on different pipeline stages must add the copy itself (Megatron does).
"""

import dataclasses

from clustersim.workloads.blocks import mha_ops, mla_ops, mlp_ops, moe_ops, norm_op, residual_op
from clustersim.workloads.mamba import hybrid_block_ops, hybrid_layer_ops
from clustersim.workloads.model import ModelSpec
from clustersim.workloads.op_primitives import LocalShape, Op, gemm_op, memory_op, split, split_padded

__all__ = ["Op", "LocalShape", "layer_ops", "embedding_ops", "head_ops"]

LOSS_FLOPS = 5.0  # per logit: max, exp, sum, log, gather (approximate, not in model FLOPs)
FP32_BYTES = 4  # the cross-entropy runs in fp32 (Megatron vocab_parallel_cross_entropy)


def layer_ops(model: ModelSpec, layer_index: int, *, micro_batch: int, seq_len: int,
              tp: int = 1, cp: int = 1, ep: int = 1, etp: int = 1, dtype_bytes: int = 2,
              sp: bool = True, attention_kernel: str = "flash3", sort_by_local_expert: bool = False,
              fused_grouped_mlp: bool = False) -> tuple[Op, ...]:
    """Forward ops of layer `layer_index` for one micro-batch on one device, in order.

    `sp` (sequence parallelism, default on as in Megatron-core with tp > 1) decides whether
    norms, residual adds, MLA down-projections and the router run on tokens/tp or all tokens;
    `sort_by_local_expert`: the MoE dispatcher's sort and unsort by local expert (``LocalShape``);
    `fused_grouped_mlp`: the routed experts' fused grouped MLP (``LocalShape``).
    """
    moe = model.is_moe_layer(layer_index)
    shape = LocalShape(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp,
                       sp=sp, dtype_bytes=dtype_bytes, attention_kernel=attention_kernel,
                       sort_by_local_expert=sort_by_local_expert, fused_grouped_mlp=fused_grouped_mlp)
    if model.layer_pattern is not None:  # hybrid: one block per layer (workloads/mamba.py)
        return hybrid_layer_ops(model, layer_index, shape)
    h, t_sp = model.hidden_size, shape.tokens_sp
    window = model.attention_window(layer_index)
    build = mla_ops if model.attention == "mla" else mha_ops
    attention = build(model, shape, window)
    mlp = moe_ops(model, shape) if moe else mlp_ops(model, shape, model.ffn_hidden_size, role="dense_mlp")
    return (
        norm_op(model, "attn_norm", t_sp, h, dtype_bytes, role="input_norm"),
        *attention,
        residual_op("attn_residual", t_sp, h, dtype_bytes),
        norm_op(model, "mlp_norm", t_sp, h, dtype_bytes, role="input_norm"),
        *mlp,
        residual_op("mlp_residual", t_sp, h, dtype_bytes),
    )


def embedding_ops(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                  cp: int = 1, ep: int = 1, etp: int = 1, dtype_bytes: int = 2,
                  sp: bool = True) -> tuple[Op, ...]:
    """Vocabulary-parallel word embedding lookup (+ learned positions) for one micro-batch.

    Parameters: vocab/tp rows (padded up) plus the replicated position table. Bytes: the looked
    up rows read and the [tokens, h] output written; no FLOPs.
    """
    shape = LocalShape(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp,
                       sp=sp, dtype_bytes=dtype_bytes)
    h = model.hidden_size
    params = split_padded(model.vocab_size, tp) * h
    if model.learned_position_embeddings:
        params += int(model.max_seq_len or 0) * h
    moved = 2.0 * shape.tokens * h * dtype_bytes
    return (Op(name="embedding", kind="embedding", flops=0.0, bytes=moved, bwd_flops=0.0,
               bwd_bytes=moved, params=params),)


def head_ops(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1, cp: int = 1,
             ep: int = 1, etp: int = 1, dtype_bytes: int = 2,
             sp: bool = True) -> tuple[Op, ...]:
    """Final norm, vocabulary-parallel output projection and fp32 cross-entropy loss, then the
    MTP depths if the model has them (each: norms, 2h->h projection, its block, and the shared
    output head and loss again; DeepSeek-V3 sec. 2.2). With ``mtp_shared_weights`` the later depths
    rerun the first one's module: their ops hold no parameters."""
    shape = LocalShape(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp,
                       sp=sp, dtype_bytes=dtype_bytes)
    v_local = split_padded(model.vocab_size, tp)
    head_params = 0 if model.tied_embeddings else v_local * model.hidden_size
    ops = list(_output_ops(model, shape, "", head_params))
    for j in range(model.mtp_layers):
        depth = _mtp_ops(model, shape, f"mtp{j}_")
        if j and model.mtp_shared_weights:
            depth = [dataclasses.replace(op, params=0) for op in depth]
        ops.extend(depth)
    return tuple(ops)


def _output_ops(model: ModelSpec, shape: LocalShape, prefix: str, params: int) -> tuple[Op, ...]:
    h, dt = model.hidden_size, shape.dtype_bytes
    v_local = split_padded(model.vocab_size, shape.tp)
    loss = memory_op(f"{prefix}loss", "loss", shape.tokens * v_local, 1,
                     reads=dt + FP32_BYTES, writes=dt, flops_per_element=LOSS_FLOPS)
    return (
        norm_op(model, f"{prefix}final_norm", shape.tokens_sp, h, dt),
        gemm_op(f"{prefix}output", shape.tokens, v_local, h, dt, params=params, fp8=False),
        loss,
    )


def _mtp_ops(model: ModelSpec, shape: LocalShape, prefix: str) -> list[Op]:
    """One MTP depth; its projection is column-parallel over tp, its output head shared; its block
    the last layer's shape, or the layers of ``mtp_layer_pattern``."""
    h, dt = model.hidden_size, shape.dtype_bytes
    h_local = split(h, shape.tp, "hidden_size", "tp")
    if model.mtp_layer_pattern is None:
        block: tuple[Op, ...] = layer_ops(model, model.num_layers - 1, micro_batch=shape.micro_batch,
                                          seq_len=shape.seq_len, tp=shape.tp, cp=shape.cp, ep=shape.ep,
                                          etp=shape.etp, dtype_bytes=dt, sp=shape.sp)
    else:
        block = tuple(op for kind in model.mtp_block_kinds for op in hybrid_block_ops(model, kind, shape))
    return [
        norm_op(model, f"{prefix}input_norms", shape.tokens_sp, 2 * h, dt),
        gemm_op(f"{prefix}proj", shape.tokens, h_local, 2 * h, dt, params=2 * h * h_local),
        *(dataclasses.replace(op, name=prefix + op.name) for op in block),
        *_output_ops(model, shape, prefix, 0),
    ]
