"""Tests of clustersim.simulator.calibration.fit_transfer: the cited part-to-part transfer.

The levels are closed forms of the cited microbenchmarks over the datasheet peaks
(``topologies.accelerators``); the transfer is checked on the synthetic fold of test_crossval (one
h100 family and a Megatron-Bridge family with b200 rows): held out, b200 has no training row and
takes h100's fitted profile times the cited ratios, a level no benchmark measured comes from a published speed-up or the same-die sibling, a part
without any level takes the plain copy,
and the held-out rows' measured times move nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.calibration.fit_crossval import fit_fold
from clustersim.simulator.calibration.fit_params import Bounds
from clustersim.simulator.calibration.fit_transfer import (
    ACHIEVED, RELATIVE, SAME_DIE, cited_levels, levels, transfer_profile, transfer_ratios,
)
from clustersim.topologies.accelerators import B200, GB200, H100_SXM
from tests.simulator.test_crossval import PROFILES, _families
from tests.simulator.test_fit_defaults import BASE

H100_BF16 = 794.5e12 / 989.4e12
"""MAMF BF16 table: H100 SXM 794.5 TFLOP/s over the H100 SXM dense BF16 peak (Hopper whitepaper)."""
B200_BF16 = 1745.0e12 / 2.25e15
H100_FP8 = (1402.6e12 / 1978.9e12) / H100_BF16
B200_FP8 = (3432.5e12 / 4.5e15) / B200_BF16
ATTN = (1613.0e12 / 2.25e15) / (740.0e12 / 989.4e12)
"""FlashAttention-4 on B200 over FlashAttention-3 on H100, each over its part's BF16 peak: 0.958."""


def _held_out_bridge(transfer: bool, scale: float = 1.0) -> object:
    sens = _families()
    bridge = sens.source_id.str.startswith("megatron-bridge").to_numpy()
    sens.loc[bridge, "measured"] *= scale
    return fit_fold(sens, PROFILES, ~bridge, family="megatron-bridge", sweeps=1, transfer=transfer)


def test_levels_are_the_cited_figures_over_each_parts_datasheet_peak() -> None:
    h, b = cited_levels("h100"), cited_levels("b200")
    assert h["gemm"] == pytest.approx(H100_BF16) and b["gemm"] == pytest.approx(B200_BF16)
    assert h["fp8"] == pytest.approx(H100_FP8) and b["fp8"] == pytest.approx(B200_FP8)
    assert b["attn"] / h["attn"] == pytest.approx(ATTN)
    assert cited_levels("gb200")["gemm"] == pytest.approx(1822.0e12 / GB200.peak("bf16"))
    assert cited_levels("gb300") == {}  # no benchmark measured it directly
    for bench in ACHIEVED.values():  # every achieved figure is a fraction of its part's peak
        assert all(0.5 < cited_levels(s).get("gemm", 0.7) <= 1.0 for s in bench.flops)
    assert B200.peak("bf16") == 2.25e15 and H100_SXM.peak("fp8") == 1978.9e12


def test_ratio_is_target_level_over_donor_level_and_inverts() -> None:
    r = transfer_ratios("h100", "b200")
    assert r == pytest.approx({"gemm": B200_BF16 / H100_BF16, "fp8": B200_FP8 / H100_FP8, "attn": ATTN})
    back = transfer_ratios("b200", "h100")
    assert all(r[p] * back[p] == pytest.approx(1.0) for p in r)
    assert transfer_ratios("h100", "h100") == {"attn": 1.0, "fp8": 1.0, "gemm": 1.0}


def test_unmeasured_levels_come_from_a_published_speed_up_then_the_same_die_sibling() -> None:
    b200, b300, gb200, gb300 = (levels(s) for s in ("b200", "b300", "gb200", "gb300"))
    assert gb300["gemm"] == b300["gemm"] == cited_levels("b300")["gemm"]  # GB300: Blackwell Ultra, as B300
    assert gb200["attn"] == b200["attn"]  # FlashAttention-4 measured B200 only
    (ultra,) = [r for r in RELATIVE if r.part == "gb300"]
    assert ultra.reference == "gb200" and ultra.ratio == pytest.approx(1.35)
    assert gb300["attn"] == pytest.approx(1.35 * b200["attn"]) and b300["attn"] == gb300["attn"]
    assert all(SAME_DIE[SAME_DIE[s]] == s for s in SAME_DIE)  # siblings are mutual
    assert transfer_ratios("h100", "gb300") == pytest.approx(
        {"gemm": b300["gemm"] / H100_BF16, "fp8": b300["fp8"] / H100_FP8, "attn": 1.35 * ATTN})


def test_type_without_rows_gets_the_cited_ratio_times_the_donors_fitted_level() -> None:
    fold = _held_out_bridge(transfer=True)
    h, b = fold.profiles["h100"], fold.profiles["b200"]  # type: ignore[attr-defined]
    r = transfer_ratios("h100", "b200")
    for (_, eh), (_, eb) in zip(h.gemm_efficiency, b.gemm_efficiency):
        assert eb == pytest.approx(eh * r["gemm"], abs=6e-4)  # rounded to 3 digits like every fitted value
    for (_, eh), (_, eb) in zip(h.attention_efficiency, b.attention_efficiency):
        assert eb == pytest.approx(eh * r["attn"], abs=6e-4)
    fp8 = min(h.precision_efficiency["fp8"] * r["fp8"], Bounds().fp8[1])  # clipped to the fit's range
    assert b.precision_efficiency["fp8"] == pytest.approx(fp8, abs=6e-4) and fp8 > h.precision_efficiency["fp8"]
    # no cited ratio: the donor's fitted (or prior) value, unchanged
    assert b.expert_efficiency == h.expert_efficiency and b.link_efficiency == h.link_efficiency
    assert b.precision_efficiency["fp4"] == h.precision_efficiency["fp4"] and b.memory_efficiency == h.memory_efficiency
    assert fold.fitted_params["b200"] == 0  # type: ignore[attr-defined]
    assert any("b200: no training row" in n and "gemm x0.966" in n for n in fold.notes)  # type: ignore[attr-defined]
    plain = _held_out_bridge(transfer=False)
    assert plain.profiles["b200"].gemm_efficiency == h.gemm_efficiency  # type: ignore[attr-defined]  # the old copy


def test_a_part_without_cited_levels_takes_the_plain_copy() -> None:
    prof, applied = transfer_profile(BASE, "h100", "mi300x")  # no benchmark above measured it
    assert prof == BASE and applied == {}


def test_transfer_stays_within_the_bounds() -> None:
    b = Bounds()
    near = BASE.replace(gemm_efficiency=[(1e9, 0.5), (1e13, 0.94)], precision_efficiency={"fp8": 1.19, "fp4": 1.0})
    prof, applied = transfer_profile(near, "gb200", "h100", b)  # h100's levels are above gb200's: a raise
    assert max(e for _, e in prof.gemm_efficiency) <= b.max_efficiency
    assert applied["gemm"] == pytest.approx(b.max_efficiency / 0.94)
    assert prof.precision_efficiency["fp8"] <= b.fp8[1]
    low = BASE.replace(precision_efficiency={"fp8": 0.6, "fp4": 1.0})
    assert transfer_profile(low, "b200", "h100", b)[0].precision_efficiency["fp8"] >= b.fp8[0]


def test_held_out_rows_cannot_move_the_transferred_profile() -> None:
    a, b = _held_out_bridge(transfer=True), _held_out_bridge(transfer=True, scale=1.6)
    assert a.profiles["b200"] == b.profiles["b200"]  # type: ignore[attr-defined]
    assert a.profiles["h100"] == b.profiles["h100"]  # type: ignore[attr-defined]
    assert np.isfinite(max(e for _, e in a.profiles["b200"].gemm_efficiency))  # type: ignore[attr-defined]


def test_bundled_h200_profile_is_the_h100_fit_times_the_cited_ratios() -> None:
    """No H200 row: the default profile is H100's fit carried by the same rule as a fold's type without
    rows (``fit_defaults.COPIES``): H200's FP8 matmul level is the only cited difference (x1.036)."""
    from clustersim.simulator.profile import PROFILE_DIR, load_profile
    h100, h200 = (load_profile(PROFILE_DIR / f"{s}.yaml") for s in ("h100", "h200"))
    carried, applied = transfer_profile(h100, "h100", "h200")
    assert applied["fp8"] == pytest.approx((1453.4 / 1402.6), rel=1e-6)  # same FP8 peak, BF16 "the same"
    assert h200.model_dump(exclude={"name", "source"}) == carried.model_dump(exclude={"name", "source"})
    assert h200.precision_efficiency["fp8"] > h100.precision_efficiency["fp8"]
