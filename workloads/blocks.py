"""Device-local ops of the blocks of one transformer layer: norms, attention (MHA/GQA or MLA),
dense MLP and MoE, after tensor, context and expert parallel sharding.

Owns how each block shards (Megatron-core conventions, cited per function) and the op list it
becomes. Does not own the op cost conventions (workloads/op_primitives.py) nor which blocks a
layer has (workloads/ops.py).

Sharding summary (T = micro_batch*seq_len/cp tokens on the device's sequence shard):
- Column/row-parallel GEMMs see all T tokens and 1/tp of heads or FFN columns.
- Norms, residual adds, MLA down-projections and the router see T/tp tokens with sequence
  parallelism (Korthikanti et al. 2022 sec. 4.2.2) and all T without.
- Attention core: each cp rank holds T queries against all seq_len keys; FLOPs use the full
  s^2 convention (causal_flops_fraction = 0.5 says what a causal kernel executes).
- Routed experts: each device holds num_experts/ep experts; tokens entering the MoE block are
  its T/tp sequence-parallel tokens; an etp group gathers its ranks' tokens, so a device's
  experts process (T/tp)*etp*top_k token-expert pairs with 1/etp of each expert's columns
  (dropless, perfectly balanced routing, as the Megatron-Bridge MoE benchmarks force).
"""

import dataclasses

from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.model import ModelSpec, attention_param_parts, required
from clustersim.workloads.op_primitives import LocalShape, Op, OpRole, gemm_op, memory_op, split

# Approximate FLOP per element of memory-bound ops (not part of model FLOPs).
NORM_FLOPS = 4.0  # RMSNorm: square, accumulate, scale by rsqrt, multiply by weight
RESIDUAL_FLOPS = 1.0  # one add (dropout with p=0 is a copy)
SWIGLU_FLOPS = 5.0  # silu(x) = x*sigmoid(x) (~4) times the up projection (1)
GELU_FLOPS = 8.0  # tanh-approximate GeLU


def norm_op(model: ModelSpec, name: str, tokens: float, width: int, dtype_bytes: int,
            role: OpRole = "") -> Op:
    """A norm over `tokens` rows of `width` (reads the input, writes the output)."""
    return memory_op(name, "norm", tokens * width, dtype_bytes, reads=1, writes=1,
                     flops_per_element=NORM_FLOPS, params=model.norm_params(width), role=role)


def residual_op(name: str, tokens: float, width: int, dtype_bytes: int) -> Op:
    """Bias-dropout-add into the residual stream: reads two tensors, writes one."""
    return memory_op(name, "elementwise", tokens * width, dtype_bytes, reads=2, writes=1,
                     flops_per_element=RESIDUAL_FLOPS)


def attention_core_ops(model: ModelSpec, shape: LocalShape, heads_local: int,
                       kv_heads_local: int, window: int | None = None) -> tuple[Op, ...]:
    """The attention core: one fused kernel, or the unfused path without ``shape.flash_attention``."""
    core = attention_core_op(model, shape, heads_local, kv_heads_local, window)
    return (core,) if shape.flash_attention else unfused_attention_ops(core, shape, heads_local, window)


UNFUSED_SCORE_FLOPS = 5.0
"""FLOPs per score of the scale, mask and softmax (max, subtract, exp, sum, divide), forward."""


def unfused_attention_ops(core: Op, shape: LocalShape, heads_local: int,
                          window: int | None = None) -> tuple[Op, Op]:
    """Attention before fused kernels (Megatron-LM 2021, DeepSpeed 2021): every s x s score in HBM.

    'attn_core' becomes two batched GEMMs (Q K^T, then P V) that compute the whole square (the
    causal mask is applied afterwards, nothing is skipped) and write/read the scores (2 dt bytes per
    score); 'attn_softmax' is the fused scale-mask-softmax and the dropout: per score, forward
    reads the scores and writes the probabilities, then reads them and writes the dropped
    probabilities and a 1-byte mask (4 dt + 1 bytes); backward reads the gradient, the mask and the
    probabilities and writes two gradients (5 dt + 1 bytes). Both are recomputed by selective
    recompute (Korthikanti et al. 2022: exactly these are the 5as/h activations).
    """
    dt = shape.dtype_bytes
    sk = shape.seq_len if window is None else min(window, shape.seq_len)
    scores = float(shape.micro_batch * (shape.seq_len // shape.cp) * sk * heads_local)
    bmm = dataclasses.replace(core, kind="bmm", kernel="", bytes=core.bytes + 2 * dt * scores,
                              bwd_bytes=core.bwd_bytes + 4 * dt * scores, causal_flops_fraction=1.0)
    softmax = Op(name="attn_softmax", kind="elementwise", flops=UNFUSED_SCORE_FLOPS * scores,
                 bytes=(4 * dt + 1) * scores, bwd_flops=UNFUSED_SCORE_FLOPS * scores,
                 bwd_bytes=(5 * dt + 1) * scores, params=0, recompute_selective=True)
    return bmm, softmax


def attention_core_op(model: ModelSpec, shape: LocalShape, heads_local: int,
                      kv_heads_local: int, window: int | None = None) -> Op:
    """Softmax(QK^T)V for the local heads: 2*b*sq*sk*heads*(d_qk + d_v) FLOPs.

    Full layers count the whole s x s square (sk = seq_len; a causal kernel runs half of it);
    sliding-window layers count the band they execute (sk = min(window, seq_len), fraction 1).
    Backward = 2x forward (brief convention; FlashAttention-2 really does 2.5x incl. recompute).
    HBM bytes (fused kernel, no s^2 tensor): read Q, the keys/values in reach, write O.
    """
    d_qk, d_v = model.attn_head_dim, model.value_head_dim
    b, sq = shape.micro_batch, shape.seq_len // shape.cp
    sk = shape.seq_len if window is None else min(window, shape.seq_len)
    flops = 2.0 * b * sq * sk * heads_local * (d_qk + d_v)
    q_bytes = b * sq * heads_local * (d_qk + d_v)  # Q in, O out
    kv_bytes = b * sk * kv_heads_local * (d_qk + d_v)
    moved = float((q_bytes + kv_bytes) * shape.dtype_bytes)
    return Op(name="attn_core", kind="attention", flops=flops, bytes=moved,
              bwd_flops=2.0 * flops, bwd_bytes=2.0 * moved, params=0,
              gemm_shape=(sq, sk, d_qk), fp8=False, recompute_selective=True, kernel=shape.attention_kernel,
              causal_flops_fraction=0.5 if window is None else 1.0, role="attention_core")


def mha_ops(model: ModelSpec, shape: LocalShape, window: int | None = None) -> tuple[Op, ...]:
    """QKV projection, attention core and output projection of MHA/GQA/MQA.

    Megatron-core shards query heads and key/value groups over tp; with tp > num_kv_heads (tp a
    multiple of it, e.g. MQA at tp 4) each rank holds one KV head, replicated over tp / num_kv_heads
    ranks (megatron/core/transformer/attention.py: num_query_groups_per_partition = max(1, g / tp)).
    """
    h, d, dt = model.hidden_size, model.attn_head_dim, shape.dtype_bytes
    heads = split(model.num_heads, shape.tp, "num_heads", "tp")
    replicated = model.num_kv_heads < shape.tp and shape.tp % model.num_kv_heads == 0
    kv = 1 if replicated else split(model.num_kv_heads, shape.tp, "num_kv_heads", "tp")
    n_qkv = (heads + 2 * kv) * d
    qkv_bias = n_qkv if model.linear_bias else 0
    out_bias = h if model.linear_bias else 0  # row-parallel bias is replicated on tp ranks
    return (
        gemm_op("qkv", shape.tokens, n_qkv, h, dt, params=h * n_qkv + qkv_bias, role="qkv_proj"),
        *attention_core_ops(model, shape, heads, kv, window),
        gemm_op("attn_out", shape.tokens, h, heads * d, dt, params=heads * d * h + out_bias),
    )


def mla_ops(model: ModelSpec, shape: LocalShape, window: int | None = None) -> tuple[Op, ...]:
    """DeepSeek-V3 multi-head latent attention (Megatron-core multi_latent_attention.py).

    Down-projections are duplicated across tp and run on the sequence-parallel tokens; their
    latents are gathered, normed, and up-projected column-parallel over heads.
    """
    h, dt, T = model.hidden_size, shape.dtype_bytes, shape.tokens
    heads = split(model.num_heads, shape.tp, "num_heads", "tp")
    parts = attention_param_parts(model)
    kvl, rope = required(model.kv_lora_rank, "kv_lora_rank"), required(model.qk_rope_head_dim, "qk_rope_head_dim")
    d_qk, d_v = model.attn_head_dim, model.value_head_dim
    ops: list[Op] = []
    if model.q_lora_rank is None:
        ops.append(gemm_op("q_proj", T, heads * d_qk, h, dt, params=h * heads * d_qk, role="mla_up_proj"))
    else:
        ql = model.q_lora_rank
        ops.append(gemm_op("q_down", shape.tokens_sp, ql, h, dt, params=parts["q_down"]))
        ops.append(norm_op(model, "q_latent_norm", T, ql, dt))
        ops.append(gemm_op("q_up", T, heads * d_qk, ql, dt, params=ql * heads * d_qk, role="mla_up_proj"))
    ops.append(gemm_op("kv_down", shape.tokens_sp, kvl + rope, h, dt, params=parts["kv_down"]))
    ops.append(norm_op(model, "kv_latent_norm", T, kvl, dt))
    n_up = heads * (required(model.qk_nope_head_dim, "qk_nope_head_dim") + d_v)
    ops.append(gemm_op("kv_up", T, n_up, kvl, dt, params=kvl * n_up, role="mla_up_proj"))
    ops.extend(attention_core_ops(model, shape, heads, heads, window))
    ops.append(gemm_op("attn_out", T, h, heads * d_v, dt, params=heads * d_v * h))
    return tuple(ops)


def mlp_ops(model: ModelSpec, shape: LocalShape, ffn: int, prefix: str = "mlp",
            role: OpRole = "") -> tuple[Op, ...]:
    """Dense (or shared-expert) MLP: column-parallel fc1, activation, row-parallel fc2."""
    h, dt, T = model.hidden_size, shape.dtype_bytes, shape.tokens
    f = split(ffn, shape.tp, f"{prefix} ffn hidden size", "tp")
    n_in = 2 if model.gated_mlp else 1
    bias_in = n_in * f if model.linear_bias else 0
    bias_out = h if model.linear_bias else 0
    act = memory_op(f"{prefix}_act", "elementwise", T * f, dt, reads=n_in, writes=1,
                    flops_per_element=SWIGLU_FLOPS if model.gated_mlp else GELU_FLOPS, role=role)
    return (
        gemm_op(f"{prefix}_fc1", T, n_in * f, h, dt, params=h * n_in * f + bias_in, role=role),
        act,
        gemm_op(f"{prefix}_fc2", T, h, f, dt, params=f * h + bias_out, role=role),
    )


def moe_ops(model: ModelSpec, shape: LocalShape) -> tuple[Op, ...]:
    """Router, dispatch, grouped expert GEMMs, combine, and the shared experts (tp-sharded). A
    LatentMoE (``model.moe_latent_size``) projects the tokens down after the router and back up
    after the combine; everything between runs at the latent width (``model.expert_width``). Its
    projections are replicated over tp (Megatron-Core ``parallel_mode="duplicated"``), each rank
    projecting its own sequence-parallel tokens."""
    h, dt, E, k = model.expert_width, shape.dtype_bytes, model.num_experts, model.top_k
    local = split(E, shape.ep, "num_experts", "ep")
    f = split(required(model.moe_ffn_hidden_size, "moe_ffn_hidden_size"), shape.etp, "moe_ffn_hidden_size", "etp")
    n_in = 2 if model.gated_mlp else 1
    if shape.tp > 1 and not shape.sp:
        raise WorkloadError(
            f"{model.name}: MoE layers with tp = {shape.tp} need sequence parallelism "
            "(Megatron-core requires it): set sp = true"
        )
    t_in = shape.tokens_sp
    pairs = t_in * shape.etp * k  # token-expert pairs reaching this device's experts
    per_expert = pairs / local
    bias_in, bias_out = (n_in * f, h) if model.linear_bias else (0, 0)
    q1, q2 = expert_quantize_elements(pairs, h, n_in * f, f, shape.fused_grouped_mlp)
    calls = expert_gemm_calls(local, shape.fused_grouped_mlp)
    latent = model.moe_latent_size
    ops = [
        gemm_op("router", t_in, E, model.hidden_size, dt, params=model.router_params(), fp8=False, kind="router",
                role="router"),
        *([gemm_op("moe_latent_down", t_in, latent, model.hidden_size, dt, params=model.hidden_size * latent,
                   role="latent_proj")] if latent else []),
        memory_op("moe_permute", "elementwise", t_in * k * h, dt, reads=1, writes=1,
                  flops_per_element=0.0, role="permute"),
        _alltoall("moe_dispatch", t_in * k * h * dt, "dispatch"),
        *expert_sort_ops("moe_sort", pairs * h, dt, local, shape.sort_by_local_expert),
        dataclasses.replace(gemm_op("expert_fc1", per_expert, n_in * f, h, dt, params=local * (h * n_in * f + bias_in),
                                    count=local, role="routed_expert"), quantize_elements=q1, calls=calls),
        expert_act_op(model, pairs, f, dt, shape.fused_grouped_mlp),
        dataclasses.replace(gemm_op("expert_fc2", per_expert, h, f, dt, params=local * (f * h + bias_out), count=local,
                                    role="routed_expert"), quantize_elements=q2, calls=calls),
        *expert_sort_ops("moe_unsort", pairs * h, dt, local, shape.sort_by_local_expert),
        _alltoall("moe_combine", t_in * k * h * dt, "combine"),
        memory_op("moe_unpermute", "elementwise", t_in * k * h, dt, reads=1, writes=1,
                  flops_per_element=2.0, role="unpermute"),  # weighted sum of the top_k expert outputs
        *([gemm_op("moe_latent_up", t_in, model.hidden_size, latent, dt, params=latent * model.hidden_size,
                   role="latent_proj")] if latent else []),
    ]
    if model.num_shared_experts:
        ops.extend(mlp_ops(model, shape, model.num_shared_experts * model.shared_ffn, "shared",
                           role="shared_expert"))
    return tuple(ops)


def expert_gemm_calls(local: int, fused: bool) -> int:
    """Kernels one pass of a routed expert's grouped GEMM launches. The unfused path (Transformer
    Engine's ``GroupedLinear``, ``general_grouped_gemm``) launches one cuBLAS GEMM per local expert,
    round-robin on a pool of compute streams: NVIDIA/TransformerEngine
    transformer_engine/common/gemm/cublaslt_gemm.cu, ``nvte_multi_tensor_gemm`` falls back to
    ``multi_stream_cublas_gemm`` (a loop of ``nvte_cublas_gemm_v2`` over ``num_gemms``, stream
    ``i % num_streams``) unless the GPU is a Hopper with ``NVTE_USE_CUTLASS_GROUPED_GEMM`` set and
    the GEMMs are BF16/FP16 (stored copy, find_string id 37844088645); the forward, input-gradient
    and weight-gradient GEMMs alike (grouped_linear.py @ 0069563f606859d4fb5d663e1c92509a30e99f35,
    ``_GroupedLinear.forward`` / ``backward``). The fused grouped MLP runs its experts in one kernel."""
    return 1 if fused else max(1, local)


CLAMP_FWD_PASSES = 8.0
"""Extra HBM passes of one [pairs, f] half in the forward of a clamped GLU (``expert_act_op``)."""
CLAMP_BWD_PASSES = 10.0
"""The same in the backward."""


def expert_act_op(model: ModelSpec, pairs: float, f: int, dt: int, fused: bool) -> Op:
    """The routed experts' activation over ``pairs`` token-expert pairs of ``f`` columns.

    Unclamped: one fused kernel (Megatron-Core ``weighted_bias_swiglu_impl`` /
    ``weighted_bias_quick_geglu_impl``) reads the fc1 output's gate and up halves and writes the
    product, 3 passes of a [pairs, f] tensor forward (the backward twice that). With the fused
    grouped MLP the activation runs in the first GEMM's epilogue, on its accumulators, so nothing is
    read back from HBM (expert_quantize_elements: forward_grouped_mlp.py, "Fused kernel for FC1 +
    SwiGLU + post-scale"; its backward in the second GEMM's dgrad epilogue, backward_grouped_mlp.py
    "FC2 dgrad + dSwiGLU + grad scale"); the clamp is not counted there.

    Clamped (``model.activation_clamp``, gpt-oss): Megatron-Core runs the clamps and a concatenation
    as eager ops ahead of the fused kernel (NVIDIA/Megatron-LM
    megatron/core/fusions/fused_bias_geglu.py @ 034fd2d3, ``weighted_bias_quick_geglu_impl``:
    ``torch.cat((x_glu.clamp(max=limit), x_linear.clamp(-limit, limit)), -1)`` then
    ``WeightedQuickGeGLUFunction``). Each elementwise op reads and writes its tensors once, in
    passes of one [pairs, f] half: forward, clamp(gate) 1 + 1, clamp(up) 1 + 1, cat 2 + 2 = 8 more;
    backward, the cat's gradient is two views (0), each clamp's gradient (grad * in-range mask)
    reads the gradient and its saved input and writes 1 + 1 + 1, twice = 6, and the chunk's
    gradient assembles the two halves into the fc1 output's gradient, 2 + 2 = 4: 10 more. The
    clamps' compares are left out of the FLOPs (memory-bound, a few per element).
    """
    gated = model.gated_mlp
    n_in = 2 if gated else 1
    elements = pairs * f
    op = memory_op("expert_act", "elementwise", elements, dt, reads=0 if fused else n_in, writes=1,
                   flops_per_element=SWIGLU_FLOPS if gated else GELU_FLOPS, role="routed_expert")
    if model.activation_clamp is None or fused:
        return op
    return dataclasses.replace(op, bytes=op.bytes + CLAMP_FWD_PASSES * elements * dt,
                               bwd_bytes=op.bwd_bytes + CLAMP_BWD_PASSES * elements * dt)


def expert_quantize_elements(pairs: float, h: int, fc1_out: int, fc2_in: int,
                             fused: bool) -> tuple[tuple[float, float], tuple[float, float]]:
    """((forward, backward) quantized elements of the first expert GEMM, the same of the second)
    for ``pairs`` token-expert pairs on a device. Transformer Engine's GroupedLinear (Megatron-Core's
    routed experts) quantizes every expert's input before its forward GEMM and every expert's output
    gradient before its backward GEMMs, each a separate kernel (NVIDIA/TransformerEngine
    transformer_engine/pytorch/module/grouped_linear.py @ 0069563f606859d4fb5d663e1c92509a30e99f35,
    ``_GroupedLinear.forward``: ``tex.fused_multi_quantize(inputmats_no_fp8, ...)``; ``backward``:
    ``tex.fused_multi_quantize(grad_output_mats, ...)``). The fused grouped MLP still quantizes the
    first GEMM's input and the second's output gradient (``tex.split_quantize``), but its GEMM+SwiGLU
    kernel writes the second GEMM's FP8 input and its dSwiGLU kernel the first GEMM's FP8 output
    gradient (transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py @
    000c2736de297055fa8464b776ca62a2766dd6b2, ``fc1_xs = tex.split_quantize(...)`` then the kernel's
    ``d_tensor`` / ``d_col_tensor`` as ``fc2_xs``; backward_grouped_mlp.py
    @ 504f389396a33f32a38d9b16aab9cee2d4c34ae6 ``fc2_dys = tex.split_quantize(...)`` then the kernel's
    ``d_row_tensor`` as ``fc1_dys``)."""
    fc1 = (pairs * h, 0.0 if fused else pairs * fc1_out)
    fc2 = (0.0 if fused else pairs * fc2_in, pairs * h)
    return fc1, fc2


def expert_sort_ops(name: str, elements: float, dtype_bytes: int, local_experts: int, sorts: bool) -> tuple[Op, ...]:
    """The dispatcher's copy of every received token row into local-expert order (or back): none
    unless ``sorts`` and the device holds several experts. Megatron-Core's
    ``MoEAlltoAllTokenDispatcher`` runs "Permutation 2: Sort tokens by local expert"
    (``dispatch_postprocess``: ``sort_chunks_by_idxs``, or with drop-and-pad a
    ``transpose(0, 1).contiguous()``) after the all-to-all and "Unpermutation 2" before the combine
    (``combine_preprocess``), ``if self.num_local_experts > 1`` (NVIDIA/Megatron-LM
    megatron/core/transformer/moe/token_dispatcher.py @ 0014f13713bfa38a8bab4ae11edd6917d35165ce).
    One read and one write of ``elements`` values each way; its backward is the inverse
    permutation, one read and one write as well. Its kernel launch is counted with the all-to-all
    marker (``simulator.step.host``)."""
    if not sorts or local_experts <= 1:
        return ()
    op = memory_op(name, "elementwise", elements, dtype_bytes, reads=1, writes=1, flops_per_element=0.0,
                   role="expert_sort")
    return (dataclasses.replace(op, bwd_bytes=op.bytes, bwd_flops=0.0),)


def _alltoall(name: str, payload_bytes: float, role: OpRole) -> Op:
    """A marker where the EP all-to-all happens; bytes = payload one device sends (same back)."""
    return Op(name=name, kind="alltoall_marker", flops=0.0, bytes=float(payload_bytes),
              bwd_flops=0.0, bwd_bytes=float(payload_bytes), params=0, role=role)
