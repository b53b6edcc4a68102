"""The pipeline layouts framework recipes set, for runs that do not print one.

Megatron-Bridge's recipes of the 61-layer MLA models (DeepSeek-V3, Kimi K2) do not split the
layers evenly: they set Megatron-Core's ``pipeline_model_parallel_layout`` (``plan.layout``), one
layer fewer or more per chunk so that the chunk holding the embedding, and above all the one
holding the output layer, loss and MTP module, is not the pipeline's slowest. Owns that table
(``RECIPE_PIPELINE_LAYOUT``) and its lookup by framework string, model preset, GPU type and
(pp, vpp); each entry names the source file, commit and the recipe it comes from. The layouts are
the sources' own (their list form written in the layout notation, nothing changed); where the
source builds the last chunk's MTP modules from the model (``["mtp"] * mtp_num_layers +
["loss"]``), the lookup does the same from the preset's ``mtp_layers``.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.simulator.plan import parse_layout

_MB = ("megatron-bridge",)
_BRIDGE = "NVIDIA-NeMo/Megatron-Bridge "
_DSV3_RECIPE = (_BRIDGE + "src/megatron/bridge/recipes/deepseek/deepseek_v3.py (commit 355cef45) "
                "set_deepseek_v3_pipeline_model_parallel_layout, layout_map, which the performance "
                "configs reach with layout=None")
_KIMI_RECIPE = (_BRIDGE + "src/megatron/bridge/recipes/kimi/kimi_k2.py (commit 0350b4ef) "
                "_get_kimi_k2_pipeline_layout, map_pp_vp_to_layout")
_DSV3_WORKLOADS = (_BRIDGE + "scripts/performance/configs/deepseek/deepseek_workload_base_configs.py "
                   "(commit 0426418, stored copy 56610329550) ")


@dataclass(frozen=True, kw_only=True)
class RecipeLayout:
    """One recipe's layout at (pp, vpp) for the presets ``models``; on ``gpus`` only when the source
    is a per-GPU configuration (empty: any GPU). The recipe functions append one ``m`` per MTP
    module of the model before the loss; the per-GPU configurations print their ``m``; either way
    the lookup gives the last chunk the model's MTP modules (``with_mtp``)."""

    frameworks: tuple[str, ...]
    models: tuple[str, ...]
    gpus: tuple[str, ...]
    degrees: tuple[int, int]
    """pp, vpp of the recipe."""
    layout: str
    locator: str


_DSV3 = ("deepseek-v3", "deepseek-v3-mtp")
_KIMI = ("kimi-k2",)


def _map(models: tuple[str, ...], locator: str) -> tuple[RecipeLayout, ...]:
    """The six (pp, vpp) layouts both recipe maps list (the same chunks; the last one ends in the
    loss, after the model's MTP modules)."""
    table = {(4, 1): "Et*16|t*16|t*16|t*13L", (8, 1): "Et*8|(t*8|)*6t*5L", (4, 2): "Et*8|(t*8|)*6t*5L",
             (16, 1): "Et*4|(t*4|)*14tL", (8, 2): "Et*4|(t*4|)*14tL", (4, 4): "Et*4|(t*4|)*14tL"}
    return tuple(RecipeLayout(frameworks=_MB, models=models, gpus=(), degrees=d, layout=s, locator=locator)
                 for d, s in table.items())


RECIPE_PIPELINE_LAYOUT: tuple[RecipeLayout, ...] = (
    *_map(_DSV3, _DSV3_RECIPE),
    *_map(_KIMI, _KIMI_RECIPE),
    RecipeLayout(frameworks=_MB, models=_DSV3, gpus=("GB300", "VR200"), degrees=(2, 8), layout="Et*4|(t*4|)*14tmL",
                 locator=_DSV3_WORKLOADS + "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 pp_layout (and its variants)"),
    RecipeLayout(frameworks=_MB, models=_DSV3, gpus=("H100",), degrees=(8, 4), layout="Et|(tt|)*30mL",
                 locator=_DSV3_WORKLOADS + "DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1 pp_layout (and its variants)"),
)
"""Framework recipe -> pipeline layout, for rows that do not print one. (pp, vpp) pairs no entry
lists keep the even split (``step.partition.layer_split``)."""


def with_mtp(layout: str, mtp_layers: int) -> str:
    """``layout`` unrolled, its last chunk holding ``mtp_layers`` MTP modules before the loss, as
    the recipes build it from the model (``last_layer = ["mtp"] * mtp_layers + ["loss"]``)."""
    chunks = list(parse_layout(layout))
    last = chunks[-1].replace("m", "")
    chunks[-1] = last[:-1] + "m" * mtp_layers + last[-1:]
    return "|".join(chunks)


def recipe_layout(*, framework: str, model: str, gpu: str, pp: int, vpp: int, mtp_layers: int,
                  notes: list[str] | None = None) -> str | None:
    """The pipeline layout of the row's framework recipe (``RECIPE_PIPELINE_LAYOUT``) for a model
    preset on ``gpu`` at pp x vpp, its MTP modules the model's, or None (no entry, or pp = 1)."""
    fw, gpu = framework.lower(), gpu.upper()
    for entry in RECIPE_PIPELINE_LAYOUT:
        if (pp > 1 and entry.degrees == (pp, vpp) and model in entry.models
                and (not entry.gpus or gpu in entry.gpus) and any(f in fw for f in entry.frameworks)):
            layout = with_mtp(entry.layout, mtp_layers)
            if notes is not None:
                notes.append(f"pipeline layout {entry.layout!r} (not printed; framework recipe {entry.locator})"
                             + (f", with the model's {mtp_layers} MTP module(s) before the loss"
                                if layout != with_mtp(entry.layout, entry.layout.count('m')) else ""))
            return layout
    return None
