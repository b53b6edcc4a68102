"""The parallel plan: how one training step is split over the devices, and its validation.

Owns ``ParallelPlan`` (the user's choice of degrees, schedule, recompute and sharding) and
``check_plan`` (does the plan divide this model and fill this cluster?). It does not place ranks
on devices (``placement``) nor size memory (``partition``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from clustersim.simulator.errors import PlanError
from clustersim.simulator.plan.layout import layout_split
from clustersim.simulator.plan.schedules import pairs_forward_backward
from clustersim.workloads import RECOMPUTE_MODULES, TrainingSpec

Schedule = Literal["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"]
Recompute = Literal["none", "selective", "full"]
Fsdp = Literal["none", "full", "hybrid"]
ParamGatherUnit = Literal["module", "tensor"]
MoeDispatcher = Literal["alltoall", "allgather", "deepep"]
CrossEntropyImpl = Literal["native", "te"]
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe")
RECOMPUTES: tuple[str, ...] = ("none", "selective", "full")
AXES: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
CUDA_GRAPH_SCOPES: tuple[str, ...] = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "layer",
                                      "full_iteration")
"""Megatron-Core's ``CudaGraphScope`` names (megatron/core/transformer/enums.py) and ``layer``, the
whole-layer capture an implementation takes when no scope is given (``step.graphs``)."""


@dataclass(frozen=True, kw_only=True)
class ParallelPlan:
    """One parallel plan; degrees spelt ``dp, tp, pp, cp, ep`` everywhere."""

    tp: int = 1
    """Tensor-parallel degree (Megatron column/row split of heads and FFN)."""
    pp: int = 1
    """Pipeline-parallel degree (number of stages)."""
    dp: int = 1
    """Data-parallel degree of the dense part: GPUs / (tp * pp * cp)."""
    cp: int = 1
    """Context-parallel degree (sequence split, ring attention)."""
    ep: int = 1
    """Expert-parallel degree, carved out of dp * cp * tp as Megatron does."""
    etp: int = 1
    """Expert tensor-parallel degree."""
    sp: bool = False
    """Sequence parallelism: TP all-reduces become reduce-scatter + all-gather."""
    vpp: int = 1
    """Virtual pipeline stages (model chunks) per device for the interleaved schedule."""
    micro_batch: int = 1
    """Sequences per micro-batch."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule: gpipe, 1f1b, interleaved (vpp > 1), zb-h1 (split backward) or
    dualpipe (bidirectional, each device holds two stages; even pp)."""
    recompute: Recompute = "none"
    """Activation recomputation."""
    recompute_layers: int | None = None
    """With full recompute, how many layers per stage recompute (None: all)."""
    recompute_modules: tuple[str, ...] = ()
    """With ``recompute = selective``: the submodules recomputed in backward, Megatron-Core's
    ``recompute_modules`` (``--recompute-modules``; megatron/core/transformer/transformer_config.py):
    core_attn, mla_up_proj, layernorm, mlp, moe, moe_act, shared_experts (``workloads.activations``
    says what each frees). Empty: Megatron's default, core_attn. Each costs the forward of the
    modules it recomputes ('moe' also repeats the layer's dispatch and combine)."""
    recompute_saved: tuple[str, ...] = ()
    """With ``recompute = full``: outputs each layer keeps so that backward does not compute them
    again (JAX ``jax.checkpoint_policies.save_only_these_names``; MaxText's ``remat_policy``). 'qkv_proj':
    the QKV projection's output (MaxText ``save_qkv_proj``: query_proj, key_proj, value_proj) stays on
    the device and the recompute skips the QKV GEMM. MHA/GQA/MQA layers only."""
    cpu_offloading_num_layers: int = 0
    """Layers whose activations go to host memory during forward and come back for backward
    (Megatron-Core ``cpu_offloading_num_layers``, ``--cpu-offloading-num-layers``; Transformer
    Engine's CPU offload context). Megatron-Core allows it only with pp = 1, without recompute and
    below num_layers (transformer_config.py ``__post_init__``); the copies run on the host link
    behind the next layer's compute, what they outlast it by is exposed."""
    activation_fp8_input_store: bool = False
    """Keep the SwiGLU activation's input (the fc1 output of dense MLPs, shared and routed experts) in
    FP8 for backward, cast back there (Megatron-Core ``activation_func_fp8_input_store``,
    ``--activation-func-fp8-input-store``: ``bias_swiglu_impl`` / ``weighted_bias_swiglu_impl`` save
    ``input.to(torch.float8_e4m3fn)``; DeepSeek-V3 report sec. 3.3.3 caches the same tensor in FP8).
    Memory only: the fused kernel writes the 1-byte copy in the pass that reads its input, and backward
    reads 1 byte instead of 2 (``workloads.activations``). Gated (SwiGLU) MLPs without a clamp only."""
    cross_entropy_fusion_impl: CrossEntropyImpl = "native"
    """Megatron-Core's ``cross_entropy_fusion_impl`` (with ``cross_entropy_loss_fusion``): ``native``
    (Megatron's own, fused or not) keeps the fp32 softmax of the logits for the backward; ``te``
    (Transformer Engine's ``parallel_cross_entropy``) keeps the logits in their dtype and forms the
    gradient in place, half the last stage's logits memory (``workloads.head_activation_bytes``)."""
    cuda_graph_scope: tuple[str, ...] = ()
    """Megatron-Core CUDA graphs (``--cuda-graph-impl`` / ``--cuda-graph-scope``): the parts of each
    layer replayed as one graph launch per pass (``CUDA_GRAPH_SCOPES``; ``step.graphs``): host
    launches only, so it matters where the host binds (a profile with ``host_launch_time``)."""
    zero: int = 0
    """ZeRO stage: 0 none, 1 optimizer (Megatron distributed optimizer), 2 +grads, 3 +params."""
    fsdp: Fsdp = "none"
    """FSDP sharding: full (ZeRO-3 over dp), hybrid (HSDP: shard within dp_shard, replicate)."""
    dp_shard: int | None = None
    """HSDP shard-group size (divides dp); None shards over all of dp."""
    overlap_grad_reduce: bool = True
    """Overlap the DP gradient reduction with the backward pass, bucket by bucket."""
    overlap_param_gather: bool = True
    """Overlap ZeRO/FSDP parameter all-gathers with compute (prefetch)."""
    param_gather_unit: ParamGatherUnit = "module"
    """What one ZeRO-3/FSDP parameter collective moves. ``module``: one flat buffer per wrapped unit
    (a layer; torch FSDP's FlatParameter, FSDP2 per block). ``tensor``: one all-gather per parameter
    tensor and one reduce-scatter per gradient, through PyTorch's list API (DeepSpeed ZeRO-3 of 2021,
    ``partition_parameters._allgather_param`` / ``_reduce_scatter_gradient``): each call pays its own
    latency, and ProcessGroupNCCL copies the flat buffer into (or the gradient out of) one view per
    rank, ``dp_shard`` copy ops per call (``step.lower_dp.tensor_copies_time``), issued by host loops over
    the ranks that a synchronised caller cannot hide (``step.host.list_api_time``)."""
    param_persistence_threshold: int = 0
    """With ``param_gather_unit = tensor``: parameter tensors of at most this many elements are kept
    whole on every rank and never gathered per step (DeepSpeed ``stage3_param_persistence_threshold``,
    default 1e5); 0 shards every tensor."""
    zero_quantized_weights: bool = False
    """ZeRO++ qwZ (DeepSpeed ``zero_optimization.zero_quantized_weights``; ZeRO-3 only): each rank
    quantises its weight shard to int8 in blocks before the all-gather and every rank dequantises
    the gathered layer after it, so a parameter gather moves 1 byte per element plus one fp32 scale
    per block (``step.zeropp``) instead of the weights' dtype."""
    zero_hpz_partition_size: int = 1
    """ZeRO++ hpZ (DeepSpeed ``zero_optimization.zero_hpz_partition_size``; 1 = off; ZeRO-3 only):
    after the forward gather each rank keeps a secondary copy of the weights sharded over groups of
    this many consecutive shard ranks (the DeepSpeed tutorial's ideal: the GPUs of a node), so the
    backward gathers run inside such a group; the copy costs weights x dtype / size per GPU."""
    zero_quantized_gradients: bool = False
    """ZeRO++ qgZ (DeepSpeed ``zero_optimization.zero_quantized_gradients``; ZeRO-3 only): the
    gradient reduce-scatter becomes an int4 all-to-all inside each node, a reduction, and a second
    int4 all-to-all across nodes of the node's share (``coalesced_collectives.all_to_all_quant_reduce``)."""
    bucket_size: float = 40e6 * 4
    """DP gradient bucket in bytes (Megatron default 40M fp32 grads)."""
    first_bucket_size: float = 0.0
    """Bytes at which the first DP gradient bucket closes, the gradients ready first in it alone
    (PyTorch DDP: 1 MiB, ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``, the rest in
    ``bucket_cap_mb`` buckets); 0: every bucket ``bucket_size`` (Megatron)."""
    grad_dtype_bytes: int = 4
    """Bytes per gradient element in the DP reduction (4: Megatron fp32 main grads)."""
    tp_comm_overlap: float = 0.0
    """An explicit override: the fraction of TP communication hidden behind GEMMs; 0 = none (or,
    with ``tp_overlap``, what the GEMMs hide)."""
    tp_overlap: bool = False
    """Transformer Engine's userbuffers overlap (Megatron-Core ``tp_comm_overlap``; needs ``sp``):
    each TP all-gather and reduce-scatter of a layer runs chunk by chunk beside the GEMM it feeds or
    drains, and what stays exposed comes from their times (``step.tp_overlap``)."""
    ep_comm_overlap: float | None = None
    """An explicit override: the fraction of the EP all-to-all hidden behind compute. None (the
    default) lets the schedule decide: DualPipe's paired forward and backward chunks hide each
    other's all-to-all on a communication stream in the engine (what is left shows as exposed);
    the other schedules expose it in full."""
    ep_overlap: bool = False
    """Megatron-Core ``overlap_moe_expert_parallel_comm`` (with 1F1B or interleaved): the steady
    state's forward and backward passes run paired, each one's EP all-to-all on a communication
    stream behind the other's compute (as DualPipe always does); the exposure comes out of the engine."""
    moe_dispatcher: MoeDispatcher = "alltoall"
    """How tokens reach their experts (``step.dispatch``): alltoall (Megatron-Core's default, a flat
    all-to-all of every token-expert pair), allgather (every EP rank gathers all tokens), deepep
    (DeepSeek's scale-out-then-NVLink forwarding, each token once per node, node-limited routing)."""
    moe_fused_grouped_mlp: bool = False
    """The routed experts run a fused grouped MLP (Transformer Engine's CuTeDSL grouped GEMM with the
    GLU activation and quantisation in its epilogue, token counts on the GPU): their GEMMs reach the
    dense GEMM curve at one expert's shape, so the profile's ``expert_efficiency`` (the unfused
    GroupedLinear path's rate) does not apply (``step.compute.expert_path``)."""
    expert_imbalance: float = 1.0
    """Tokens of the busiest expert rank / mean (>= 1): slows every MoE layer."""
    order: str = "tp-cp-ep-dp-pp"
    """Rank order, fastest-varying first (Megatron default)."""
    layer_split: tuple[int, ...] | None = None
    """Layers of each model chunk (pp * vpp numbers summing to the layers), e.g. fewer layers on
    the first and last stage to balance embedding and loss; None splits evenly."""
    pipeline_layout: str | None = None
    """Megatron-Core's ``pipeline_model_parallel_layout`` string (``plan.layout``), e.g.
    ``Et*4|(t*4|)*14tmL``: fixes ``layer_split`` (given both, they must agree)."""

    def __post_init__(self) -> None:
        if self.pipeline_layout is None:
            return
        split = layout_split(self.pipeline_layout)
        if self.layer_split is None:
            object.__setattr__(self, "layer_split", split)  # frozen: derived once, here
        elif tuple(self.layer_split) != split:
            raise PlanError(f"plan.layer_split = {list(self.layer_split)} and plan.pipeline_layout = "
                            f"{self.pipeline_layout!r} (layers {list(split)}) disagree; give one of them")

    @property
    def pairs_passes(self) -> bool:
        """The schedule, not an ``ep_comm_overlap`` override, hides the EP all-to-alls: each forward
        and backward run paired (``schedules.pairs_forward_backward``: DualPipe, or ``ep_overlap``)."""
        return self.ep_comm_overlap is None and pairs_forward_backward(self.schedule, self.ep_overlap)

    @property
    def paired_steady(self) -> bool:
        """``pairs_passes`` with 1F1B or interleaved 1F1B: every stage runs one more warm-up forward
        and then each steady forward and backward as one overlapped pair
        (``schedules.paired_program``), waiting for both inputs, as Megatron-Core's combined 1F1B
        does; DualPipe pairs by its own program."""
        return self.pairs_passes and self.schedule != "dualpipe"

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """The modules recomputed per layer: ``recompute_modules`` under selective recompute (core_attn
        when empty, Megatron-Core's default), none otherwise."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or ("core_attn",)

    @property
    def world_size(self) -> int:
        """GPUs the plan uses: dp * tp * pp * cp."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard_degree(self) -> int:
        """Ranks over which ZeRO/FSDP state is sharded: dp * cp (Megatron's data-parallel group
        with context parallelism), or dp_shard * cp under hybrid sharding."""
        if self.fsdp == "hybrid":
            return (self.dp_shard or self.dp) * self.cp
        return self.dp * self.cp

    @property
    def param_shard(self) -> int:
        """Sharding of the bf16 weights: shard degree with ZeRO-3/FSDP, else 1."""
        return self.shard_degree if (self.zero >= 3 or self.fsdp != "none") else 1

    @property
    def grad_shard(self) -> int:
        """Sharding of the gradients: shard degree with ZeRO-2+ or FSDP, else 1."""
        return self.shard_degree if (self.zero >= 2 or self.fsdp != "none") else 1

    @property
    def optimizer_shard(self) -> int:
        """Sharding of the optimizer state: shard degree with ZeRO-1+ or FSDP, else 1."""
        return self.shard_degree if (self.zero >= 1 or self.fsdp != "none") else 1

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: the ranks of one dense tp*cp*dp slice that hold the same
        experts, tp * cp * dp / (ep * etp) (Megatron-Core's expert mesh)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    def sharded_state(self, dense: float, expert: float, per_param: float = 1.0) -> float:
        """Optimizer state one device holds for ``dense`` and ``expert`` parameters, at
        ``per_param`` bytes each: the distributed optimizer shards dense state over the shard
        degree and expert state over the expert-dp group; unsharded, it holds all of it."""
        if self.optimizer_shard > 1:
            return dense * per_param / self.optimizer_shard + expert * per_param / self.expert_dp
        return dense * per_param + expert * per_param

    def describe(self) -> str:
        """A short label: ``tp8 pp16 dp128 mb1 1f1b``."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        parts += [f"{k}{getattr(self, k)}" for k in ("cp", "ep", "vpp") if getattr(self, k) > 1]
        parts += [f"mb{self.micro_batch}", self.schedule]
        if self.tp_overlap:
            parts.append("tp-overlap")
        if self.recompute != "none":
            parts.append(f"rc-{self.recompute}")
        if self.recompute_modules:
            parts.append("rc:" + "+".join(self.recompute_modules))
        if self.recompute_saved:
            parts.append("keep:" + "+".join(self.recompute_saved))
        if self.cpu_offloading_num_layers:
            parts.append(f"offload{self.cpu_offloading_num_layers}")
        if self.activation_fp8_input_store:
            parts.append("act-in-fp8")
        if self.cross_entropy_fusion_impl == "te":
            parts.append("ce-te")
        if self.cuda_graph_scope:
            parts.append("cg:" + "+".join(self.cuda_graph_scope))
        if self.fsdp != "none":
            parts.append(f"fsdp-{self.fsdp}")
        elif self.zero:
            parts.append(f"zero{self.zero}")
        if self.zero_quantized_weights:
            parts.append("qwZ")
        if self.zero_hpz_partition_size > 1:
            parts.append(f"hpZ{self.zero_hpz_partition_size}")
        if self.zero_quantized_gradients:
            parts.append("qgZ")
        return " ".join(parts)


def plan_from_mapping(data: dict[str, object]) -> ParallelPlan:
    """Build a plan from a mapping; an unknown key is an error naming it and the valid keys."""
    valid = {f.name for f in fields(ParallelPlan)}
    unknown = sorted(set(data) - valid)
    if unknown:
        raise PlanError(f"plan: unknown field(s) {unknown}; valid fields: {sorted(valid)}")
    for key in ("layer_split", "recompute_modules", "recompute_saved", "cuda_graph_scope"):
        value = data.get(key)
        if isinstance(value, list):
            data = {**data, key: tuple(value)}
    try:
        return ParallelPlan(**data)  # type: ignore[arg-type]  # plain data; __post_init__ checks each field
    except TypeError as exc:
        raise PlanError(f"plan: {exc}") from None


def num_microbatches(plan: ParallelPlan, training: TrainingSpec) -> int:
    """Micro-batches per pipeline per step: global batch / (dp * micro_batch)."""
    return training.global_batch_size // (plan.dp * plan.micro_batch)
