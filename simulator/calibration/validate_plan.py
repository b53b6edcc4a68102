"""Inference rules of the validation, the parallel plan: how a published row's printed degrees,
batch, sharding, recompute, recipe and release become a ``ParallelPlan``.

Owns the degrees (tp, pp, cp, ep and Megatron's dp = GPUs / (tp x pp x cp)), the batch consistency
rule, the sharding (ZeRO, FSDP, HSDP, DeepSpeed ZeRO-3 as its 2021 code runs it), the gradient
bytes, the recipe's recompute, activation CPU offloading and pipeline layer split, the micro-batch and interleaving
candidates a row is tuned over, the attention kernel of the row's era, the MoE communication
settings of its recipe and release, and ``plan_for_row``. Each rule that fills a field appends a
sentence to ``notes``; the cells and the model are ``validate_rules``'.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from clustersim.simulator.calibration.recipe_moe import (
    recipe_fused_grouped_mlp, recipe_moe_comm, recipe_release_a2a_overlap,
)
from clustersim.simulator.calibration.recipe_layout import recipe_layout
from clustersim.simulator.calibration.recipe_plans import (
    RecipeRecompute, recipe_cpu_offloading, recipe_grad_dtype, recipe_recompute_entry, recipe_remat, recipe_split,
)
from clustersim.simulator.calibration.spellings import UnknownSpelling, precision_label, sharding
from clustersim.simulator.calibration.validate_rules import SkipRow, framework_is_mcore, num, text
from clustersim.simulator.plan import ParallelPlan, Recompute, layout_split
from clustersim.topologies import Cluster
from clustersim.workloads import ModelSpec, TrainingSpec
from clustersim.workloads.training import AttentionKernel


BF16_GRAD_FRAMEWORKS: tuple[str, ...] = ("megatron-bridge",)
"""Framework strings (lower case) whose published performance recipes reduce and keep gradients in
bf16: Megatron-Bridge `scripts/performance/configs/*/*_llm_pretrain.py` set
`cfg.ddp.grad_reduce_in_fp32 = False` and `cfg.mixed_precision.grad_reduce_in_fp32 = False` for every
recipe (e.g. `set_llama3_common_configs`, `set_deepseek_v3_common_configs`), so Megatron-Core's grad
buffer is bf16 (2 bytes per element) instead of the fp32 main_grad buffer (4)."""

DEEPSPEED_ZERO3: dict[str, Any] = {
    "param_gather_unit": "tensor", "param_persistence_threshold": 100_000, "overlap_param_gather": False,
    "grad_dtype_bytes": 2,
}
"""DeepSpeed ZeRO-3 (framework string containing "deepspeed", stage 3) as its 2021 code runs it:
``Init._allgather_param`` all-gathers each parameter tensor on its own with
``torch.distributed.all_gather`` into world-size views of one flat buffer, after a
``torch.cuda.synchronize()`` (the host waits for the queued compute, so a gather cannot run ahead of
it: no overlap), and ``_reduce_scatter_gradient`` reduce-scatters each gradient (its dtype, fp16/bf16)
from world-size views (deepspeed/runtime/zero/partition_parameters.py, 2021, read via find_string id
2323018133); tensors of at most ``stage3_param_persistence_threshold`` = 100000 elements persist
(microsoft/DeepSpeed deepspeed/runtime/zero/constants.py @ 02a63e43,
ZERO_OPTIMIZATION_PARAM_PERSISTENCE_THRESHOLD_DEFAULT)."""

TP_COMM_OVERLAP: float = 0.5
"""Fraction of TP communication hidden by TE userbuffer overlap in Megatron-Core runs (H100 and
later): TE tp-comm-overlap pipelines the all-gather/reduce-scatter with the GEMM in chunks, so part
stays exposed (first/last chunk, contention). An assumption, not fitted; one value for all rows.
Measured against the mechanism (``plan.tp_overlap``: each gather and scatter beside its GEMM, the
exposure from their times, ``step.tp_overlap``) in December's eighteenth stop: with it on these rows
the cross-validation by family was 8.59 % out of sample against 8.15 % with this fraction, and the
DGX Cloud rows (none fitted) 13.24 % against 12.45 %, so the fraction stays the rows' default
(docs/VALIDATION.md, "TP overlap from the GEMMs")."""


def _degree(row: Mapping[str, Any], key: str) -> int | None:
    v = num(row, key)
    return int(v) if v is not None else None


def _dp(num_gpus: int, tp: int, pp: int, cp: int) -> int:
    """Megatron's data-parallel degree: GPUs / (tp x pp x cp), EP carved out of it."""
    return num_gpus // (tp * pp * cp)


def batch_consistent(row: Mapping[str, Any], notes: list[str]) -> Mapping[str, Any]:
    """The row, its printed ``micro_batch`` treated as not published when the printed global batch,
    micro-batch and gradient accumulation break GBS = DP x MBS x GA.

    Megatron-Core runs GBS // (MBS x DP) micro-batches per step (NVIDIA/Megatron-LM
    megatron/core/num_microbatches_calculator.py, ``ConstantNumMicroBatchesCalculator``: it asserts
    the division is exact), as every DP framework does; DP = num_gpus / (tp x pp x cp) (EP is carved
    out of it). Where the three printed values break the identity one of them is a misprint the row
    cannot say which of; the global batch is tied to the published throughput (step time = GBS x seq
    / tokens per second), so the micro-batch is the value let go: it is tuned like any unpublished
    micro-batch (``tuning_candidates``) and the recipe rules stop comparing it. Rows without all of
    tp, pp, micro_batch, grad_accum and global_batch_seqs printed are returned as they are."""
    printed = [_degree(row, k) for k in ("micro_batch", "grad_accum", "global_batch_seqs", "tp", "pp", "num_gpus")]
    if any(v is None or v <= 0 for v in printed):
        return row
    mb, ga, gbs, tp, pp, n = (int(v or 0) for v in printed)
    dp = _degree(row, "dp") or _dp(n, tp, pp, _degree(row, "cp") or 1)
    if dp * mb * ga == gbs:
        return row
    notes.append(f"micro_batch {mb} not used: dp {dp} x micro_batch {mb} x grad_accum {ga} = {dp * mb * ga} "
                 f"!= global batch {gbs} sequences (GBS = DP x MBS x GA; one printed value is a misprint)")
    return {**row, "micro_batch": None}


def _model_parallel(row: Mapping[str, Any], cluster: Cluster, notes: list[str]) -> tuple[int, int]:
    """(tp, pp): printed, or from the model-parallel size N/dp as TP = min(mp, GPUs per node)."""
    tp, pp = _degree(row, "tp"), _degree(row, "pp")
    if tp is not None and pp is not None:
        return tp, pp
    n, dp, cp = cluster.num_gpus, _degree(row, "dp"), _degree(row, "cp") or 1
    if tp is None and pp is None:
        if dp is None:
            raise SkipRow("parallel degrees (tp, pp, dp) not published")
        mp = n // (dp * cp)
        tp = min(mp, cluster.gpus_per_node)
        notes.append(f"tp, pp: model-parallel size {mp} split as TP = min(mp, {cluster.gpus_per_node}), PP = mp/TP")
        return tp, max(mp // tp, 1)
    notes.append("missing tp or pp = 1")
    return tp or 1, pp or 1


def _sharding(row: Mapping[str, Any], cluster: Cluster, recipe: tuple[str, tuple[int, int, int, int, int]],
              cp: int, notes: list[str]) -> dict[str, Any]:
    """zero / fsdp / gradient dtype from ``zero_fsdp`` (``spellings.SHARDING_SPELLINGS``), ``precision``
    and the framework recipe of ``recipe`` = (model preset name, (tp, pp, vpp, ep, micro_batch))."""
    z = text(row, "zero_fsdp")
    tp = recipe[1][0]
    grad = _grad_bytes(row, recipe, notes)
    if not z:
        if framework_is_mcore(row):
            notes.append("zero_fsdp: distributed optimizer (Megatron-Core/NeMo default)")
            return {"zero": 1, "grad_dtype_bytes": grad}
        return {"zero": 0, "grad_dtype_bytes": grad}
    try:
        sh = sharding(z)
    except UnknownSpelling as exc:
        raise SkipRow(str(exc)) from None
    if sh.fsdp == "hybrid":  # FSDP1 HYBRID_SHARD: shard inside a node, replicate across nodes
        shard = max(cluster.gpus_per_node // (tp * cp), 1)
        notes.append(f"HSDP: shard group = GPUs per node / (tp*cp) = {shard}")
        return {"fsdp": "hybrid", "dp_shard": shard, "zero": 0, "grad_dtype_bytes": grad}
    if sh.fsdp == "full":
        return {"fsdp": "full", "zero": 0, "grad_dtype_bytes": grad}
    if sh.zeropp:
        return _zeropp(cluster, tp * cp, cluster.num_gpus // (tp * max(recipe[1][1], 1)), notes)
    if sh.zero == 3 and "deepspeed" in text(row, "framework").lower():
        notes.append("DeepSpeed ZeRO-3: one all-gather / reduce-scatter per parameter tensor above 1e5 elements "
                     "(list API), host-synchronised before each gather (no prefetch overlap), fp16/bf16 gradients")
        return {"zero": 3, **DEEPSPEED_ZERO3}
    if sh.zero == 2:
        return {"zero": 2, "grad_dtype_bytes": grad}
    return {"zero": sh.zero, "grad_dtype_bytes": grad}


ZEROPP_PLAN: dict[str, Any] = {"zero": 3, "zero_quantized_weights": True, "zero_quantized_gradients": True,
                               "grad_dtype_bytes": 2}
"""A row spelled ZeRO++: DeepSpeed ZeRO-3 with qwZ and qgZ on (``spellings.Sharding.zeropp``), fp16/bf16
gradients as DeepSpeed reduces them; one coalesced gather per module, prefetched (DeepSpeed's ZeRO-3
since 2023, which ZeRO++ needs: not the 2021 list API of ``DEEPSPEED_ZERO3``)."""


def _zeropp(cluster: Cluster, tp_cp: int, shard: int, notes: list[str]) -> dict[str, Any]:
    """ZeRO++'s plan fields with hpZ over a node's ranks (GPUs per node / (tp x cp), at most the
    ``shard`` group of dp x cp ranks, which it divides)."""
    hpz = math.gcd(max(cluster.gpus_per_node // tp_cp, 1), max(shard, 1))
    notes.append(f"ZeRO++: ZeRO-3 with qwZ, qgZ and hpZ over {hpz} ranks (GPUs per node / (tp*cp), DeepSpeed's "
                 "zeropp tutorial), bf16/fp16 gradients")
    return {**ZEROPP_PLAN, "zero_hpz_partition_size": hpz}


def _grad_bytes(row: Mapping[str, Any], recipe: tuple[str, tuple[int, int, int, int, int]], notes: list[str]) -> int:
    """Bytes per gradient element: 2 for Composer's PURE mixed precision (bf16 reduce), for the
    ``BF16_GRAD_FRAMEWORKS`` recipes and for a ``recipe_plans.RECIPE_GRAD_DTYPE`` recipe of the row's
    model and degrees, else 4 (fp32 main grads, Megatron's and FSDP's default)."""
    if "pure" in text(row, "precision").lower():
        return 2
    fw = recipe_framework(row)
    if any(k in text(row, "framework").lower() for k in BF16_GRAD_FRAMEWORKS):
        notes.append("gradients bf16 (Megatron-Bridge performance recipes: grad_reduce_in_fp32 = False)")
        return 2
    tp, pp, vpp, _, mb = recipe[1]
    entry = recipe_grad_dtype(framework=fw, model=recipe[0], degrees=(tp, pp, vpp, mb))
    if entry is not None:
        notes.append(f"gradients {entry.grad_dtype_bytes * 8}-bit (framework recipe {entry.locator})")
        return entry.grad_dtype_bytes
    return 4


TUNED_MICRO_BATCHES: tuple[int, ...] = (1, 2, 4, 8)
"""Micro-batch sizes tried for a row that does not publish its micro-batch."""


def recipe_precision(row: Mapping[str, Any]) -> str | None:
    """The row's precision label as the recipe tables key it (``bf16`` when none is printed), or
    None for a spelling the normaliser does not know (no recipe entry can match it)."""
    try:
        return precision_label(text(row, "precision")) if text(row, "precision") else "bf16"
    except UnknownSpelling:
        return None


def recipe_recompute(row: Mapping[str, Any], model: ModelSpec, degrees: tuple[int, int, int, int, int],
                     printed: tuple[bool, bool]) -> RecipeRecompute | None:
    """The row's ``recipe_plans.RECIPE_RECOMPUTE`` entry (framework, model, GPU, precision and degrees;
    ``printed``: whether the row prints its vpp and its micro-batch), or None."""
    label = recipe_precision(row)
    if label is None:
        return None
    return recipe_recompute_entry(framework=recipe_framework(row), model=model.name, gpu=text(row, "gpu_type"),
                                  precision=label, degrees=degrees, printed=printed)


def recipe_framework(row: Mapping[str, Any]) -> str:
    """What the recipe tables match a row's framework recipe on: its ``framework`` and, after a
    semicolon, its ``source_date`` (where a publisher prints its recipe generation and container label,
    e.g. 'GSW recipes; table label 24.11')."""
    return f"{text(row, 'framework')}; {text(row, 'source_date')}".lower()


def optimizer_state_bytes(row: Mapping[str, Any], model: ModelSpec, plan: ParallelPlan, notes: list[str]) -> int | None:
    """Bytes per element of the optimizer's parameter shard and moments where the row's
    ``recipe_plans.RECIPE_GRAD_DTYPE`` recipe sets them (Apex DistributedFusedAdam ``dtype``), else
    None (fp32, ``TrainingSpec``'s default)."""
    entry = recipe_grad_dtype(framework=recipe_framework(row), model=model.name,
                              degrees=(plan.tp, plan.pp, plan.vpp, plan.micro_batch))
    if entry is None or entry.optimizer_dtype_bytes is None:
        return None
    notes.append(f"optimizer state {entry.optimizer_dtype_bytes * 8}-bit (parameter shard and moments; "
                 f"framework recipe {entry.locator})")
    return entry.optimizer_dtype_bytes


def recipe_layer_split(row: Mapping[str, Any], model: ModelSpec, pp: int, vpp: int,
                       notes: list[str] | None = None) -> tuple[int, ...] | None:
    """``plan.layer_split`` of the row's framework recipe at pp x vpp: its pipeline layout
    (``recipe_layout.RECIPE_PIPELINE_LAYOUT``), else its embedding/loss accounting
    (``recipe_plans.RECIPE_PIPELINE_SPLIT``), else None."""
    layout = recipe_layout(framework=text(row, "framework"), model=model.name, gpu=text(row, "gpu_type"),
                           pp=pp, vpp=vpp, mtp_layers=model.mtp_layers, notes=notes)
    if layout is not None:
        return layout_split(layout, chunks=pp * vpp, mtp_layers=model.mtp_layers)
    return recipe_split(framework=text(row, "framework"), model=model.name, num_layers=model.num_layers,
                        pp=pp, vpp=vpp, notes=notes)


def interleaving_available(row: Mapping[str, Any]) -> bool:
    """The run's framework has the interleaved 1F1B schedule: Megatron-LM PTD-P (SC'21) and later."""
    fw = text(row, "framework").lower()
    return "pre-interleaving" not in fw and (framework_is_mcore(row) or "megatron" in fw)


def tuning_candidates(row: Mapping[str, Any], model: ModelSpec, training: TrainingSpec,
                      plan: ParallelPlan) -> list[ParallelPlan]:
    """Plans over the schedule knobs a row leaves unpublished (micro-batch; VPP when pp > 1).

    A published benchmark ran a configuration chosen for throughput, so an unpublished knob takes
    the value its framework's users would tune it to: ``clustersim.simulator.calibration.validate`` simulates every
    candidate and keeps the fastest that fits in memory. A row that publishes both knobs has one
    candidate, its own plan. Candidates the plan rules would reject are left out.
    """
    mbs = (plan.micro_batch,) if _degree(row, "micro_batch") is not None else TUNED_MICRO_BATCHES
    tune_vpp = _degree(row, "vpp") is None and plan.pp > 1 and interleaving_available(row)
    layers = model.num_layers
    vpps = [1] + [v for v in range(2, layers // plan.pp + 1) if layers % (plan.pp * v) == 0] if tune_vpp \
        else [plan.vpp]
    per_replica = training.global_batch_size // plan.dp
    out = []
    for mb in mbs:
        if per_replica % mb:
            continue
        for v in vpps:
            if v > 1 and (per_replica // mb) % plan.pp:
                continue
            out.append(dataclasses.replace(plan, micro_batch=mb, vpp=v,
                                           schedule="interleaved" if v > 1 else "1f1b",
                                           layer_split=recipe_layer_split(row, model, plan.pp, v)))
    return out or [plan]


FLASH_ATTENTION_YEAR = 2022
"""FlashAttention (Dao et al., May 2022) is the first fused attention kernel frameworks adopted."""
HOPPER_ATTENTION_YEAR = 2024
"""Fused attention tuned for Hopper (cuDNN 9 fused attention in Transformer Engine, early 2024;
FlashAttention-3, July 2024); runs published before used FlashAttention 1/2 or Triton kernels."""


def attention_kernel(row: Mapping[str, Any], notes: list[str]) -> AttentionKernel:
    """The attention kernel of the run's era, from the year of ``source_date`` (none: current)."""
    year = text(row, "source_date")[:4]
    if not year.isdigit() or int(year) >= HOPPER_ATTENTION_YEAR:
        return "flash3"
    if int(year) < FLASH_ATTENTION_YEAR:
        notes.append(f"attention unfused: published {year}, before fused attention kernels ({FLASH_ATTENTION_YEAR})")
        return "unfused"
    notes.append(f"attention kernel flash2: published {year}, before Hopper-tuned fused attention ({HOPPER_ATTENTION_YEAR})")
    return "flash2"


def _recompute_settings(row: Mapping[str, Any], model: ModelSpec, degrees: tuple[int, int, int, int, int],
                        notes: list[str]) -> dict[str, Any]:
    """``recompute`` (and ``recompute_modules`` or ``recompute_saved``): printed, else the framework
    recipe's (``recipe_plans.RECIPE_RECOMPUTE``, ``RECIPE_REMAT``), else the era's rule (``_recompute``)."""
    if not text(row, "recompute"):
        printed = (_degree(row, "vpp") is not None, _degree(row, "micro_batch") is not None)
        entry = recipe_recompute(row, model, degrees, printed)
        if entry is not None:
            notes.append(f"recompute_modules = {list(entry.modules)} (not printed; framework recipe {entry.locator})")
            if entry.modules:
                return {"recompute": "selective", "recompute_modules": entry.modules}
            return {"recompute": "none"}
        remat = recipe_remat(framework=recipe_framework(row), model=model.name)
        if remat is not None:
            notes.append(f"recompute: full keeping {list(remat.recompute_saved)} (remat_policy {remat.policy}, not "
                         f"printed; framework recipe {remat.locator})")
            return {"recompute": "full", "recompute_saved": remat.recompute_saved}
    return {"recompute": _recompute(row, notes)}


def _moe_comm_settings(row: Mapping[str, Any], model: ModelSpec, degrees: tuple[int, int, int, int, int],
                       global_batch: int, notes: list[str]) -> dict[str, Any]:
    """``moe_dispatcher`` and ``ep_overlap`` of the row's framework recipe
    (``recipe_moe.RECIPE_MOE_COMM``), else the plan's defaults (alltoall, no overlap); and
    ``moe_fused_grouped_mlp`` where the recipe of the row's release runs the fused grouped MLP
    (``recipe_moe.RECIPE_FUSED_GROUPED_MLP``), with ``ep_overlap`` where that recipe change sets
    ``moe_a2a_overlap`` too (``recipe_moe.recipe_release_a2a_overlap``)."""
    if not model.is_moe or degrees[3] <= 1:
        return {}
    label = recipe_precision(row)
    if label is None:
        return {}
    choice = recipe_moe_comm(
        framework=text(row, "framework").lower(), model=model.name, gpu=text(row, "gpu_type").upper(),
        precision=label, degrees=degrees, global_batch=global_batch,
        printed=(_degree(row, "vpp") is not None, _degree(row, "micro_batch") is not None))
    notes.extend(choice.notes)
    out: dict[str, Any] = {}
    fused, fused_notes = recipe_fused_grouped_mlp(framework=text(row, "framework"), model=model.name,
                                                  gpu=text(row, "gpu_type").upper(), precision=label)
    if fused:
        out["moe_fused_grouped_mlp"] = True
        notes.extend(fused_notes)
    if choice.moe_dispatcher is not None:
        out["moe_dispatcher"] = choice.moe_dispatcher
    if choice.ep_overlap is not None:
        out["ep_overlap"] = choice.ep_overlap
    overlap, overlap_notes = recipe_release_a2a_overlap(framework=text(row, "framework"), model=model.name,
                                                        gpu=text(row, "gpu_type").upper(), precision=label)
    if overlap:
        out["ep_overlap"] = True
        notes.extend(overlap_notes)
    return out


def _offload_settings(row: Mapping[str, Any], model: ModelSpec, degrees: tuple[int, int, int, int, int],
                      settings: tuple[str, str], notes: list[str]) -> dict[str, Any]:
    """``cpu_offloading_num_layers``: printed (a ``cpu_offloading_num_layers`` cell), else that of the
    row's framework recipe (``recipe_plans.RECIPE_CPU_OFFLOADING``) when ``settings`` = (the plan's
    fsdp, its recompute) are the recipe's (Megatron-FSDP; no recompute, which Megatron-Core requires
    with offloading), else none."""
    printed = num(row, "cpu_offloading_num_layers")
    if printed is not None:
        return {"cpu_offloading_num_layers": int(printed)}
    if settings != ("full", "none"):
        return {}
    label = recipe_precision(row)
    if label is None:
        return {}
    tp, pp, _, _, mb = degrees
    entry = recipe_cpu_offloading(framework=text(row, "framework"), model=model.name, gpu=text(row, "gpu_type"),
                                  precision=label, degrees=(tp, pp, mb),
                                  micro_batch_printed=_degree(row, "micro_batch") is not None)
    if entry is None:
        return {}
    notes.append(f"cpu_offloading_num_layers = {entry.layers} (not printed; framework recipe {entry.locator})")
    return {"cpu_offloading_num_layers": entry.layers}


def _recompute(row: Mapping[str, Any], notes: list[str]) -> Recompute:
    r = text(row, "recompute").lower()
    kinds: tuple[Recompute, ...] = ("full", "selective", "none")
    for kind in kinds:
        if r.startswith(kind):
            return kind
    if "sc'21" in text(row, "flops_definition").lower():
        notes.append("recompute: full (SC'21 setup, Eq. 3 counts the recompute forward)")
        return "full"
    notes.append("recompute: none (not printed)")
    return "none"


def plan_for_row(row: Mapping[str, Any], model: ModelSpec, training: TrainingSpec, cluster: Cluster,
                 notes: list[str]) -> ParallelPlan:
    """The plan from the row's degrees and settings, missing ones by the documented rules."""
    n = cluster.num_gpus
    tp, pp = _model_parallel(row, cluster, notes)
    cp = _degree(row, "cp") or 1
    if n % (tp * pp * cp):
        raise SkipRow(f"tp*pp*cp = {tp * pp * cp} does not divide num_gpus = {n}")
    dp = _dp(n, tp, pp, cp)
    printed = _degree(row, "dp")
    if printed is not None and printed != dp:
        raise SkipRow(f"degrees disagree: tp{tp}*pp{pp}*cp{cp}*dp{printed} != num_gpus {n} (source quirk)")
    vpp = _degree(row, "vpp") or 1
    split = recipe_layer_split(row, model, pp, vpp, notes)
    while split is None and vpp > 1 and pp * vpp > model.num_layers:
        vpp -= 1  # Megatron-Bridge counts embedding and loss as pipeline layers (126 + 2 = 16 x 8)
        notes.append(f"vpp lowered to {vpp}: pp*vpp exceeded num_layers = {model.num_layers}")
    mb = _degree(row, "micro_batch") or 1  # missing: tuned by clustersim.simulator.calibration.validate (tuning_candidates)
    if training.global_batch_size % (dp * mb):
        raise SkipRow(f"global batch {training.global_batch_size} not divisible by dp {dp} x micro_batch {mb}")
    mcore = framework_is_mcore(row)
    sp = tp > 1 and mcore and text(row, "sp").lower() != "off"
    ep = _degree(row, "ep") or 1
    etp = (_degree(row, "etp") or 1) if model.is_moe else 1  # printed expert TP; missing: 1 (no expert TP)
    if etp > 1:
        notes.append(f"expert tensor parallel {etp} (printed)")
    degrees = (tp, pp, vpp, ep if model.is_moe else 1, mb)
    recompute = _recompute_settings(row, model, degrees, notes)
    shard = _sharding(row, cluster, (model.name, degrees), cp, notes)
    return ParallelPlan(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep if model.is_moe else 1, etp=etp, sp=sp, vpp=vpp, micro_batch=mb,
        schedule="interleaved" if vpp > 1 else "1f1b", layer_split=split,
        **recompute,
        **_moe_comm_settings(row, model, degrees, training.global_batch_size, notes),
        tp_comm_overlap=TP_COMM_OVERLAP if (mcore and tp > 1 and text(row, "gpu_type").upper() != "A100") else 0.0,
        **_offload_settings(row, model, degrees, (shard.get("fsdp", "none"), recompute["recompute"]), notes),
        **shard,
    )
