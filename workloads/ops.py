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

from workloads.blocks import mha_ops, mla_ops, mlp_ops, moe_ops, norm_op, residual_op
from workloads.model import ModelSpec
from workloads.op_primitives import LocalShape, Op, gemm_op, memory_op, split_padded

__all__ = ["Op", "LocalShape", "layer_ops", "embedding_ops", "head_ops"]

LOSS_FLOPS = 5.0  # per logit: max, exp, sum, log, gather (approximate, not in model FLOPs)
FP32_BYTES = 4  # the cross-entropy runs in fp32 (Megatron vocab_parallel_cross_entropy)


def layer_ops(model: ModelSpec, layer_index: int, *, micro_batch: int, seq_len: int,
              tp: int = 1, cp: int = 1, ep: int = 1, etp: int = 1, dtype_bytes: int = 2,
              sp: bool = True) -> tuple[Op, ...]:
    """Forward ops of layer `layer_index` for one micro-batch on one device, in order.

    `sp` (sequence parallelism, default on as in Megatron-core with tp > 1) decides whether
    norms, residual adds, MLA down-projections and the router run on tokens/tp or all tokens.
    """
    moe = model.is_moe_layer(layer_index)
    shape = LocalShape(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp,
                       sp=sp, dtype_bytes=dtype_bytes)
    h, t_sp = model.hidden_size, shape.tokens_sp
    window = model.attention_window(layer_index)
    build = mla_ops if model.attention == "mla" else mha_ops
    attention = build(model, shape, window)
    mlp = moe_ops(model, shape) if moe else mlp_ops(model, shape, model.ffn_hidden_size)
    return (
        norm_op(model, "attn_norm", t_sp, h, dtype_bytes),
        *attention,
        residual_op("attn_residual", t_sp, h, dtype_bytes),
        norm_op(model, "mlp_norm", t_sp, h, dtype_bytes),
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
    """Final norm, vocabulary-parallel output projection and fp32 cross-entropy loss."""
    shape = LocalShape(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp,
                       sp=sp, dtype_bytes=dtype_bytes)
    h, T = model.hidden_size, shape.tokens
    v_local = split_padded(model.vocab_size, tp)
    head_params = 0 if model.tied_embeddings else v_local * h
    logits = T * v_local
    loss = memory_op("loss", "loss", logits, 1, reads=dtype_bytes + FP32_BYTES,
                     writes=dtype_bytes, flops_per_element=LOSS_FLOPS)
    return (
        norm_op(model, "final_norm", shape.tokens_sp, h, dtype_bytes),
        gemm_op("output", T, v_local, h, dtype_bytes, params=head_params, fp8=False),
        loss,
    )
