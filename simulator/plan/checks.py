"""Phase 0: does the plan divide this model, this batch and this cluster?

Owns ``check_plan``, which raises ``PlanError`` with the numbers for the first violated rule and
otherwise returns nothing. Each rule is one small function so a test can target it. It does not
check memory (``partition`` does, after the layers are placed).
"""

from __future__ import annotations

import math

from clustersim.simulator.errors import PlanError
from clustersim.simulator.plan.layout import layout_split
from clustersim.simulator.plan.plan import AXES, CUDA_GRAPH_SCOPES, RECOMPUTES, SCHEDULES, ParallelPlan
from clustersim.simulator.plan.schedules import num_model_chunks
from clustersim.topologies import Cluster
from clustersim.workloads import RECOMPUTE_MODULES, SAVED_OUTPUTS, ModelSpec, TrainingSpec


def check_plan(model: ModelSpec, training: TrainingSpec, cluster: Cluster, plan: ParallelPlan) -> None:
    """Raise ``PlanError`` naming the field, the numbers and the fix for the first bad rule."""
    _check_types(plan)
    _check_values(plan)
    _check_recompute(model, plan)
    _check_recompute_modules(model, plan)
    _check_recompute_saved(model, plan)
    _check_cuda_graphs(model, plan)
    _check_offloading(model, plan)
    _check_host_link(plan, cluster)
    _check_world(plan, cluster)
    _check_tp(model, plan)
    _check_pp(model, plan)
    _check_batch(training, plan)
    _check_cp(training, plan)
    _check_ep(model, plan)
    _check_sharding(plan)


INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch", "zero", "grad_dtype_bytes",
              "cpu_offloading_num_layers", "param_persistence_threshold", "zero_hpz_partition_size")
FLAG_FIELDS = ("sp", "overlap_grad_reduce", "overlap_param_gather", "ep_overlap", "moe_fused_grouped_mlp", "tp_overlap",
               "zero_quantized_weights", "zero_quantized_gradients")
REAL_FIELDS = ("bucket_size", "first_bucket_size", "tp_comm_overlap", "ep_comm_overlap", "expert_imbalance")
OPTIONAL_REAL_FIELDS = ("ep_comm_overlap",)
"""Real fields that may be None (None: decided by the mechanism, not the override)."""
BUCKET_RANGE = (2.0**20, 2.0**36)
"""Gradient bucket bytes accepted: 1 MiB .. 64 GiB (Megatron's default is 160 MB; a 1-byte bucket
would mean one collective per gradient element)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_types(plan: ParallelPlan) -> None:
    """Integers are ints (never bools, floats or strings), flags bools, reals finite numbers."""
    for name in INT_FIELDS + ("recompute_layers", "dp_shard"):
        value = getattr(plan, name)
        if not _is_int(value) and not (value is None and name in ("recompute_layers", "dp_shard")):
            raise PlanError(f"plan.{name} = {value!r} must be an integer")
    for name in FLAG_FIELDS:
        if not isinstance(getattr(plan, name), bool):
            raise PlanError(f"plan.{name} = {getattr(plan, name)!r} must be true or false")
    for name in REAL_FIELDS:
        value = getattr(plan, name)
        if value is None and name in OPTIONAL_REAL_FIELDS:
            continue
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            raise PlanError(f"plan.{name} = {value!r} must be a finite number")
    for name in ("schedule", "recompute", "fsdp", "order", "moe_dispatcher", "param_gather_unit"):
        if not isinstance(getattr(plan, name), str):
            raise PlanError(f"plan.{name} = {getattr(plan, name)!r} must be a string")
    split = plan.layer_split
    if split is not None and not (isinstance(split, (list, tuple)) and all(_is_int(x) for x in split)):
        raise PlanError(f"plan.layer_split = {split!r} must be a list of integers (layers per model chunk)")


def _check_recompute(model: ModelSpec, plan: ParallelPlan) -> None:
    layers = plan.recompute_layers
    if layers is not None and not 0 <= layers <= model.num_layers:
        raise PlanError(f"plan.recompute_layers = {layers} must lie in 0..num_layers = {model.num_layers} "
                        "(layers per stage that recompute; omit it for all)")


def _check_names(field: str, names: object, known: tuple[str, ...], what: str) -> None:
    """``plan.<field>``: a list of names from ``known``, each once."""
    if not (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)):
        raise PlanError(f"plan.{field} = {names!r} must be a list of {what} names from {list(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PlanError(f"plan.{field} = {list(names)}: unknown {unknown}; choose from {list(known)}")
    if len(set(names)) != len(names):
        raise PlanError(f"plan.{field} = {list(names)} names a {what} twice; list each once")


def _check_recompute_modules(model: ModelSpec, plan: ParallelPlan) -> None:
    """Megatron-Core's ``recompute_modules``: known names, once each, under selective recompute."""
    mods = plan.recompute_modules
    _check_names("recompute_modules", mods, tuple(RECOMPUTE_MODULES), "module")
    if mods and plan.recompute != "selective":
        raise PlanError(f"plan.recompute_modules = {list(mods)} needs plan.recompute = selective (got "
                        f"{plan.recompute!r}; Megatron-Core reads them only with recompute_granularity selective)")
    if not model.is_moe and {"moe", "moe_act", "shared_experts"} & set(mods):
        raise PlanError(f"plan.recompute_modules = {list(mods)}: {model.name} has no MoE layers; drop moe, "
                        "moe_act and shared_experts")
    if model.attention != "mla" and "mla_up_proj" in mods:
        raise PlanError(f"plan.recompute_modules = {list(mods)}: {model.name} has no MLA attention; drop mla_up_proj")


def _check_recompute_saved(model: ModelSpec, plan: ParallelPlan) -> None:
    """The outputs a full recompute keeps (``recompute_saved``): known names, once each, full
    recompute, a model whose layers have the projection named."""
    saved = plan.recompute_saved
    _check_names("recompute_saved", saved, tuple(SAVED_OUTPUTS), "output")
    if saved and plan.recompute != "full":
        raise PlanError(f"plan.recompute_saved = {list(saved)} needs plan.recompute = full (got {plan.recompute!r}): "
                        "it names what a full recompute keeps")
    if saved and (model.attention == "mla" or model.layer_pattern is not None):
        raise PlanError(f"plan.recompute_saved = {list(saved)}: {model.name} has no fused QKV projection in every "
                        "layer (MLA or a hybrid stack); drop it")


def _check_cuda_graphs(model: ModelSpec, plan: ParallelPlan) -> None:
    """Megatron-Core's rules for ``cuda_graph_scope`` (megatron/training/arguments.py help text):
    known scopes, once each; ``full_iteration`` alone; ``moe_preprocess`` with ``moe_router``; no
    capture across a dropless MoE layer's host sync (its token counts are read on the host:
    ``moe``, ``layer`` and ``full_iteration`` need drop-and-pad)."""
    scopes = plan.cuda_graph_scope
    _check_names("cuda_graph_scope", scopes, CUDA_GRAPH_SCOPES, "scope")
    if "full_iteration" in scopes and len(scopes) > 1:
        raise PlanError(f"plan.cuda_graph_scope = {list(scopes)}: full_iteration captures the whole step; list it alone")
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        raise PlanError(f"plan.cuda_graph_scope = {list(scopes)}: moe_preprocess must be used together with moe_router")
    dropless = model.is_moe and not (model.capacity_factor is not None and model.pad_to_capacity)
    across = [s for s in scopes if s in ("moe", "layer", "full_iteration")]
    if dropless and across:
        raise PlanError(f"plan.cuda_graph_scope = {list(scopes)}: {across[0]} captures {model.name}'s dropless MoE "
                        "layers, whose dispatcher reads token counts on the host; capture moe_router (and "
                        "moe_preprocess) instead, or run drop-and-pad (model.capacity_factor with pad_to_capacity)")


def _check_offloading(model: ModelSpec, plan: ParallelPlan) -> None:
    """Megatron-Core's own rules for ``cpu_offloading_num_layers`` (transformer_config.py)."""
    n = plan.cpu_offloading_num_layers
    if n == 0:
        return
    if not 0 < n < model.num_layers:
        raise PlanError(f"plan.cpu_offloading_num_layers = {n} must lie in 0..{model.num_layers - 1} "
                        f"(fewer than num_layers = {model.num_layers})")
    if plan.pp > 1:
        raise PlanError(f"plan.cpu_offloading_num_layers = {n} needs pp = 1 (got pp = {plan.pp}; "
                        "Megatron-Core has no CPU offloading with pipeline parallelism); set it to 0")
    if plan.recompute != "none":
        raise PlanError(f"plan.cpu_offloading_num_layers = {n} needs recompute = none (got {plan.recompute!r}; "
                        "Megatron-Core: CPU offloading does not work with activation recomputation)")


def _check_host_link(plan: ParallelPlan, cluster: Cluster) -> None:
    """Offloading activations needs a GPU-host link to copy them over (``host_bandwidth`` > 0)."""
    n = plan.cpu_offloading_num_layers
    bandwidth = cluster.accelerator.host_bandwidth
    if n and not bandwidth > 0:
        raise PlanError(f"plan.cpu_offloading_num_layers = {n} needs a host link, but accelerator "
                        f"{cluster.accelerator.name!r} has host_bandwidth = {bandwidth:g}; set the accelerator's "
                        "host_bandwidth (bytes/s per direction, e.g. 64e9 for PCIe 5.0 x16) or set "
                        "cpu_offloading_num_layers to 0")


def _check_values(plan: ParallelPlan) -> None:
    for name in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch"):
        if getattr(plan, name) < 1:
            raise PlanError(f"plan.{name} = {getattr(plan, name)} must be a positive integer")
    if plan.dp_shard is not None and plan.dp_shard < 1:
        raise PlanError(f"plan.dp_shard = {plan.dp_shard} must be >= 1 (ranks per shard group) or omitted")
    if plan.grad_dtype_bytes not in (2, 4):
        raise PlanError(f"plan.grad_dtype_bytes = {plan.grad_dtype_bytes} must be 2 (bf16 grads) or 4 (fp32 main grads)")
    names = plan.order.split("-")
    if len(set(names)) != len(names) or set(names) - {"ep"} != set(AXES) - {"ep"}:
        raise PlanError(f"plan.order = {plan.order!r} must name each of tp, cp, dp, pp once (ep optional), "
                        "e.g. tp-cp-ep-dp-pp")
    if plan.schedule not in SCHEDULES:
        raise PlanError(f"plan.schedule = {plan.schedule!r} is unknown; choose one of {list(SCHEDULES)}")
    if plan.recompute not in RECOMPUTES:
        raise PlanError(f"plan.recompute = {plan.recompute!r} is unknown; choose one of {list(RECOMPUTES)}")
    if plan.zero not in (0, 1, 2, 3):
        raise PlanError(f"plan.zero = {plan.zero} must be 0, 1, 2 or 3")
    if plan.cross_entropy_fusion_impl not in ("native", "te"):
        raise PlanError(f"plan.cross_entropy_fusion_impl = {plan.cross_entropy_fusion_impl!r} is unknown; choose native "
                        "(Megatron's: fp32 softmax kept) or te (Transformer Engine's: logits kept in their dtype)")
    if plan.moe_dispatcher not in ("alltoall", "allgather", "deepep"):
        raise PlanError(f"plan.moe_dispatcher = {plan.moe_dispatcher!r} is unknown; choose alltoall, allgather or deepep")
    if plan.fsdp not in ("none", "full", "hybrid"):
        raise PlanError(f"plan.fsdp = {plan.fsdp!r} must be none, full or hybrid")
    if not 0.0 <= plan.tp_comm_overlap <= 1.0 or not 0.0 <= (plan.ep_comm_overlap or 0.0) <= 1.0:
        raise PlanError("plan.tp_comm_overlap and plan.ep_comm_overlap must lie in [0, 1]")
    if plan.tp_overlap and plan.tp > 1 and not plan.sp:
        raise PlanError("plan.tp_overlap = true needs plan.sp = true (Transformer Engine's userbuffers overlap "
                        "runs the sequence-parallel all-gathers and reduce-scatters); set plan.sp: true or "
                        "plan.tp_overlap: false")
    if plan.expert_imbalance < 1.0:
        raise PlanError(f"plan.expert_imbalance = {plan.expert_imbalance} must be >= 1 (busiest/mean)")
    if not BUCKET_RANGE[0] <= plan.bucket_size <= BUCKET_RANGE[1]:
        raise PlanError(f"plan.bucket_size = {plan.bucket_size:g} bytes must lie in [{BUCKET_RANGE[0]:.0f}, "
                        f"{BUCKET_RANGE[1]:.0f}] (1 MiB .. 64 GiB)")
    if not 0.0 <= plan.first_bucket_size <= plan.bucket_size:
        raise PlanError(f"plan.first_bucket_size = {plan.first_bucket_size:g} bytes must lie in [0, plan.bucket_size "
                        f"{plan.bucket_size:g}] (0: no separate first bucket; PyTorch DDP uses 1 MiB)")


def _check_world(plan: ParallelPlan, cluster: Cluster) -> None:
    if plan.world_size != cluster.num_gpus:
        raise PlanError(
            f"dp({plan.dp}) * tp({plan.tp}) * pp({plan.pp}) * cp({plan.cp}) = {plan.world_size} "
            f"!= cluster GPUs {cluster.num_gpus}; set plan.dp = {_suggest_dp(plan, cluster)}"
        )


def _suggest_dp(plan: ParallelPlan, cluster: Cluster) -> str:
    rest = plan.tp * plan.pp * plan.cp
    if cluster.num_gpus % rest:
        return f"(none fits: tp*pp*cp = {rest} does not divide {cluster.num_gpus})"
    return str(cluster.num_gpus // rest)


def _check_tp(model: ModelSpec, plan: ParallelPlan) -> None:
    if model.num_heads % plan.tp:
        raise PlanError(f"plan.tp = {plan.tp} does not divide num_heads = {model.num_heads}; pick a divisor")
    kv = model.num_kv_heads
    if kv % plan.tp and plan.tp % kv:
        raise PlanError(f"plan.tp = {plan.tp} and num_kv_heads = {kv}: one must divide the other")
    if model.ffn_hidden_size % plan.tp:
        raise PlanError(f"plan.tp = {plan.tp} does not divide ffn_hidden_size = {model.ffn_hidden_size}")
    for field, value in tp_split_sizes(model):
        if value % plan.tp:
            raise PlanError(f"plan.tp = {plan.tp} does not divide {field} = {value} (Megatron-Core shards it over "
                            "tensor parallelism); pick a divisor")


def tp_split_sizes(model: ModelSpec) -> tuple[tuple[str, int], ...]:
    """The sizes besides heads and FFN that tensor parallelism shards: a Mamba-2 layer's heads and B/C
    groups (Megatron-Core MambaMixer splits both over tp), the shared experts' width."""
    out: list[tuple[str, int]] = []
    if "M" in (model.layer_pattern or "") + (model.mtp_layer_pattern or ""):
        out += [("mamba_num_heads", model.mamba_num_heads), ("mamba_num_groups", model.mamba_num_groups)]
    if model.is_moe and model.num_shared_experts:
        out.append(("shared expert width", model.num_shared_experts * model.shared_ffn))
    return tuple(out)


def _check_pp(model: ModelSpec, plan: ParallelPlan) -> None:
    chunks = num_model_chunks(plan.schedule, plan.pp, plan.vpp)
    if chunks > model.num_layers + 2 or (chunks > model.num_layers and plan.layer_split is None):
        raise PlanError(f"pp({plan.pp}) * vpp({plan.vpp}) = {chunks} > num_layers = {model.num_layers}"
                        + ("" if plan.layer_split is None else " + 2 (embedding- and loss-only chunks)"))
    if plan.vpp > 1 and plan.schedule not in ("interleaved",):
        raise PlanError(f"plan.vpp = {plan.vpp} needs plan.schedule = interleaved (got {plan.schedule})")
    if plan.schedule == "interleaved" and plan.vpp < 2:
        raise PlanError("plan.schedule = interleaved needs plan.vpp >= 2 model chunks per stage")
    if plan.pipeline_layout is not None:
        layout_split(plan.pipeline_layout, chunks=chunks, mtp_layers=model.mtp_layers, num_layers=model.num_layers)
    if plan.layer_split is not None:
        split = list(plan.layer_split)
        if len(split) != chunks or sum(split) != model.num_layers or min(split) < 0 or min(split[1:-1] or [1]) < 1:
            raise PlanError(
                f"plan.layer_split = {split}: needs pp*vpp = {chunks} positive numbers summing to "
                f"num_layers = {model.num_layers}, the first and last may be 0 (an embedding- or loss-only "
                f"chunk) (got {len(split)} numbers summing to {sum(split)})"
            )
    if plan.schedule == "dualpipe" and plan.pp % 2:
        raise PlanError(f"plan.schedule = dualpipe needs an even pp, got pp = {plan.pp}")
    if plan.ep_overlap and plan.schedule == "1f1b" and plan.pp > 1:
        # Megatron-Core TransformerConfig: "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size
        # must be specified when pipeline_model_parallel_size > 1" (its combined 1F1B needs the chunks)
        raise PlanError(f"plan.ep_overlap = true with schedule = 1f1b and pp = {plan.pp}: a paired steady state "
                        "needs pp = 1 or schedule = interleaved with vpp >= 2 (Megatron-Core's combined 1F1B); "
                        "set one of them, or ep_overlap = false")


def _check_batch(training: TrainingSpec, plan: ParallelPlan) -> None:
    per_step = plan.dp * plan.micro_batch
    if training.global_batch_size % per_step:
        raise PlanError(
            f"global_batch_size {training.global_batch_size} is not a multiple of dp({plan.dp}) * "
            f"micro_batch({plan.micro_batch}) = {per_step}; change the batch or plan.micro_batch"
        )
    m = training.global_batch_size // per_step
    if plan.schedule == "interleaved" and m % plan.pp:
        raise PlanError(f"interleaved schedule needs micro-batches ({m}) to be a multiple of pp ({plan.pp})")
    if plan.schedule == "dualpipe" and (m < 2 * plan.pp or m % 2):
        raise PlanError(f"dualpipe needs an even number of micro-batches >= 2*pp = {2 * plan.pp}, got {m}")


def _check_cp(training: TrainingSpec, plan: ParallelPlan) -> None:
    if plan.cp > 1 and training.seq_len % (2 * plan.cp):
        raise PlanError(
            f"seq_len {training.seq_len} is not divisible by 2*cp = {2 * plan.cp} "
            "(load-balanced causal chunks); change plan.cp"
        )


def _check_ep(model: ModelSpec, plan: ParallelPlan) -> None:
    if plan.ep == 1 and plan.etp == 1:
        return
    if not model.is_moe:
        raise PlanError(f"plan.ep = {plan.ep} / etp = {plan.etp} but {model.name} has no experts; set ep = 1")
    if model.num_experts % plan.ep:
        raise PlanError(f"plan.ep = {plan.ep} does not divide num_experts = {model.num_experts}")
    dense = plan.tp * plan.cp * plan.dp
    if dense % (plan.ep * plan.etp):
        raise PlanError(
            f"ep({plan.ep}) * etp({plan.etp}) = {plan.ep * plan.etp} must divide "
            f"tp({plan.tp}) * cp({plan.cp}) * dp({plan.dp}) = {dense} (EP is carved out of them)"
        )
    if model.moe_ffn_hidden_size and model.moe_ffn_hidden_size % plan.etp:
        raise PlanError(f"plan.etp = {plan.etp} does not divide moe_ffn_hidden_size = {model.moe_ffn_hidden_size}")
    if plan.pp > 1 and not plan.order.endswith("pp") and plan.expert_dp != plan.dp:
        # Megatron-Core parallel_state.py: the expert mesh reuses the order, so its pipeline groups
        # match the dense ones only with pp last (or edp == dp)
        raise PlanError(f"plan.order = {plan.order!r} with pp = {plan.pp} and expert dp {plan.expert_dp} != dp "
                        f"{plan.dp}: put pp last (e.g. tp-cp-ep-dp-pp), as Megatron-Core requires")


def _check_sharding(plan: ParallelPlan) -> None:
    if plan.fsdp == "hybrid":
        shard = plan.dp_shard or plan.dp
        if plan.dp % shard:
            raise PlanError(f"plan.dp_shard = {shard} must divide dp = {plan.dp} for hybrid sharding")
    elif plan.dp_shard is not None:
        raise PlanError("plan.dp_shard is only used with plan.fsdp = hybrid; remove it or set fsdp")
    if plan.param_gather_unit not in ("module", "tensor"):
        raise PlanError(f"plan.param_gather_unit = {plan.param_gather_unit!r}: use module (one flat buffer per "
                        "layer, torch FSDP) or tensor (one collective per parameter tensor, DeepSpeed ZeRO-3)")
    if plan.param_persistence_threshold < 0:
        raise PlanError(f"plan.param_persistence_threshold = {plan.param_persistence_threshold} must be >= 0 "
                        "(elements; 0 shards every tensor)")
    if plan.fsdp != "none" and plan.zero not in (0, 3):
        raise PlanError(f"plan.fsdp = {plan.fsdp} already shards like ZeRO-3; drop plan.zero = {plan.zero}")
    _check_zeropp(plan)


def _check_zeropp(plan: ParallelPlan) -> None:
    """ZeRO++ extends DeepSpeed ZeRO-3: its three switches need zero = 3 and no FSDP; hpZ's group
    divides the shard group."""
    on = [name for name, value in (("zero_quantized_weights", plan.zero_quantized_weights),
                                   ("zero_hpz_partition_size", plan.zero_hpz_partition_size > 1),
                                   ("zero_quantized_gradients", plan.zero_quantized_gradients)) if value]
    if on and (plan.zero != 3 or plan.fsdp != "none"):
        raise PlanError(f"plan.{on[0]} is ZeRO++, which extends DeepSpeed ZeRO-3: set plan.zero = 3 and plan.fsdp = "
                        f"none (now zero = {plan.zero}, fsdp = {plan.fsdp}), or turn it off")
    hpz = plan.zero_hpz_partition_size
    if hpz < 1 or plan.shard_degree % hpz:
        raise PlanError(f"plan.zero_hpz_partition_size = {hpz} must be >= 1 and divide the shard group dp x cp = "
                        f"{plan.shard_degree} (the DeepSpeed tutorial's choice: the GPUs of one node)")
