"""The GEMM efficiency curve read at a call's ideal duration (``step.compute.gemm_curve_flops``).

The curve is shared in shape by every GPU type; its x-axis is the FLOP of a call on the reference
part (H100 SXM, BF16). A call of F FLOP on a part of peak P is read at F x reference / P: the size
that takes as long at peak on the reference, so what makes a short call inefficient (launch, tail
wave, pipeline fill: fixed times) weighs the same on every part at the same duration. Checked: the
reference unchanged, the closed form on other parts and precisions, equal durations giving equal
efficiency on two parts, and a faster part never reading a call higher on the curve than a slower.
"""

from __future__ import annotations

import pytest

from clustersim.simulator.profile import GEMM_CURVE_REFERENCE_PEAK, PROFILE_DIR, CalibrationProfile, load_profile
from clustersim.simulator.step.compute import gemm_curve_flops, op_time, peak_for
from clustersim.topologies import get_accelerator
from clustersim.workloads.op_primitives import gemm_op

CURVE = CalibrationProfile(name="synthetic", memory_efficiency=1.0, kernel_overhead=0.0, gemm_efficiency=list(zip(
    [1e8, 1e9, 1e10, 1e11, 1e12, 1e13], [0.10, 0.25, 0.45, 0.55, 0.60, 0.70])),
    gemm_curve_peak=GEMM_CURVE_REFERENCE_PEAK)


def _gemm(m: float, n: int = 8192, k: int = 8192) -> object:
    return gemm_op("fc", m, n, k, 2, params=n * k)  # type: ignore[arg-type]


def _efficiency(op: object, acc_name: str, precision: str = "bf16", profile: CalibrationProfile = CURVE) -> float:
    """The efficiency the op ran at: its math time against its FLOP at the part's peak (compute-bound
    shapes: large dims, the profile's memory efficiency 1)."""
    acc = get_accelerator(acc_name)
    t = op_time(op, acc, profile, precision, "fwd")  # type: ignore[arg-type]
    return float(op.flops) / (peak_for(acc, precision, True) * t)  # type: ignore[attr-defined]


def test_the_reference_part_reads_the_curve_at_its_flop() -> None:
    h100 = get_accelerator("h100")
    assert GEMM_CURVE_REFERENCE_PEAK == h100.peak("bf16")
    for f in (1e9, 3.3e10, 5e12):
        assert gemm_curve_flops(f, h100.peak("bf16"), GEMM_CURVE_REFERENCE_PEAK) == pytest.approx(f, rel=1e-12)
    op = _gemm(512)
    assert _efficiency(op, "h100") == pytest.approx(CURVE.gemm_eff(op.flops), rel=1e-9)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("acc", "precision"), [("a100", "bf16"), ("b200", "bf16"), ("h100", "fp8"), ("gb300", "fp8")])
def test_another_part_reads_it_at_the_same_ideal_duration(acc: str, precision: str) -> None:
    peak = peak_for(get_accelerator(acc), precision, True)
    op = _gemm(4096)
    assert gemm_curve_flops(op.flops, peak, GEMM_CURVE_REFERENCE_PEAK) == pytest.approx(op.flops * GEMM_CURVE_REFERENCE_PEAK / peak)  # type: ignore[attr-defined]
    assert _efficiency(op, acc, precision) == pytest.approx(  # type: ignore[arg-type]
        CURVE.gemm_eff(op.flops * GEMM_CURVE_REFERENCE_PEAK / peak), rel=1e-9)  # type: ignore[attr-defined]


def test_equal_ideal_durations_run_at_equal_efficiency_on_two_parts() -> None:
    a100, h100 = get_accelerator("a100"), get_accelerator("h100")
    ratio = h100.peak("bf16") / a100.peak("bf16")
    for m in (2048, 4096, 16384):  # compute bound on both parts (a memory-bound call ignores the curve)
        small, large = _gemm(m), _gemm(m * ratio)
        assert small.flops / a100.peak("bf16") == pytest.approx(large.flops / h100.peak("bf16"))  # type: ignore[attr-defined]
        assert _efficiency(small, "a100") == pytest.approx(_efficiency(large, "h100"), rel=1e-9)


def test_a_faster_part_never_runs_a_call_higher_on_the_curve() -> None:
    # the curve is non-decreasing, so at one FLOP count the part with the higher peak (shorter call)
    # reads it at or below the slower part's point, and FP8 (twice the peak) at or below BF16
    for m in (2048, 4096, 16384, 65536):  # compute bound on every part and precision
        op = _gemm(m)
        effs = [_efficiency(op, a) for a in ("a100", "h100", "b200")]
        assert effs[0] > effs[1] > effs[2]  # the synthetic curve rises everywhere
        assert _efficiency(op, "h100", "fp8") < _efficiency(op, "h100", "bf16")


def test_without_a_reference_every_part_reads_its_own_flop() -> None:
    """A profile fitted on one machine (the torch backend's, a user's) counts the curve in that
    machine's own FLOP: no reference, no shift; the bundled profiles all carry H100's BF16 peak."""
    own = CURVE.replace(gemm_curve_peak=None)
    op = _gemm(4096)
    for acc in ("a100", "h100", "b200"):
        assert gemm_curve_flops(op.flops, 1.0, None) == op.flops  # type: ignore[attr-defined]
        assert _efficiency(op, acc, profile=own) == pytest.approx(own.gemm_eff(op.flops), rel=1e-9)  # type: ignore[attr-defined]
    assert CalibrationProfile().gemm_curve_peak is None
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        assert load_profile(path).gemm_curve_peak == GEMM_CURVE_REFERENCE_PEAK, path.name
