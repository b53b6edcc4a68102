"""Cited transfer of a fitted profile to a GPU type that has no training row in a fold.

Owns the published microbenchmarks that compare parts at the same kernel (``ACHIEVED``: achieved
FLOP/s of one benchmark, measured the same way on every part it lists; ``RELATIVE``: a published
speed-up of one part over another at the same shapes), the levels they give (``levels``: each a
fraction of the part's own datasheet peak, ``topologies.accelerators``; a level no benchmark
measured is the same-die sibling's, ``SAME_DIE``) and the transfer (``transfer_profile``): a GPU
type ``g`` without training rows takes the fitted profile of its donor ``d`` (``GROUP_DONORS``, the
order the folds pick donors in: ``fit_crossval``) with every parameter that has a level on both parts
scaled by level[g] / level[d]; a parameter without a level on both parts keeps the donor's value (ratio 1).
The same rule for every part, every parameter and every fold: no ratio is fitted, nothing is read
from a held-out row (the donor is fitted on the fold's training rows only, the ratios are
constants). It does not choose donors nor fit anything (``fit_crossval``).

Parameters with a level: the GEMM curve (``gemm``, BF16 matmul), the FP8 factor (``fp8``, FP8
matmul level over the BF16 one), the attention curve (``attn``, each generation's own fused
attention kernel, BF16 forward). Without one (ratio 1; where each would come from):
``expert_efficiency`` (no grouped-GEMM benchmark across parts), ``fp4`` (no FP4 on Hopper, so no
ratio to a Hopper donor), NVLink/NIC efficiencies (no nccl-tests sweep of a Blackwell part measured
like the Hopper ones in ``workloads/data/collective_bandwidth.csv``; the in-sample fit gives H100,
B200, GB200 and GB300 the same link efficiencies, 0.852 / 0.98).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from clustersim.simulator.calibration.fit_params import Bounds
from clustersim.simulator.profile import CalibrationProfile
from clustersim.topologies.accelerators import A100_80GB, B200, B300, GB200, GB300, H100_SXM, H200, AcceleratorSpec

PART_OF_STEM: Mapping[str, AcceleratorSpec] = {
    "a100": A100_80GB, "h100": H100_SXM, "h200": H200, "b200": B200, "b300": B300, "gb200": GB200, "gb300": GB300}
"""The datasheet part of each profile stem (``validate.SYSTEM_OF_PART``), whose peaks the levels divide."""

TERA = 1e12


@dataclass(frozen=True, kw_only=True)
class Achieved:
    """One microbenchmark's achieved FLOP/s per profile stem, at one precision of the datasheet peak."""

    precision: str
    """``AcceleratorSpec.peak_flops`` key the figures are a fraction of."""
    flops: Mapping[str, float]
    """Achieved FLOP/s per profile stem (parts the benchmark did not measure are absent)."""
    source: str
    """Citation: publication, table, locator."""


MAMF_SOURCE = (
    "S. Bekman, ml-engineering, compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison "
    "table' (torch.matmul, best shape of a brute-force search, mean of 100 iterations after 50 warm-up; "
    "stored mirror Mu-L/ml-engineering @ 330ebdd93ba8b41b6c8e11b6acd46d03d53ea1ec)")
ACHIEVED: Mapping[str, Achieved] = {
    # BF16 table: A100 SXM 271.2, H100 SXM 794.5 ("H200 is the same"), B200 SXM 1745.0, B300 SXM 1769.0,
    # GB200 1822.0 TFLOP/s; no GB300 row.
    "gemm_bf16": Achieved(precision="bf16", source=MAMF_SOURCE + ", BF16 table", flops={
        "a100": 271.2 * TERA, "h100": 794.5 * TERA, "h200": 794.5 * TERA, "b200": 1745.0 * TERA,
        "b300": 1769.0 * TERA, "gb200": 1822.0 * TERA}),
    # FP8 (float8_e4m3fn) table: H100 SXM 1402.6, H200 SXM 1453.4, B200 SXM 3432.5, B300 SXM 3353.3,
    # GB200 3615.6 TFLOP/s; A100 has no FP8, no GB300 row.
    "gemm_fp8": Achieved(precision="fp8", source=MAMF_SOURCE + ", FP8 (float8_e4m3fn) table", flops={
        "h100": 1402.6 * TERA, "h200": 1453.4 * TERA, "b200": 3432.5 * TERA, "b300": 3353.3 * TERA,
        "gb200": 3615.6 * TERA}),
    # Each generation's own fused attention kernel, BF16 forward, best case: FlashAttention-3 on H100
    # "up to 740 TFLOPs/s (75% utilization)" (Shah et al., arXiv:2407.08608, abstract); FlashAttention-4
    # on B200 "up to 1613 TFLOPs/s (71% utilization)" (Zadouri et al., arXiv:2603.05451, abstract).
    "attention_bf16": Achieved(precision="bf16", source="FlashAttention-3 (arXiv:2407.08608) and FlashAttention-4 "
                               "(arXiv:2603.05451), abstracts", flops={"h100": 740.0 * TERA, "b200": 1613.0 * TERA}),
}
"""Published microbenchmarks that measure several parts the same way."""


def _level(bench: str, stem: str) -> float | None:
    """Achieved / datasheet peak of ``stem`` in ``bench`` (None where not measured)."""
    a = ACHIEVED[bench]
    if stem not in a.flops or stem not in PART_OF_STEM:
        return None
    return a.flops[stem] / PART_OF_STEM[stem].peak(a.precision)


def cited_levels(stem: str) -> dict[str, float]:
    """Per transferred parameter, the cited level of ``stem`` (absent where no benchmark measured it).

    ``gemm``: BF16 matmul / BF16 peak; ``fp8``: (FP8 matmul / FP8 peak) / (BF16 matmul / BF16 peak),
    the factor ``precision_efficiency["fp8"]`` multiplies the GEMM curve by; ``attn``: attention / BF16 peak."""
    bf16, fp8, attn = _level("gemm_bf16", stem), _level("gemm_fp8", stem), _level("attention_bf16", stem)
    out = {}
    if bf16 is not None:
        out["gemm"] = bf16
    if bf16 is not None and fp8 is not None:
        out["fp8"] = fp8 / bf16
    if attn is not None:
        out["attn"] = attn
    return out


SAME_DIE: Mapping[str, str] = {"h100": "h200", "h200": "h100", "b200": "gb200", "gb200": "b200",
                               "b300": "gb300", "gb300": "b300"}
"""Parts built on the same GPU die (same SMs, Tensor Cores and special-function units; their datasheet
peaks differ only by the clock their power allows): a part that no benchmark measured for a level takes
its sibling's, as a fraction of its own peak (NVIDIA GB200 NVL72 / HGX B200 and GB300 NVL72 / HGX B300
datasheets: one Blackwell, one Blackwell Ultra GPU; H200 datasheet: the H100's GPU with HBM3e)."""


@dataclass(frozen=True, kw_only=True)
class Relative:
    """A published speed-up of ``part`` over ``reference`` at the same kernel and shapes (same peaks)."""

    param: str
    part: str
    reference: str
    ratio: float
    source: str


RELATIVE: tuple[Relative, ...] = (
    # Blackwell Ultra doubles the special-function units' exponential throughput (MUFU.EX2, 10.7 against 5
    # TeraExponentials/s: NVIDIA, "Inside NVIDIA Blackwell Ultra", 2025-08, per-GPU table), the softmax
    # bottleneck of the Blackwell attention kernel (FlashAttention-4, arXiv:2603.05451, sec. 1). Measured:
    # ~35 % higher attention forward (FPROP) throughput on GB300 than on GB200, DeepSeek-V3 shapes, FP8
    # (NVIDIA Technical Blog, "Making Softmax More Efficient with NVIDIA Blackwell Ultra", 2026-02,
    # developer.nvidia.com/blog/making-softmax-more-efficient-with-nvidia-blackwell-ultra/; the figure as
    # its summaries state it). GB200 and GB300 have the same BF16 and FP8 peaks, so the level ratio is 1.35.
    Relative(param="attn", part="gb300", reference="gb200", ratio=1.35,
             source="NVIDIA Technical Blog, Making Softmax More Efficient with NVIDIA Blackwell Ultra (2026-02)"),
)
"""Published part-over-part speed-ups of one kernel (a level of ``part`` = ratio x the reference's)."""


def _own_or_relative(stem: str) -> dict[str, float]:
    out = cited_levels(stem)
    for rel in RELATIVE:
        if rel.part == stem and rel.param not in out:
            ref = levels(rel.reference)
            if rel.param in ref:
                out[rel.param] = rel.ratio * ref[rel.param]
    return out


def levels(stem: str) -> dict[str, float]:
    """The levels ``transfer_ratios`` compares: the part's own measured ones (``cited_levels``), then
    its published speed-ups over another part (``RELATIVE``), then its same-die sibling's (``SAME_DIE``)."""
    own = _own_or_relative(stem)
    sibling = SAME_DIE.get(stem)
    return {**(_own_or_relative(sibling) if sibling else {}), **own}


def transfer_ratios(donor: str, target: str) -> dict[str, float]:
    """levels[target] / levels[donor] for every parameter with a level on both parts."""
    d, t = levels(donor), levels(target)
    return {p: t[p] / d[p] for p in sorted(set(d) & set(t))}


def transfer_profile(profile: CalibrationProfile, donor: str, target: str,
                     bounds: Bounds = Bounds()) -> tuple[CalibrationProfile, dict[str, float]]:
    """The donor's fitted ``profile`` carried to ``target`` by ``transfer_ratios``, within ``bounds``;
    and the ratios applied (after clipping to the bounds)."""
    ratios = transfer_ratios(donor, target)
    out, applied = profile, {}
    if "gemm" in ratios:
        r = min(ratios["gemm"], bounds.max_efficiency / max(e for _, e in profile.gemm_efficiency))
        out = out.replace(gemm_efficiency=[(x, _r3(e * r)) for x, e in profile.gemm_efficiency])
        applied["gemm"] = r
    if "attn" in ratios:
        r = min(ratios["attn"], bounds.max_efficiency / max(e for _, e in profile.attention_efficiency))
        out = out.replace(attention_efficiency=[(x, _r3(e * r)) for x, e in profile.attention_efficiency])
        applied["attn"] = r
    if "fp8" in ratios:
        v = profile.precision_efficiency.get("fp8", 1.0)
        new = min(max(v * ratios["fp8"], bounds.fp8[0]), bounds.fp8[1])
        out = out.replace(precision_efficiency={**profile.precision_efficiency, "fp8": _r3(new)})
        applied["fp8"] = new / v
    return out, applied


GROUP_DONORS: Mapping[str, tuple[str, ...]] = {
    "a100": ("h100",), "h100": ("h200", "a100"), "h200": ("h100", "a100"),
    "b200": ("b300", "gb200", "gb300", "h100"), "b300": ("b200", "gb300", "gb200", "h100"),
    "gb200": ("gb300", "b200", "b300", "h100"), "gb300": ("gb200", "b300", "b200", "h100")}
"""Where a GPU type with no training row in a fold takes its profile from: the first donor fitted
in that fold on rows of at least ``DONOR_MIN_FAMILIES`` publication families (same generation first,
then the previous one; where none has that many, the first one fitted). Efficiencies are fractions
of each part's own datasheet peak, so they carry over between parts."""

DONOR_MIN_FAMILIES = 2
"""Publication families a fitted GPU type's training rows must span before its profile is carried to
another part. A profile fitted on one family's rows also fits that family's software stack and
measurement convention (its framework release, its kernels, how it times a step), which is what
cross-validation by family holds out; on a part it never ran on, only what two independent families
agree on is the part's. Found on the bundled set plus NVIDIA's DGX Cloud runs (docs/VALIDATION.md,
December's thirteenth stop): without it, nine GB200 rows of one family, the only Blackwell rows of
the Megatron-Bridge fold, became the donor of B200, B300 and GB300. The rule keys on the count of
families, never on which ones."""


def _r3(v: float) -> float:
    return float(round(v, 3))
