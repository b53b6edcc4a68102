"""What framework recipes set about recompute and the pipeline split, for runs that do not print it.

Owns five tables read from the framework sources named in each entry: the per-module recompute
of the MoE performance recipes (``RECIPE_RECOMPUTE``), the embedding/loss accounting of the
pipeline split (``RECIPE_PIPELINE_SPLIT``), the gradient dtype of the NeMo 1.x launcher recipes
(``RECIPE_GRAD_DTYPE``), the activation CPU offloading of the Llama 3 Megatron-FSDP recipes
(``RECIPE_CPU_OFFLOADING``) and the remat policy of the MaxText recipes (``RECIPE_REMAT``), with their lookups by framework string, model preset,
GPU type, precision label and degrees. It does not read rows (``validate_rules`` does) nor price
anything; the MoE dispatcher and grouped-MLP recipes are ``recipe_moe``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

# the recipe files' locators are recipe_moe's: one spelling of each stored copy
from clustersim.simulator.calibration.recipe_moe import _CFG, _DSV3, _DSV3_NEW, _DSV3_OLD, _NANO, _OSS, _SUPER_A, _SUPER_B
from clustersim.simulator.calibration.recipe_moe import _KIMI as _KIMI_NEW
from clustersim.simulator.step import pipeline_split


@dataclass(frozen=True, kw_only=True)
class RecipeRecompute:
    """The per-module recompute one framework recipe sets (Megatron-Bridge performance configs).

    It applies to a row of one of ``frameworks`` that runs one of ``models`` (preset names) on
    ``gpu`` at one of ``precisions`` (``spellings`` labels) with the recipe's degrees and
    micro-batch; a value the row does not print (vpp, micro_batch) is not compared."""

    frameworks: tuple[str, ...]
    models: tuple[str, ...]
    gpu: str
    precisions: tuple[str, ...]
    degrees: tuple[int, int, int, int, int]
    """tp, pp, vpp, ep, micro_batch of the recipe."""
    modules: tuple[str, ...]
    locator: str
    """File, stored copy and recipe names the settings come from."""


_MB = ("megatron-bridge",)
_DSV3_MID = _CFG + "deepseek/deepseek_workload_base_configs.py (later copy, stored copy 67566028990) "
_KIMI_OLD = _CFG + "kimi/kimi_workload_base_configs.py (earlier copy, stored copy 55843530975) "
_ALL = ("bf16", "fp8", "mxfp8", "nvfp4")
_DGXC_DSV3 = ("github NVIDIA/dgxc-benchmarking deepseek_v3/pretraining/launch.sh @ 1f6d9f40e4117d7c71b726f86074ac01c29f87f5 "
              "(the commit of the README's tables): RM='mla_up_proj' on h100 (TP 2, PP 8 at 512 GPUs else 16, EP 64), "
              "RM='core_attn' on gb200 (TP 2, PP 4, EP 32 at 128 GPUs else 64), VP 1, MBS 1, DTYPE bf16, passed as "
              "--recompute_modules to NeMo's scripts.performance.llm.pretrain_deepseek_v3")


def _r(models: tuple[str, ...], gpu: str, precisions: tuple[str, ...], degrees: tuple[int, int, int, int, int],
       modules: tuple[str, ...], locator: str) -> RecipeRecompute:
    return RecipeRecompute(frameworks=_MB, models=models, gpu=gpu, precisions=precisions, degrees=degrees,
                           modules=modules, locator=locator)


RECIPE_RECOMPUTE: tuple[RecipeRecompute, ...] = (
    # DeepSeek-V3; degrees (tp, pp, vpp, ep, micro_batch)
    _r(_DSV3, "GB300", _ALL, (1, 2, 8, 32, 2), ("mla_up_proj",),
       _DSV3_OLD + "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 (= _FP8_CS_V1, _FP8_MX_V1, _NVFP4_V1)"),
    _r(_DSV3, "GB300", ("mxfp8", "nvfp4"), (1, 2, 8, 32, 1), (), _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V1, _NVFP4_V1"),
    _r(_DSV3, "GB300", ("bf16",), (1, 4, 4, 64, 1), ("moe_act",), _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_V1"),
    _r(_DSV3, "GB200", _ALL, (1, 4, 4, 64, 1), ("mla_up_proj",),
       _DSV3_OLD + "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V1 (= _BF16_V1, _FP8_CS_V1, _FP8_MX_V1, _NVFP4_V1)"),
    _r(_DSV3, "B300", _ALL, (1, 16, 1, 8, 1), ("mla_up_proj",), _DSV3_OLD + "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V1 and variants"),
    _r(_DSV3, "B300", _ALL, (1, 8, 1, 8, 1), ("mla_up_proj",), _DSV3_OLD + "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_BF16_V2"),
    _r(_DSV3, "B300", _ALL, (1, 8, 1, 8, 2), ("mla_up_proj",),
       _DSV3_MID + "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V2 (= _BF16_V2, _FP8_CS_V2, _FP8_MX_V2, _NVFP4_V2)"),
    _r(_DSV3, "B300", _ALL, (1, 8, 2, 8, 1), ("mla_up_proj",), _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V1 and variants"),
    _r(_DSV3, "B300", ("nvfp4",), (1, 8, 2, 8, 2), ("mla_up_proj",), _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_B300_NVFP4_V1"),
    _r(_DSV3, "B200", _ALL, (1, 16, 1, 8, 1), ("mla_up_proj",), _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V1 and variants"),
    _r(_DSV3, "B200", ("mxfp8",), (1, 8, 2, 32, 1), ("mla_up_proj", "mlp"), _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    _r(_DSV3, "B200", ("nvfp4",), (1, 8, 2, 32, 1), ("mla_up_proj", "layernorm", "moe_act"),
       _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_NVFP4_V2"),
    _r(_DSV3, "H100", _ALL, (2, 8, 4, 64, 1), ("mla_up_proj", "mlp"), _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1 and variants"),
    # Kimi K2
    _r(("kimi-k2",), "GB300", _ALL, (1, 4, 4, 64, 2), ("mla_up_proj",),
       _KIMI_OLD + "KIMI_K2_PRETRAIN_CONFIG_GB300 (= _BF16, _FP8_CS, _FP8_MX, _NVFP4)"),
    _r(("kimi-k2",), "GB300", ("mxfp8",), (1, 4, 4, 64, 1), (), _KIMI_NEW + "KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX"),
    _r(("kimi-k2",), "GB200", _ALL, (1, 4, 4, 64, 1), ("mla_up_proj",), _KIMI_NEW + "KIMI_K2_PRETRAIN_CONFIG_GB200"),
    _r(("kimi-k2",), "B300", _ALL, (1, 16, 1, 16, 2), ("mla_up_proj",), _KIMI_NEW + "KIMI_K2_PRETRAIN_CONFIG_B300"),
    _r(("kimi-k2",), "B200", _ALL, (1, 16, 1, 16, 1), ("mla_up_proj",), _KIMI_NEW + "KIMI_K2_PRETRAIN_CONFIG_B200"),
    _r(("kimi-k2",), "H100", _ALL, (8, 16, 2, 64, 1), ("mla_up_proj", "mlp"), _KIMI_NEW + "KIMI_K2_PRETRAIN_CONFIG_H100"),
    # Nemotron 3 Nano (hybrid Mamba-Transformer MoE)
    _r(("nemotron-3-nano",), "H100", ("fp8",), (1, 1, 1, 8, 1), ("moe", "layernorm", "core_attn", "moe_act"),
       _NANO + "NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_FP8_CS_V1"),
    _r(("nemotron-3-nano",), "H100", ("bf16",), (1, 1, 1, 8, 1), ("moe", "layernorm"),
       _NANO + "NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_BF16_V1"),
    # Nemotron 3 Super (LatentMoE hybrid); the GB300 recipes and B300 MXFP8 set none
    _r(("nemotron-3-super",), "B300", ("bf16", "nvfp4"), (1, 1, 1, 8, 1), ("moe_act", "layernorm"),
       _SUPER_A + "NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B300_BF16_V1 (= _NVFP4_V1)"),
    _r(("nemotron-3-super",), "B200", ("bf16",), (1, 1, 1, 64, 1), ("moe_act", "moe", "layernorm", "core_attn"),
       _SUPER_A + "NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B200_BF16_V1"),
    _r(("nemotron-3-super",), "B200", ("mxfp8", "nvfp4"), (1, 1, 1, 64, 1), ("moe_act", "layernorm"),
       _SUPER_A + "NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B200_FP8_MX_V1, _NVFP4_V1"),
    _r(("nemotron-3-super",), "GB200", ("bf16", "mxfp8"), (1, 1, 1, 64, 1), ("moe_act", "layernorm", "core_attn", "moe"),
       _SUPER_B + "NEMOTRON_3_SUPER_PRETRAIN_CONFIG_GB200_BF16_V1 (= _FP8_MX_V1)"),
    _r(("nemotron-3-super",), "B200", _ALL, (1, 1, 1, 8, 1), ("moe_act", "layernorm", "core_attn"),
       _SUPER_B + "NEMOTRON_3_SUPER_PRETRAIN_CONFIG_B200_*_V1"),
    # GPT-OSS 120B
    _r(("gpt-oss-120b",), "GB200", ("bf16",), (1, 1, 1, 64, 4), ("layernorm", "moe_act"),
       _OSS + "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V1, _V2"),
    _r(("gpt-oss-120b",), "GB200", ("mxfp8",), (1, 1, 1, 64, 4), (), _OSS + "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    _r(("gpt-oss-120b",), "B200", ("bf16", "mxfp8"), (1, 1, 1, 64, 4), ("layernorm", "moe_act"),
       _OSS + "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V1, _FP8_MX_V1"),
    _r(("gpt-oss-120b",), "B200", ("bf16", "mxfp8"), (1, 1, 1, 8, 4), ("layernorm", "moe_act"),
       _OSS + "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2, _FP8_MX_V2"),
    _r(("gpt-oss-120b",), "H100", ("bf16", "fp8"), (1, 4, 1, 8, 1), ("layernorm", "moe_act"),
       _OSS + "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1, _V2, _FP8_CS_V1, _FP8_CS_V2"),
    # DGX Cloud Benchmarking's LLMB DeepSeek-V3 recipe (NeMo 2 scripts.performance, --recompute_modules)
    *(RecipeRecompute(frameworks=("dgx cloud benchmarking llmb recipe",), models=_DSV3, gpu=gpu, precisions=("bf16",),
                      degrees=degrees, modules=modules, locator=_DGXC_DSV3)
      for gpu, degrees, modules in (("H100", (2, 8, 1, 64, 1), ("mla_up_proj",)), ("H100", (2, 16, 1, 64, 1), ("mla_up_proj",)),
                                    ("GB200", (2, 4, 1, 32, 1), ("core_attn",)), ("GB200", (2, 4, 1, 64, 1), ("core_attn",)))),
    # DGX Cloud Benchmarking's NeMo 1 Nemotron-4 340B recipe (a dense model)
    RecipeRecompute(frameworks=("dgx cloud benchmarking recipe; 2024-2025 (gsw recipes; table label 24.11)",),
                    models=("nemotron-4-340b",), gpu="H100",
                    precisions=("bf16", "fp8"), degrees=(8, 8, 12, 1, 1), modules=("core_attn",),
                    locator="github NVIDIA/dgxc-benchmarking nemotron/nemotron4-340b-synth.yaml (stored copy @ "
                            "8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad): activations_checkpoint_granularity: selective"),
)
"""Framework recipe -> per-module recompute, for rows that do not print their recompute: the
Megatron-Bridge performance recipes of the MoE models of the bundled table, from the stored copies
named in each entry (two copies where a later release changed the recipe's degrees or modules; the
row's printed degrees and micro-batch pick the recipe). Qwen3's recipes
(qwen/qwen3_workload_base_configs.py) set no recompute_modules, so they have no entry."""


def recipe_recompute_entry(*, framework: str, model: str, gpu: str, precision: str,
                           degrees: tuple[int, int, int, int, int], printed: tuple[bool, bool]) -> RecipeRecompute | None:
    """The first ``RECIPE_RECOMPUTE`` entry for this framework string, model preset, GPU type,
    precision label (``spellings.precision_label``) and degrees (``printed``: whether the run prints
    its vpp and its micro-batch), or None."""
    fw, gpu = framework.lower(), gpu.upper()
    compared = (True, True, printed[0], True, printed[1])
    for entry in RECIPE_RECOMPUTE:
        same = all(a == b for a, b, c in zip(degrees, entry.degrees, compared) if c)
        if (any(f in fw for f in entry.frameworks) and model in entry.models and gpu == entry.gpu
                and precision in entry.precisions and same):
            return entry
    return None


@dataclass(frozen=True, kw_only=True)
class RecipeSplit:
    """The pipeline split one framework recipe sets: whether the embedding and the loss count as
    a layer of the split (Megatron-Core ``account_for_embedding_in_pipeline_split`` /
    ``account_for_loss_in_pipeline_split``; their default is False: an even split of the
    transformer layers, embedding on the first and loss on the last chunk)."""

    frameworks: tuple[str, ...]
    models: tuple[str, ...]
    embedding: bool
    loss: bool
    locator: str


RECIPE_PIPELINE_SPLIT: tuple[RecipeSplit, ...] = (
    RecipeSplit(frameworks=_MB, models=("llama3-405b",), embedding=True, loss=True,
                locator="NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/llama/llama3.py (commit "
                        "0d5f5558c16fc7b3eec45698768522e74f1a87a2) llama31_405b_pretrain_config, which the "
                        "performance configs (scripts/performance/configs/llama/llama31_llm_pretrain.py) start from"),
)
"""Framework recipe -> pipeline split, for rows that do not print one. Megatron-Bridge's other
dense recipes of the table (llama3_70b, llama31_70b, llama3_8b: same file) leave both False."""


def recipe_split(*, framework: str, model: str, num_layers: int, pp: int, vpp: int,
                 notes: list[str] | None = None) -> tuple[int, ...] | None:
    """``plan.layer_split`` of this framework's recipe (``RECIPE_PIPELINE_SPLIT``) for a model preset
    of ``num_layers`` layers at pp x vpp, or None (no entry, pp = 1, or a split Megatron-Core would reject)."""
    fw = framework.lower()
    for entry in RECIPE_PIPELINE_SPLIT:
        if pp > 1 and model in entry.models and any(f in fw for f in entry.frameworks):
            split = pipeline_split(num_layers, pp, vpp, embedding=entry.embedding, loss=entry.loss)
            if split is not None and notes is not None:
                notes.append(f"layer_split = {list(split)}: embedding {entry.embedding}, loss {entry.loss} "
                             f"counted in the pipeline split (framework recipe {entry.locator})")
            return split
    return None


@dataclass(frozen=True, kw_only=True)
class RecipeGradDtype:
    """The gradient dtype one framework recipe sets: Megatron-Core's grad buffer and data-parallel
    reduction in bf16 (2 bytes) instead of the fp32 ``main_grad`` default (4). It applies to a row of
    one of ``frameworks`` that runs one of ``models`` at the recipe's (tp, pp, vpp, micro_batch)."""

    frameworks: tuple[str, ...]
    models: tuple[str, ...]
    degrees: tuple[int, int, int, int]
    """tp, pp, vpp, micro_batch of the recipe."""
    grad_dtype_bytes: int
    locator: str
    optimizer_dtype_bytes: int | None = None
    """Apex ``DistributedFusedAdam``'s state ``dtype`` where the recipe sets one (NeMo 1 ``optim.dtype``):
    the optimizer's parameter shard and both moments in it; None keeps fp32."""


_LAUNCHER = "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/"
RECIPE_GRAD_DTYPE: tuple[RecipeGradDtype, ...] = (
    RecipeGradDtype(
        frameworks=("nemo 24.",), models=("nemotron-4-340b",), degrees=(8, 8, 12, 1), grad_dtype_bytes=2,
        locator=_LAUNCHER + "nemotron/nemotron_340b.yaml (stored copies 3be81fc1 and 6daee02a: "
                "tp 8, pp 8, vpp 12, micro_batch 1, optim.grad_sync_dtype: bf16, with mcore_distributed_optim "
                "and distributed_fused_adam respectively); NeMo 1.x maps it to Megatron-Core "
                "DistributedDataParallelConfig(grad_reduce_in_fp32 = grad_sync_dtype == 'fp32') "
                "(NVIDIA/NeMo nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py, "
                "setup_mcore_distributed_parallel)"),
    RecipeGradDtype(
        frameworks=("dgx cloud benchmarking recipe; 2024-2025 (gsw recipes; table label 24.11)",),
        models=("nemotron-4-340b",), degrees=(8, 8, 12, 1), grad_dtype_bytes=2, optimizer_dtype_bytes=2,
        locator="github NVIDIA/dgxc-benchmarking nemotron/nemotron4-340b-synth.yaml (the stored copy @ "
                "8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad; nemotron/configure.sh @ 35a9aecc8d5b17d99d80f52f38c75ade0dbab7ae "
                "runs megatron_gpt_pretraining.py with --config-name ${MODEL}-${MODEL_SIZE}-synth at TP 8, PP 8, VP 12, "
                "MBS 1): optim distributed_fused_adam with grad_sync_dtype: bf16 and dtype: bf16"),
)
"""Framework recipe -> gradient dtype, for rows of the NeMo 1.x launcher era (NeMo 24.x containers)
that do not print it. Only recipes that set ``grad_sync_dtype`` have an entry; the others keep
Megatron-Core's fp32 default. (Megatron-Bridge's recipes set bf16 for every model:
``validate_plan.BF16_GRAD_FRAMEWORKS``.)"""


def recipe_grad_dtype(*, framework: str, model: str, degrees: tuple[int, int, int, int]) -> RecipeGradDtype | None:
    """The ``RECIPE_GRAD_DTYPE`` entry for this framework string, model preset and (tp, pp, vpp,
    micro_batch), or None."""
    fw = framework.lower()
    for entry in RECIPE_GRAD_DTYPE:
        if any(f in fw for f in entry.frameworks) and model in entry.models and degrees == entry.degrees:
            return entry
    return None


@dataclass(frozen=True, kw_only=True)
class RecipeOffload:
    """The activation CPU offloading one framework recipe sets (Megatron-Core
    ``cpu_offloading_num_layers``, with ``cpu_offloading_weights = False``). It applies to a Megatron-FSDP
    row of one of ``frameworks`` that runs one of ``models`` on ``gpu`` at one of ``precisions``
    (``spellings`` labels) with the recipe's (tp, pp, micro_batch); a micro-batch the row does not
    print is not compared."""

    frameworks: tuple[str, ...]
    models: tuple[str, ...]
    gpu: str
    precisions: tuple[str, ...]
    degrees: tuple[int, int, int]
    """tp, pp, micro_batch of the recipe."""
    layers: int
    """Layers whose activations go to the host (``plan.cpu_offloading_num_layers``)."""
    locator: str


_LLAMA3 = (_CFG + "llama/llama3_workload_base_configs.py (commit 00919dcf1fe13c0acf65e131f244378f0a6cd2b5, stored "
           "copy 52380640426; V1 and V2 alike) ")
_LLAMA31 = (_CFG + "llama/llama31_workload_base_configs.py (commit 0013c9a8ed4d655cd4e8ad8f918b11588e53c85d, stored "
            "copy 56481504594; the 128-GPU V1 recipes; V2 sets cpu_offloading_num_layers=None) ")


def _o(models: tuple[str, ...], gpu: str, precision: str, degrees: tuple[int, int, int], layers: int,
       locator: str) -> RecipeOffload:
    return RecipeOffload(frameworks=_MB, models=models, gpu=gpu, precisions=(precision,), degrees=degrees,
                         layers=layers, locator=locator)


RECIPE_CPU_OFFLOADING: tuple[RecipeOffload, ...] = (
    # Llama 3 70B, Megatron-FSDP at tp 1 pp 1; degrees (tp, pp, micro_batch; WorkloadBaseConfig default 1)
    _o(("llama3-70b",), "GB300", "bf16", (1, 1, 2), 30, _LLAMA3 + "LLAMA3_70B_PRETRAIN_CONFIG_GB300_BF16_V1, _V2"),
    _o(("llama3-70b",), "GB300", "fp8", (1, 1, 2), 20, _LLAMA3 + "LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V1, _V2"),
    _o(("llama3-70b",), "GB200", "bf16", (1, 1, 1), 20, _LLAMA3 + "LLAMA3_70B_PRETRAIN_CONFIG_GB200_BF16_V1, _V2"),
    _o(("llama3-70b",), "GB200", "fp8", (1, 1, 2), 40, _LLAMA3 + "LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V1, _V2"),
    _o(("llama3-70b",), "B200", "fp8", (1, 1, 1), 5, _LLAMA3 + "LLAMA3_70B_PRETRAIN_CONFIG_B200_FP8_CS_V1, _V2"),
    # Llama 3.1 405B, Megatron-FSDP at tp 2 pp 1
    _o(("llama3-405b",), "GB300", "bf16", (2, 1, 1), 40, _LLAMA31 + "LLAMA31_405B_PRETRAIN_CONFIG_GB300_BF16_V1"),
    _o(("llama3-405b",), "GB300", "fp8", (2, 1, 1), 10, _LLAMA31 + "LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V1"),
    _o(("llama3-405b",), "GB200", "fp8", (2, 1, 1), 92, _LLAMA31 + "LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V1"),
)
"""Framework recipe -> activation CPU offloading, for rows that do not print it: every Megatron-Bridge
Llama recipe of the stored copies named that sets ``cpu_offloading_num_layers`` (the same values in the
later per-recipe files, e.g. ``llama3_llm_pretrain.py`` ``llama3_70b_pretrain_64gpu_gb200_fp8cs_config``:
``cfg.model.cpu_offloading_num_layers = 40``). FP8 here is the current-scaling recipe (``FP8_CS``); the
MXFP8/NVFP4 recipes of these GPUs run pp 4 and offload nothing."""


def recipe_cpu_offloading(*, framework: str, model: str, gpu: str, precision: str, degrees: tuple[int, int, int],
                          micro_batch_printed: bool) -> RecipeOffload | None:
    """The ``RECIPE_CPU_OFFLOADING`` entry for this framework string, model preset, GPU type, precision
    label and (tp, pp, micro_batch) of a Megatron-FSDP row, or None."""
    fw, gpu = framework.lower(), gpu.upper()
    for entry in RECIPE_CPU_OFFLOADING:
        same = degrees[:2] == entry.degrees[:2] and (not micro_batch_printed or degrees[2] == entry.degrees[2])
        if (any(f in fw for f in entry.frameworks) and model in entry.models and gpu == entry.gpu
                and precision in entry.precisions and same):
            return entry
    return None


@dataclass(frozen=True, kw_only=True)
class RecipeRemat:
    """The remat policy one JAX framework recipe sets (MaxText ``remat_policy``), as a full recompute
    that keeps the named outputs (``ParallelPlan.recompute_saved``). It applies to a row of one of
    ``frameworks`` that runs one of ``models`` (preset names), at any degrees and precision."""

    frameworks: tuple[str, ...]
    models: tuple[str, ...]
    policy: str
    recompute_saved: tuple[str, ...]
    locator: str


RECIPE_REMAT: tuple[RecipeRemat, ...] = (
    RecipeRemat(
        frameworks=("maxtext (jax), dgx cloud benchmarking recipe",), models=("llama3-70b", "llama2-70b"),
        policy="save_qkv_proj", recompute_saved=("qkv_proj",),
        locator="github NVIDIA/dgxc-benchmarking maxtext/configure.sh @ 741c886025a7665a1d690c05ff12ac29c1be7252 "
                "(the commit of README_70b.md's tables; POLICY=\"save_qkv_proj\" passed as remat_policy for every "
                "DTYPE and node count, as in the stored copy @ 0b71cfda); github AI-Hypercomputer/maxtext "
                "MaxText/layers/decoders.py @ 8b8c399098a70e9c6e2a19bb0efaf608c7471ef4 (save_qkv_proj = "
                "jax.checkpoint_policies.save_only_these_names('query_proj', 'value_proj', 'key_proj', 'qkv_proj'))"),
)
"""Framework recipe -> remat policy, for rows that do not print their recompute. MaxText's own
default (``remat_policy: full`` in its base.yml) is not assumed for other MaxText rows."""


def recipe_remat(*, framework: str, model: str) -> RecipeRemat | None:
    """The ``RECIPE_REMAT`` entry for this framework string and model preset, or None."""
    fw = framework.lower()
    for entry in RECIPE_REMAT:
        if any(f in fw for f in entry.frameworks) and model in entry.models:
            return entry
    return None
