"""Tests of clustersim.simulator.calibration.fit_identify: a GEMM level no row identifies is the donor's, cited.

Synthetic sensitivities of the closed form of test_fit_defaults, two GPU types: h100 with dense
BF16 rows (they move the GEMM curve alone) and b300 whose every row also moves expert efficiency
(MoE rows). b300's GEMM scale and expert efficiency then only enter as a product, so its fitted
GEMM level must be h100's times the cited part-to-part ratio, whatever b300's measured times say.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from clustersim.simulator.calibration.fit_crossval import fit_fold
from clustersim.simulator.calibration.fit_defaults import held_fixed
from clustersim.simulator.calibration.fit_first_order import (
    first_order_problem, fit_scales, measured_times, row_weights,
)
from clustersim.simulator.calibration.fit_identify import cited_ties, identifying_rows
from clustersim.simulator.calibration.fit_transfer import transfer_ratios
from clustersim.simulator.cli.app import app
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.profile import CalibrationProfile, default_profile
from tests.simulator.test_fit_defaults import BASE, TRUTH, _synthetic

PROFILES = {"h100": BASE, "b300": BASE.replace(name="b300")}


def _top(p: CalibrationProfile) -> float:
    return max(e for _, e in p.gemm_efficiency)


def _two_types(b300_truth: dict[str, float], always: tuple[str, ...] = ("exp",)) -> pd.DataFrame:
    h = _synthetic(TRUTH, np.random.default_rng(11), rows=80)
    b = _synthetic(b300_truth, np.random.default_rng(12), rows=60, always=always)
    b["row_id"] += 1000
    b["group"], b["gpu_type"] = "b300", "B300"
    return pd.concat([h, b], ignore_index=True)


def test_only_rows_that_move_the_gemm_curve_alone_identify_it() -> None:
    t0 = np.ones(4)
    sens = pd.DataFrame({"row_id": range(4), "group": "h100", "gpu_type": "H100", "status": "ok", "base": t0,
                         "source_id": "synthetic", "framework": "NeMo", "measured": t0})
    for j in range(6):
        sens[f"g{j}"] = t0 + np.array([0.5, 0.5, 0.5, 0.0])
    for p in ("attn", "link", "mem", "kern"):
        sens[p] = t0 + 0.1
    sens["exp"] = t0 + np.array([0.0, 0.3, 0.0, 0.0])
    sens["fp8"] = t0 + np.array([0.0, 0.0, 0.2, 0.0])
    sens["fp4"] = t0
    pb = first_order_problem(sens, {"h100": BASE})
    # dense BF16 | MoE | FP8 | no GEMM at all
    assert identifying_rows(pb).tolist() == [True, False, False, False]


@pytest.mark.parametrize("always", [("exp",), ("fp8",), ("exp", "fp8")])
def test_a_type_without_identifying_rows_takes_the_donor_level_times_the_cited_ratio(always: tuple[str, ...]) -> None:
    # b300's measured times are made with GEMMs at half of h100's level: a free fit would follow them
    # (by trading the GEMM scale against expert efficiency or FP8); the rule holds the cited level
    slow = {**TRUTH, **{f"g{j}": 0.5 * TRUTH[f"g{j}"] for j in range(6)}}
    sens = _two_types(slow, always)
    fold = fit_fold(sens, PROFILES, np.ones(len(sens), bool), sweeps=1)
    ratio = transfer_ratios("h100", "b300")["gemm"]
    assert 0.9 < ratio < 1.1
    assert _top(fold.profiles["b300"]) == pytest.approx(_top(fold.profiles["h100"]) * ratio, abs=0.002)
    assert any(n.startswith("b300 gemm: no training row identifies it") for n in fold.notes)
    assert not any(n.startswith("h100 gemm:") for n in fold.notes)
    # where every b300 row also moves expert efficiency, no row identifies its FP8 factor either:
    # it is h100's times the cited FP8-over-BF16 level ratio
    fp8_tied = "exp" in always
    assert any(n.startswith("b300 fp8: no training row identifies it") for n in fold.notes) == fp8_tied
    if fp8_tied:
        want = fold.profiles["h100"].precision_efficiency["fp8"] * transfer_ratios("h100", "b300")["fp8"]
        assert fold.profiles["b300"].precision_efficiency["fp8"] == pytest.approx(want, abs=0.002)
    # held scales are not counted among b300's fitted parameters
    free = fit_fold(_two_types(TRUTH, ()), PROFILES, np.ones(len(sens), bool), sweeps=1)
    assert fold.fitted_params["b300"] == free.fitted_params["b300"] - 1 - int(fp8_tied)


def test_a_type_with_identifying_rows_keeps_its_own_fit() -> None:
    slow = {**TRUTH, **{f"g{j}": 0.5 * TRUTH[f"g{j}"] for j in range(6)}}
    sens = _two_types(slow, always=())
    pb = first_order_problem(sens, PROFILES)
    assert identifying_rows(pb)[pb.gi == pb.groups.index("b300")].any()
    x, _ = fit_scales(pb, measured_times(sens, None), row_weights(sens), sweeps=1)
    holds, tied, notes = cited_ties(pb, x, np.ones(len(sens), bool))
    assert holds == {} and tied == {} and notes == []
    fold = fit_fold(sens, PROFILES, np.ones(len(sens), bool), sweeps=1)
    # its own rows say half of h100's level, and the fit follows them
    assert _top(fold.profiles["b300"]) == pytest.approx(0.5 * _top(fold.profiles["h100"]), rel=0.05)


def test_frozen_scales_stay_exactly_and_the_rest_is_still_fitted() -> None:
    sens = _two_types(TRUTH, always=())
    pb = first_order_problem(sens, PROFILES)
    b = pb.groups.index("b300")
    x, _ = fit_scales(pb, measured_times(sens, None), row_weights(sens), sweeps=1, frozen={"gemm": {b: 0.8}})
    assert x["gemm"][b] == 0.8
    assert x["fp8"][pb.groups.index("h100")] == pytest.approx(TRUTH["fp8"], rel=0.05)


def test_fit_only_holds_every_other_type_and_the_shared_scales() -> None:
    sens = _two_types(TRUTH, always=())
    pb = first_order_problem(sens, PROFILES)
    hold = held_fixed(pb, ("b300",))
    h = pb.groups.index("h100")
    x, _ = fit_scales(pb, measured_times(sens, None), row_weights(sens), sweeps=1, frozen=hold)
    for name in ("gemm", "attn", "link", "exp", "fp8", "fp4"):
        assert x[name][h] == 1.0
    assert x["curve"].tolist() == [1.0] * 6 and x["mem"][0] == 1.0
    assert x["exp"][pb.groups.index("b300")] != 1.0  # b300's own are fitted


@pytest.mark.parametrize(("args", "message"), [
    (["--fit-only", "b999", "--fit-profiles", "OUT"], "--fit-only 'b999': b999; use comma-separated profile stems"),
    (["--fit-only", "b300"], "--fit-only 'b300' refits profiles; add --fit-profiles OUT_DIR"),
    (["--fit-only", "h200", "--fit-profiles", "OUT"], "fit only h200: no row of the runs uses that profile"),
    (["--hold-shared"], "--hold-shared applies to --cross-validate; add it or drop --hold-shared"),
])
def test_cli_fit_only_rejects_bad_input(args: list[str], message: str, tmp_path: object) -> None:
    args = [str(tmp_path) + "/out" if a == "OUT" else a for a in args]
    res = CliRunner().invoke(app, ["validate", *args, "--no-progress"])
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())
    assert "Traceback" not in res.output


def test_bundled_blackwell_profiles_carry_the_cited_bf16_gemm_level() -> None:
    """No bundled row runs a dense model at BF16 on a Blackwell part, so each one's BF16 GEMM curve is
    H100's times the cited matmul ratio (S. Bekman's MAMF table), not what its MoE rows traded for it."""
    from clustersim.simulator.calibration.validate import default_profile
    h100 = _top(default_profile("h100"))
    for stem in ("b200", "b300", "gb200", "gb300"):
        want = h100 * transfer_ratios("h100", stem)["gemm"]
        assert _top(default_profile(stem)) == pytest.approx(want, abs=0.002), stem


def test_a_dense_bf16_step_on_b300_is_not_slower_than_its_matmul_rate_says() -> None:
    """Llama 3.1 405B as published on 128 B200 (row 541), run at BF16 on B200 and on B300: B300's
    datasheet BF16 peak is B200's and its measured matmul rate 1.4 % higher (1,769 against 1,745
    TFLOP/s), so the step may differ by the fabric and attention, not by 1.4x (the bundled B300
    profile fitted on MoE rows alone gave 14.3 s against 9.6 s)."""
    from clustersim.simulator.calibration.validate import load_runs, validate_row
    runs = load_runs()
    row = {str(k): v for k, v in runs[runs.row_id == 541].iloc[0].to_dict().items()}
    assert row["gpu_type"] == "B200" and row["model"].startswith("LLAMA3.1_405B")
    t = {g: validate_row({**row, "gpu_type": g, "precision": "BF16"})["predicted_step_time_s"] for g in ("B200", "B300")}
    assert 0.9 < t["B300"] / t["B200"] < 1.1, t


def test_fit_only_writes_the_copies_of_a_refitted_profile(tmp_path: Path) -> None:
    # H200 is H100's fit times the cited ratios (fit_defaults.COPIES): refitting H100 alone must
    # rewrite it too, and nothing else that was not refitted
    from types import SimpleNamespace

    from clustersim.simulator.cli.validate import write_profiles_with_headers

    profs = {stem: default_profile(stem) for stem in ("h100", "h200", "b200")}
    write_profiles_with_headers(SimpleNamespace(profiles=profs), tmp_path, ("h100",))  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.glob("*.yaml")) == ["h100.yaml", "h200.yaml"]
    write_profiles_with_headers(SimpleNamespace(profiles=profs), tmp_path / "b", ("b200",))  # type: ignore[arg-type]
    assert sorted(p.name for p in (tmp_path / "b").glob("*.yaml")) == ["b200.yaml"]


def test_cross_validation_can_hold_the_shared_scales_as_the_per_type_refit_does() -> None:
    # the synthetic truth moves the memory efficiency and the kernel overhead (shared by every type):
    # the default fold fit follows them; hold_shared keeps the starting profiles' values, and still
    # fits each type's own parameters
    sens = _two_types(TRUTH, always=())
    train = np.ones(int((sens.status == "ok").sum()), bool)
    free = fit_fold(sens, PROFILES, train, family="all")
    held = fit_fold(sens, PROFILES, train, family="all", hold_shared=True)
    for g in ("h100", "b300"):
        assert held.profiles[g].memory_efficiency == pytest.approx(BASE.memory_efficiency)
        assert held.profiles[g].kernel_overhead == pytest.approx(BASE.kernel_overhead)
        assert held.profiles[g].expert_efficiency != pytest.approx(BASE.expert_efficiency)  # own ones fitted
        assert free.profiles[g].memory_efficiency != pytest.approx(BASE.memory_efficiency)
    with pytest.raises(CalibrationError, match="hold_shared"):
        fit_fold(sens, PROFILES, train, pooling=True, hold_shared=True)
