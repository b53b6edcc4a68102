"""The MoE token dispatcher and EP all-to-all overlap of the framework recipes (issue 13).

Owns ``RECIPE_MOE_COMM``: for the Megatron-Bridge performance recipes of the MoE models of the
bundled table, the dispatcher (``moe_token_dispatcher_type``: alltoall, or flex with the
``moe_flex_dispatcher_backend`` deepep / hybridep) and ``moe_a2a_overlap`` each recipe sets, with
the degrees, micro-batch and global batch that pick it; and ``recipe_moe_comm``, the rule that
gives a row the settings of the entries that match what the row prints. It reads no row cell and
builds no plan (``validate_rules`` does both).

How Megatron-Bridge applies the two settings (scripts/performance/utils/overrides.py, stored copy
57650989731, ``set_workload_base_configs``): a recipe with ``moe_flex_dispatcher_backend`` runs the
flex dispatcher with that backend (``apply_flex_dispatcher_backend``), one without runs
``moe_token_dispatcher_type = "alltoall"``; ``moe_a2a_overlap = True`` sets
``comm_overlap.overlap_moe_expert_parallel_comm`` and ``delay_wgrad_compute``
(``_set_moe_a2a_overlap_overrides``). Both flex backends send a token once per destination
NVLink domain and forward it there over NVLink (DeepEP's normal kernels; HybridEP, whose recipes
set ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` to 8 on H100/B200/B300 and to the EP size inside
a 72-GPU domain): the simulator's ``deepep`` dispatcher (``step.dispatch``). Overlap is
``plan.ep_overlap``: the engine pairs the steady state's forward and backward passes.

Where two stored copies of one recipe file give different settings for the same printed
configuration, the rule keeps the simulator's default for that setting and says so: the row does
not say which copy it ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Backend = Literal["alltoall", "deepep", "hybridep"]
"""The recipe's dispatcher: alltoall (``moe_token_dispatcher_type``), or the flex dispatcher's
backend (``moe_flex_dispatcher_backend``)."""


@dataclass(frozen=True, kw_only=True)
class RecipeMoeComm:
    """The dispatcher and EP overlap one framework recipe sets (Megatron-Bridge performance configs).

    It applies to a Megatron-Bridge row that runs one of ``models`` (preset names) on ``gpu`` at one
    of ``precisions`` (``spellings`` labels) with the recipe's degrees, micro-batch and global batch;
    a value the row does not print (vpp, micro_batch) is not compared."""

    models: tuple[str, ...]
    gpu: str
    precisions: tuple[str, ...]
    degrees: tuple[int, int, int, int, int]
    """tp, pp, vpp, ep, micro_batch of the recipe."""
    global_batch: int
    """Sequences per step (the recipes' V1 and V2 differ in it)."""
    backend: Backend
    overlap: bool
    """``moe_a2a_overlap``."""
    locator: str
    """File, stored copy and recipe names the settings come from."""

    @property
    def dispatcher(self) -> str:
        """The simulator's ``plan.moe_dispatcher`` for this recipe's dispatcher."""
        return plan_dispatcher(self.backend)


def plan_dispatcher(backend: Backend) -> str:
    """The simulator's ``plan.moe_dispatcher`` for a recipe's dispatcher: both flex backends send a
    token once per NVLink domain (module docstring), the simulator's ``deepep``."""
    return "alltoall" if backend == "alltoall" else "deepep"


_CFG = "Megatron-Bridge scripts/performance/configs/"
_DSV3_NEW = _CFG + "deepseek/deepseek_workload_base_configs.py (commit 0426418, stored copy 56610329550) "
_DSV3_OLD = _CFG + "deepseek/deepseek_workload_base_configs.py (earlier copy, stored copy 52245127557) "
_QWEN = _CFG + "qwen/qwen3_workload_base_configs.py (commit 01b2977, stored copy 52404831658) "
_KIMI = _CFG + "kimi/kimi_workload_base_configs.py (commit 013180a, stored copy 56158669520) "
_OSS = _CFG + "gpt_oss/gpt_oss_workload_base_configs.py (commit 07eea52, stored copy 56362006345) "
_NANO = _CFG + "nemotronh/nemotron_3_nano_workload_base_configs.py (stored copy 52410454804) "
_SUPER_A = _CFG + "nemotronh/nemotron_3_workload_base_configs.py (commit f601ba97, stored copy 51797797963) "
_SUPER_B = _CFG + "nemotronh/nemotron_3_workload_base_configs.py (later copy, commit 06e8da4e, stored copy 51976451604) "
_DSV3 = ("deepseek-v3", "deepseek-v3-mtp")
_Q235, _Q30 = ("qwen3-235b-a22b",), ("qwen3-30b-a3b",)
_OSS120 = ("gpt-oss-120b",)
_FP8, _MX, _FP4, _BF = ("fp8",), ("mxfp8",), ("nvfp4",), ("bf16",)
_ALL = ("bf16", "fp8", "mxfp8", "nvfp4")
_D = tuple[int, int, int, int, int]


def _e(models: tuple[str, ...], gpu: str, precisions: tuple[str, ...], degrees: _D, gbs: int, backend: Backend,
       overlap: bool, locator: str) -> RecipeMoeComm:
    return RecipeMoeComm(models=models, gpu=gpu, precisions=precisions, degrees=degrees, global_batch=gbs,
                         backend=backend, overlap=overlap, locator=locator)


def _deepseek() -> tuple[RecipeMoeComm, ...]:
    """DeepSeek-V3: V1 at global batch 2048 (8192 on H100), V2 at 4096 (16384); degrees (tp, pp, vpp, ep, mb)."""
    out: list[RecipeMoeComm] = []
    for gbs, h100_gbs, v in ((2048, 8192, "V1"), (4096, 16384, "V2")):
        n = _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_"
        out += [
            _e(_DSV3, "GB300", _FP8, (1, 2, 8, 32, 2), gbs, "hybridep", False, n + f"GB300_FP8_CS_{v}"),
            _e(_DSV3, "GB300", _BF, (1, 4, 4, 64, 1), gbs, "hybridep", False, n + f"GB300_BF16_{v}"),
            _e(_DSV3, "GB300", _MX, (1, 2, 8, 32, 1), gbs, "hybridep", True, n + f"GB300_FP8_MX_{v}"),
            _e(_DSV3, "GB300", _FP4, (1, 2, 8, 32, 1), gbs, "hybridep", False, n + f"GB300_NVFP4_{v}"),
            _e(_DSV3, "GB200", _BF + _FP8, (1, 4, 4, 64, 1), gbs, "hybridep", False, n + f"GB200_BF16_{v}, _FP8_CS_{v}"),
            _e(_DSV3, "GB200", _MX, (1, 4, 4, 64, 1), gbs, "hybridep", True, n + f"GB200_FP8_MX_{v}"),
            _e(_DSV3, "GB200", _FP4, (1, 4, 4, 64, 1), gbs, "hybridep", False, n + f"GB200_NVFP4_{v}"),
            _e(_DSV3, "B300", _BF + _FP8, (1, 8, 2, 8, 1), gbs, "hybridep", False, n + f"B300_BF16_{v}, _FP8_CS_{v}"),
            _e(_DSV3, "B300", _MX, (1, 8, 2, 8, 1), gbs, "hybridep", True, n + f"B300_FP8_MX_{v}"),
            _e(_DSV3, "B300", _FP4, (1, 8, 2, 8, 2), gbs, "hybridep", False, n + f"B300_NVFP4_{v}"),
            _e(_DSV3, "B200", _ALL, (1, 16, 1, 8, 1), gbs, "hybridep", False, n + f"B200_{v} and variants"),
            _e(_DSV3, "H100", _ALL, (2, 8, 4, 64, 1), h100_gbs, "hybridep", False, n + f"H100_{v} and variants"),
            # the earlier copy: every Blackwell recipe hybridep without overlap
            _e(_DSV3, "GB300", _ALL, (1, 2, 8, 32, 2), gbs, "hybridep", False, _DSV3_OLD + f"GB300_{v} and variants"),
            _e(_DSV3, "GB300", _BF, (1, 4, 4, 64, 1), gbs, "hybridep", False, _DSV3_OLD + f"GB300_BF16_{v}"),
            _e(_DSV3, "GB200", _ALL, (1, 4, 4, 64, 1), gbs, "hybridep", False, _DSV3_OLD + f"GB200_{v} and variants"),
            _e(_DSV3, "B300", _ALL, (1, 16, 1, 8, 1), gbs, "hybridep", False, _DSV3_OLD + f"B300_{v} and variants"),
            _e(_DSV3, "B200", _ALL, (1, 16, 1, 8, 1), gbs, "hybridep", False, _DSV3_OLD + f"B200_{v} and variants"),
            _e(_DSV3, "H100", _ALL, (2, 8, 4, 64, 1), h100_gbs, "hybridep", False, _DSV3_OLD + f"H100_{v} and variants"),
        ]
    n = _DSV3_NEW + "DEEPSEEK_V3_PRETRAIN_CONFIG_"
    return (*out,
            _e(_DSV3, "B200", _MX, (1, 8, 2, 32, 1), 4096, "deepep", True, n + "B200_FP8_MX_V2"),
            _e(_DSV3, "B200", _FP4, (1, 8, 2, 32, 1), 4096, "deepep", True, n + "B200_NVFP4_V2"),
            _e(_DSV3, "B300", _BF, (1, 8, 1, 8, 1), 4096, "hybridep", False, _DSV3_OLD + "B300_BF16_V2"),
            _e(_DSV3, "H100", _FP8, (2, 8, 2, 64, 1), 16384, "hybridep", False, n + "H100_FP8_SC_V2"),
            _e(_DSV3, "GB300", _MX, (1, 2, 8, 32, 1), 15360, "hybridep", True, n + "GB300_FP8_MX_GBS15360"))


def _qwen3() -> tuple[RecipeMoeComm, ...]:
    """Qwen3 235B-A22B (V1 global batch 1024, 2048 on H100; V2 8192) and 30B-A3B (512, 1024 on H100)."""
    n = _QWEN + "QWEN3_235B_A22B_PRETRAIN_CONFIG_"
    s = _QWEN + "QWEN3_30B_A3B_PRETRAIN_CONFIG_"
    return (
        _e(_Q235, "GB300", _ALL, (1, 1, 1, 64, 2), 1024, "hybridep", False, n + "GB300_*_V1"),
        _e(_Q235, "GB200", _ALL, (1, 8, 1, 8, 1), 1024, "hybridep", False, n + "GB200_*_V1"),
        _e(_Q235, "B300", _ALL, (1, 8, 1, 8, 1), 1024, "alltoall", False, n + "B300_*_V1"),
        _e(_Q235, "B200", _BF, (1, 8, 4, 8, 1), 1024, "alltoall", False, n + "B200_BF16_V1"),
        _e(_Q235, "B200", _FP8 + _MX + _FP4, (1, 8, 1, 8, 1), 1024, "alltoall", False, n + "B200_FP8_CS_V1 and variants"),
        _e(_Q235, "H100", _BF + _FP8, (2, 8, 4, 32, 1), 2048, "alltoall", True, n + "H100_BF16_V1, _FP8_CS_V1"),
        _e(_Q235, "GB300", _BF + _FP8 + _FP4, (1, 4, 1, 32, 2), 8192, "hybridep", False, n + "GB300_BF16_V2 and variants"),
        _e(_Q235, "GB300", _MX, (1, 4, 12, 32, 2), 8192, "hybridep", False, n + "GB300_FP8_MX_V2"),
        _e(_Q235, "GB200", _BF, (1, 8, 1, 8, 1), 8192, "hybridep", False, n + "GB200_BF16_V2"),
        _e(_Q235, "GB200", _FP8 + _FP4, (1, 8, 1, 32, 1), 8192, "hybridep", False, n + "GB200_FP8_CS_V2, _NVFP4_V2"),
        _e(_Q235, "GB200", _MX, (1, 8, 3, 32, 1), 8192, "hybridep", False, n + "GB200_FP8_MX_V2"),
        _e(_Q235, "B300", _ALL, (1, 8, 1, 8, 1), 8192, "alltoall", False, n + "B300_*_V2"),
        _e(_Q235, "B200", _BF, (1, 8, 4, 8, 1), 8192, "alltoall", False, n + "B200_BF16_V2"),
        _e(_Q235, "B200", _FP8 + _MX + _FP4, (1, 8, 1, 8, 1), 8192, "alltoall", False, n + "B200_FP8_CS_V2 and variants"),
        _e(_Q235, "H100", _BF + _FP8, (2, 8, 4, 32, 1), 8192, "alltoall", True, n + "H100_BF16_V2, _FP8_CS_V2"),
        _e(_Q30, "GB300", _ALL, (1, 1, 1, 8, 8), 512, "hybridep", False, s + "GB300_*_V1"),
        _e(_Q30, "GB200", _ALL, (1, 1, 1, 8, 4), 512, "hybridep", False, s + "GB200_*_V1"),
        _e(_Q30, "B300", _ALL, (1, 1, 1, 8, 8), 512, "hybridep", False, s + "B300_*_V1"),
        _e(_Q30, "B200", _ALL, (1, 1, 1, 8, 4), 512, "hybridep", False, s + "B200_*_V1"),
        _e(_Q30, "H100", _BF + _FP8, (1, 1, 1, 16, 1), 1024, "hybridep", False, s + "H100_BF16_V1, _FP8_CS_V1"),
    )


def _kimi_oss() -> tuple[RecipeMoeComm, ...]:
    """Kimi K2 and GPT-OSS 120B (V1 global batch 512, V2 1280)."""
    k = _KIMI + "KIMI_K2_PRETRAIN_CONFIG_"
    o = _OSS + "GPT_OSS_120B_PRETRAIN_CONFIG_"
    out = [
        _e(("kimi-k2",), "GB300", _BF + _FP8 + _FP4, (1, 4, 4, 64, 2), 4096, "hybridep", False, k + "GB300 (= _BF16, _FP8_CS, _NVFP4)"),
        _e(("kimi-k2",), "GB300", _MX, (1, 4, 4, 64, 1), 4096, "hybridep", True, k + "GB300_FP8_MX"),
        _e(("kimi-k2",), "GB200", _ALL, (1, 4, 4, 64, 1), 2048, "hybridep", False, k + "GB200 and variants"),
        _e(("kimi-k2",), "B300", _ALL, (1, 16, 1, 16, 2), 4096, "alltoall", False, k + "B300 and variants"),
        _e(("kimi-k2",), "B200", _ALL, (1, 16, 1, 16, 1), 2048, "alltoall", False, k + "B200 and variants"),
        _e(("kimi-k2",), "H100", _ALL, (8, 16, 2, 64, 1), 8192, "alltoall", False, k + "H100 and variants"),
    ]
    for gpu in ("GB300", "GB200", "B300", "B200"):
        out.append(_e(_OSS120, gpu, _BF + _MX, (1, 1, 1, 64, 4), 512, "alltoall", False, o + f"{gpu}_BF16_V1, _FP8_MX_V1"))
    out.append(_e(_OSS120, "H100", _BF + _FP8, (1, 4, 1, 8, 1), 512, "alltoall", False, o + "H100_BF16_V1, _FP8_CS_V1"))
    return (*out,
            _e(_OSS120, "GB300", _BF, (1, 1, 1, 64, 4), 1280, "alltoall", False, o + "GB300_BF16_V2"),
            _e(_OSS120, "GB300", _MX, (1, 1, 1, 16, 4), 1280, "hybridep", True, o + "GB300_FP8_MX_V2"),
            _e(_OSS120, "GB200", _BF, (1, 1, 1, 64, 4), 1280, "alltoall", True, o + "GB200_BF16_V2"),
            _e(_OSS120, "GB200", _MX, (1, 1, 1, 64, 4), 1280, "hybridep", True, o + "GB200_FP8_MX_V2"),
            _e(_OSS120, "B300", _BF, (1, 1, 1, 8, 4), 1280, "hybridep", False, o + "B300_BF16_V2"),
            _e(_OSS120, "B300", _MX, (1, 1, 1, 8, 4), 1280, "hybridep", True, o + "B300_FP8_MX_V2"),
            _e(_OSS120, "B200", _BF + _MX, (1, 1, 1, 8, 4), 1280, "alltoall", False, o + "B200_BF16_V2 (= _FP8_MX_V2)"),
            _e(_OSS120, "H100", _BF + _FP8, (1, 4, 1, 8, 1), 1280, "alltoall", False, o + "H100_BF16_V2, _FP8_CS_V2"))


def _nano() -> tuple[RecipeMoeComm, ...]:
    """Nemotron 3 Nano (hybrid Mamba-Transformer MoE): every recipe hybridep, EP 8, no overlap."""
    n, nano = _NANO + "NEMOTRON_3_NANO_PRETRAIN_CONFIG_", ("nemotron-3-nano",)
    return (*(_e(nano, gpu, _ALL, (1, 1, 1, 8, mb), 512, "hybridep", False, n + f"{gpu}_*_V1")
              for gpu, mb in (("GB300", 4), ("GB200", 2), ("B300", 4), ("B200", 2))),
            _e(nano, "H100", _BF + _FP8, (1, 1, 1, 8, 1), 1024, "hybridep", False, n + "H100_BF16_V1, _FP8_CS_V1"))


def _super() -> tuple[RecipeMoeComm, ...]:
    """Nemotron 3 Super (LatentMoE hybrid): GBS 512, micro-batch 1, no overlap; the earlier copy runs
    every GPU on hybridep (GB200 at TP 2, B300 at EP 8), the later one GB200 at TP 1, B300 at EP 64
    on deepep and B200 at EP 8."""
    a, b, sup = _SUPER_A + "NEMOTRON_3_SUPER_PRETRAIN_CONFIG_", _SUPER_B + "NEMOTRON_3_SUPER_PRETRAIN_CONFIG_", ("nemotron-3-super",)
    early = ((gpu, (tp, 1, 1, ep, 1)) for gpu, tp, ep in (("GB300", 1, 64), ("GB200", 2, 64), ("B300", 1, 8), ("B200", 1, 64)))
    variants: tuple[tuple[str, int, Backend], ...] = (
        ("GB300", 64, "hybridep"), ("GB200", 64, "hybridep"), ("B300", 64, "deepep"), ("B200", 8, "hybridep"))
    late = ((gpu, (1, 1, 1, ep, 1), backend) for gpu, ep, backend in variants)
    return (*(_e(sup, gpu, _ALL, d, 512, "hybridep", False, a + f"{gpu}_*_V1") for gpu, d in early),
            *(_e(sup, gpu, _ALL, d, 512, backend, False, b + f"{gpu}_*_V1") for gpu, d, backend in late))


RECIPE_MOE_COMM: tuple[RecipeMoeComm, ...] = (*_deepseek(), *_qwen3(), *_kimi_oss(), *_nano(), *_super())
"""Framework recipe -> dispatcher and EP overlap, for Megatron-Bridge MoE rows (which never print
them): the performance recipes of DeepSeek-V3, Qwen3 235B-A22B and 30B-A3B, Kimi K2, GPT-OSS
120B, Nemotron 3 Nano and Nemotron 3 Super from the stored copies named in each entry (DeepSeek-V3 from two copies: the later one adds
``moe_a2a_overlap`` to the MXFP8 recipes and the B200 EP32 deepep recipes)."""


@dataclass(frozen=True, kw_only=True)
class RecipeMoeBase:
    """The dispatcher a recipe file sets on the base config every variant of a model derives from
    (``dataclasses.replace(BASE_..., ...)``): it reaches a variant whose degrees no stored variant has,
    unless that variant overrides it. Consulted only when no ``RECIPE_MOE_COMM`` entry matches."""

    models: tuple[str, ...]
    backend: Backend
    overlap: bool
    locator: str


RECIPE_MOE_BASE: tuple[RecipeMoeBase, ...] = (
    RecipeMoeBase(models=("nemotron-3-super",), backend="hybridep", overlap=False,
                  locator=_SUPER_A + "BASE_NEMOTRON_3_SUPER_CONFIG (moe_flex_dispatcher_backend='hybridep'; no variant "
                                     "of that copy overrides it or sets moe_a2a_overlap)"),
    RecipeMoeBase(models=("nemotron-3-nano",), backend="hybridep", overlap=False,
                  locator=_SUPER_B + "BASE_NEMOTRON_3_NANO_CONFIG (moe_flex_dispatcher_backend='hybridep')"),
)
"""Model -> the dispatcher its recipes' base config sets, for Megatron-Bridge MoE rows whose printed
degrees match no stored variant (``recipe_moe_comm``)."""


@dataclass(frozen=True)
class MoeCommChoice:
    """What the rule gives a row: the plan fields and one note per field."""

    moe_dispatcher: str | None
    """``plan.moe_dispatcher``, None when no entry matches or the copies disagree."""
    ep_overlap: bool | None
    """``plan.ep_overlap``, likewise."""
    notes: tuple[str, ...]


def _agreed(values: set[str], what: str, sources: str, notes: list[str]) -> str | None:
    if len(values) == 1:
        (value,) = values
        notes.append(f"{what} = {value} (not printed; framework recipe {sources})")
        return value
    notes.append(f"{what}: default kept, the stored recipe copies disagree ({sorted(values)}: {sources})")
    return None


def recipe_moe_comm(*, framework: str, model: str, gpu: str, precision: str, degrees: _D,
                    printed: tuple[bool, bool], global_batch: int) -> MoeCommChoice:
    """The dispatcher and overlap of the ``RECIPE_MOE_COMM`` entries that match a row: a
    Megatron-Bridge row (``framework``, lower case), of preset ``model`` on ``gpu`` at precision
    label ``precision``, with ``degrees`` (tp, pp, vpp, ep, micro_batch; ``printed``: whether the row
    prints its vpp and its micro-batch) and ``global_batch``. A field the matching entries disagree
    on keeps the default (None)."""
    if "megatron-bridge" not in framework:
        return MoeCommChoice(None, None, ())
    compared = (True, True, printed[0], True, printed[1])
    hits = [e for e in RECIPE_MOE_COMM
            if e.gpu == gpu and model in e.models and precision in e.precisions and e.global_batch == global_batch
            and all(a == b for a, b, c in zip(degrees, e.degrees, compared) if c)]
    if not hits:
        base = next((b for b in RECIPE_MOE_BASE if model in b.models), None)
        if base is None:
            return MoeCommChoice(None, None, ())
        where = f"no stored variant has the row's degrees; the base config every variant derives from: {base.locator}"
        return MoeCommChoice(plan_dispatcher(base.backend), base.overlap,
                             (f"moe dispatcher = {base.backend} (not printed; {where})",
                              f"moe_a2a_overlap = {base.overlap} (not printed; {where})"))
    notes: list[str] = []
    sources = "; ".join(e.locator for e in hits)
    backend = _agreed({e.backend for e in hits}, "moe dispatcher", sources, notes)
    overlap = _agreed({str(e.overlap) for e in hits}, "moe_a2a_overlap", sources, notes)
    dispatcher = None if backend is None else hits[0].dispatcher  # the backends agree
    return MoeCommChoice(dispatcher, None if overlap is None else overlap == "True", tuple(notes))


@dataclass(frozen=True, kw_only=True)
class RecipeFusedMlp:
    """Recipes that run the routed experts through the CuTeDSL fused grouped MLP (Transformer
    Engine's op fuser with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``: grouped GEMM, GLU activation and
    MXFP8 quantisation in one kernel, token counts kept on the GPU for full-iteration CUDA graphs),
    from the first framework release whose recipes set it."""

    models: tuple[str, ...]
    gpus: tuple[str, ...]
    precisions: tuple[str, ...]
    first_release: tuple[int, int]
    """(year, month) of the first NeMo / Megatron-Bridge release with the setting."""
    locator: str
    a2a_overlap: str = ""
    """Where the same recipe change is stated to set ``moe_a2a_overlap`` too (the EP all-to-all
    overlap, ``plan.ep_overlap``); "" where nothing says so."""


_PRS = "github NVIDIA-NeMo/Megatron-Bridge pull request "
RECIPE_FUSED_GROUPED_MLP: tuple[RecipeFusedMlp, ...] = (
    RecipeFusedMlp(models=_Q235 + _Q30, gpus=("GB200", "GB300"), precisions=_MX, first_release=(26, 6), locator=(
        _PRS + "4249 (merged; 'Enable Qwen3 GB200/GB300 MXFP8 CuTeDSL Fusion and Full-Iter CUDA Graphs "
        "for 26.06', tested against nemo-ci r26.06 on 2026-06-09; on main: 4211)"), a2a_overlap=(
        _PRS + "4606 (2026-06-30, description: it makes the Qwen3 B200/B300 FP8-MX recipes 'exercise the same "
        "optimization path already used by GB200/GB300 where applicable: enables moe_a2a_overlap, enables "
        "full-iteration CUDA graphs ..., enables CuteDSL fused grouped MLP'); " + _PRS + "5356 (2026-08-05: "
        "'the B300 recipe gets this [overlap_moe_expert_parallel_comm] for free from the full-iteration helper')")),
    RecipeFusedMlp(models=_DSV3, gpus=("GB300",), precisions=_MX, first_release=(26, 6), locator=(
        _PRS + "3983 (merged 2026-05-27, before the 26.06 code freeze of 2026-06-02 named in pull request 4080: "
        "DSV3 GB300 MXFP8 full-iteration CUDA graph, A2A overlap and cuTeDSL fused grouped MLP; 'other recipe "
        "variants (FP8 CS, NVFP4, BF16, non-GB300 hardware) are intentionally untouched')"), a2a_overlap=(
        _PRS + "3983 (description: 'Enable DSV3 GB300 MXFP8 full-iteration CUDA graph + MoE A2A overlap + "
        "cuTeDSL fused-grouped-MLP')")),
    RecipeFusedMlp(models=_DSV3, gpus=("GB200",), precisions=_MX, first_release=(26, 6), locator=(
        _PRS + "4226 (merged; 2026-06-09, the day pull request 4249 ran its r26.06 pipeline: 'DSV3 GB200 MXFP8 "
        "full-iter CG recipe', mirroring pull request 3983 on GB200 with recompute_modules ['mla_up_proj']: "
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1 sets cutedsl_fused_grouped_mlp and moe_a2a_overlap, as the "
        "stored copy 56610329550 of deepseek_workload_base_configs.py reads); " + _PRS + "4666 (2026-07-06: 'the "
        "r0.5.0 MXFP8 recipes already carry the validated GB300/GB200 parallel mappings and common plumbing for "
        "CuTeDSL fusion and full-iteration CUDA graph capture'); r0.5.0 is the release branch of the 26.06 "
        "containers (" + _PRS + "5168: 'r0.5.0 rel branch as the corresponding 26.06.01 container'; "
        "docs/releases/software-versions.md: NeMo 26.02 ships Megatron-Bridge 0.3.0, 26.04 ships 0.4.0)"),
        a2a_overlap=_PRS + "4226 (DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1: 'moe_a2a_overlap=True')"),
)
"""Framework recipe -> fused grouped MLP, for Megatron-Bridge MoE rows (which never print it). Left
out for want of a release-dated recipe change: the Qwen3 B200/B300 MXFP8 recipes (pull request 4606,
2026-06-30, release branch r0.5.0: the first release it reached is not stored), GPT-OSS (NVIDIA's
blog of 2026-06-15 reports the fused kernels' 93 % on GPT-OSS but names no recipe), DeepSeek-V3 on
B300 (pull request 4458, 2026-06-23, changes the plan too: vpp 2, micro-batch 1, which the 26.06 rows do
not print) and the NVFP4 recipes (pull request 4666, open)."""


def framework_release(framework: str) -> tuple[int, int] | None:
    """(year, month) of the NeMo release a Megatron-Bridge row's ``framework`` names
    ("Megatron-Bridge / Megatron-Core (NeMo 26.06.01)" -> (26, 6)); None when it names none."""
    m = re.search(r"nemo (\d{2})\.(\d{2})", framework.lower())
    return (int(m.group(1)), int(m.group(2))) if m else None


def _fused_entry(framework: str, model: str, gpu: str, precision: str) -> RecipeFusedMlp | None:
    """The ``RECIPE_FUSED_GROUPED_MLP`` entry of a Megatron-Bridge row (``framework``, any case) of
    preset ``model`` on ``gpu`` at precision label ``precision`` from a release at or after the
    entry's first; None where no entry applies."""
    if "megatron-bridge" not in framework.lower():
        return None
    release = framework_release(framework)
    if release is None:
        return None
    for e in RECIPE_FUSED_GROUPED_MLP:
        if model in e.models and gpu in e.gpus and precision in e.precisions and release >= e.first_release:
            return e
    return None


def recipe_fused_grouped_mlp(*, framework: str, model: str, gpu: str, precision: str) -> tuple[bool, tuple[str, ...]]:
    """Whether a row's framework recipe runs the fused grouped MLP (``RECIPE_FUSED_GROUPED_MLP``,
    ``_fused_entry``); with the note that says why."""
    e = _fused_entry(framework, model, gpu, precision)
    if e is None:
        return False, ()
    return True, (f"moe fused grouped MLP (CuTeDSL; not printed; framework recipe from NeMo "
                  f"{e.first_release[0]}.{e.first_release[1]:02d}: {e.locator})",)


def recipe_release_a2a_overlap(*, framework: str, model: str, gpu: str, precision: str) -> tuple[bool, tuple[str, ...]]:
    """Whether the release-dated recipe change that gives a row the fused grouped MLP
    (``recipe_fused_grouped_mlp``) also sets ``moe_a2a_overlap`` (``RecipeFusedMlp.a2a_overlap``);
    with the note. It supersedes ``RECIPE_MOE_COMM``'s stored copies, which predate the change."""
    e = _fused_entry(framework, model, gpu, precision)
    if e is None or not e.a2a_overlap:
        return False, ()
    return True, (f"moe_a2a_overlap = True (not printed; the recipe change of NeMo "
                  f"{e.first_release[0]}.{e.first_release[1]:02d} that runs the fused grouped MLP sets it "
                  f"too, superseding earlier recipe copies: {e.a2a_overlap})",)
