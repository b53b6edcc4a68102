"""Cited transfer of a fitted profile to a GPU type that has no training row in a fold.

Owns the published microbenchmarks that compare parts at the same kernel (``ACHIEVED``: achieved
FLOP/s of one benchmark, measured the same way on every part it lists), the levels they give
(``cited_levels``: each as a fraction of the part's own datasheet peak, ``topologies.accelerators``)
and the transfer (``transfer_profile``): a GPU type ``g`` without training rows takes the fitted
profile of its donor ``d`` (``fit_crossval.GROUP_DONORS``) with every parameter that has a cited
level on both parts scaled by level[g] / level[d]; a parameter without a cited level on both
parts keeps the donor's value (ratio 1). The same rule for every part, every parameter and every
fold: no ratio is fitted, nothing is read from a held-out row (the donor is fitted on the fold's
training rows only, the ratios are constants). It does not choose donors nor fit anything
(``fit_crossval``). numpy-free: plain arithmetic on profiles.

Parameters with a cited level: the GEMM curve (``gemm``, BF16 matmul), the FP8 factor (``fp8``, FP8
matmul level over the BF16 one at the part's FP8 and BF16 peaks), the attention curve (``attn``,
each generation's own fused attention kernel, BF16 forward). Without one (ratio 1, documented
where each would come from): ``expert_efficiency`` (no grouped-GEMM benchmark across parts),
``fp4`` (no FP4 on Hopper, so no ratio to a Hopper donor), NVLink/NIC efficiencies (no nccl-tests
sweep of a Blackwell part measured like the Hopper ones in ``workloads/data/collective_bandwidth.csv``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from clustersim.simulator.calibration.fit_first_order import Bounds
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


def levels_with_proxies(stem: str, proxies: Sequence[str] = ()) -> dict[str, float]:
    """``cited_levels(stem)``, each parameter it lacks taken from the first of ``proxies`` that has
    one (the caller's donor order, ``fit_crossval.GROUP_DONORS``: the nearest part first)."""
    out: dict[str, float] = {}
    for s in (stem, *proxies):
        out = {**cited_levels(s), **out}
    return out


def transfer_ratios(donor: str, target: str, proxies: Mapping[str, Sequence[str]] | None = None) -> dict[str, float]:
    """level[target] / level[donor] for every parameter with a cited level on both parts; with
    ``proxies`` (stem -> its donor order), a part lacking a level takes its nearest proxy's."""
    chain = proxies or {}
    d = levels_with_proxies(donor, chain.get(donor, ()))
    t = levels_with_proxies(target, chain.get(target, ()))
    return {p: t[p] / d[p] for p in sorted(set(d) & set(t))}


def transfer_profile(profile: CalibrationProfile, donor: str, target: str, bounds: Bounds = Bounds(),
                     proxies: Mapping[str, Sequence[str]] | None = None) -> tuple[CalibrationProfile, dict[str, float]]:
    """The donor's fitted ``profile`` carried to ``target`` by ``transfer_ratios``, within ``bounds``;
    and the ratios applied (after clipping to the bounds)."""
    ratios = transfer_ratios(donor, target, proxies)
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


def _r3(v: float) -> float:
    return float(round(v, 3))
