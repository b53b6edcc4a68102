"""Tests of clustersim.simulator.calibration.fit_defaults: the first-order profile fit recovers known efficiencies.

Synthetic sensitivities follow a closed form, T(s) = C + sum_k B_k / s_k + B_kern s_kern, for which
the first-order model in the inverse efficiencies is exact: A_k = B_k. A fit of measured times made
with known scales must therefore return the profiles at those scales (to the search's resolution).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from clustersim.simulator.profile import CalibrationProfile, load_profile
from clustersim.simulator.cli.app import app
from clustersim.simulator.calibration.fit_defaults import perturb, profile_key, sensitivities, write_profiles
from clustersim.simulator.calibration.fit_first_order import cross_validate, fit
from clustersim.simulator.calibration.fit_params import GEMM_POINTS, PERTURB_FACTOR, Bounds
from clustersim.simulator.calibration.validate import load_runs

CURVE_X = [1e8, 1e9, 1e10, 1e11, 1e12, 1e13]
BASE = CalibrationProfile(
    name="synthetic", gemm_efficiency=list(zip(CURVE_X, [0.15, 0.30, 0.40, 0.50, 0.55, 0.60])),
    attention_efficiency=[(1e6, 0.02), (1e9, 0.10), (1e11, 0.20), (1e13, 0.25)],
    memory_efficiency=0.5, kernel_overhead=2e-6, expert_efficiency=0.6, precision_efficiency={"fp8": 1.0, "fp4": 1.0})
EFF_PARAMS = [f"g{j}" for j in range(GEMM_POINTS)] + ["attn", "link", "mem", "exp", "fp8"]


def _synthetic(truth: dict[str, float], rng: np.random.Generator, rows: int = 80,
               always: tuple[str, ...] = ()) -> pd.DataFrame:
    """Sensitivity table of one GPU type "h100" whose measured times are the closed form at ``truth``;
    the parameters in ``always`` move every row (no row without them)."""
    b = rng.uniform(0.0, 1.0, size=(rows, len(EFF_PARAMS))) * (rng.random((rows, len(EFF_PARAMS))) < 0.6)
    for p in always:
        j = EFF_PARAMS.index(p)
        b[:, j] = np.where(b[:, j] > 0, b[:, j], rng.uniform(0.2, 1.0, size=rows))
    kern = rng.uniform(0.0, 0.3, size=rows)
    const = rng.uniform(0.1, 0.5, size=rows)
    t0 = const + b.sum(axis=1) + kern
    frame = pd.DataFrame({"row_id": np.arange(rows), "gpu_type": "H100", "group": "h100", "status": "ok",
                          "framework": np.where(np.arange(rows) % 5 == 0, "Megatron-LM", "NeMo"),
                          "source_id": "synthetic", "base": t0})
    for j, p in enumerate(EFF_PARAMS):
        frame[p] = t0 + b[:, j] * (1.0 / PERTURB_FACTOR - 1.0)
    frame["kern"] = t0 + kern  # kernel overhead doubled: + B_kern
    frame["measured"] = const + sum(b[:, j] / truth[p] for j, p in enumerate(EFF_PARAMS)) + kern * truth["kern"]
    return frame


def _gemm(p: CalibrationProfile) -> np.ndarray:
    return np.array([e for _, e in p.gemm_efficiency])


TRUTH = {"g0": 0.95, "g1": 1.1, "g2": 1.1, "g3": 1.15, "g4": 1.15, "g5": 1.2, "attn": 0.8, "link": 1.05,
         "mem": 1.2, "exp": 0.7, "fp8": 1.1, "kern": 1.5}


def test_fit_recovers_known_efficiencies() -> None:
    sens = _synthetic(TRUTH, np.random.default_rng(1))
    got = fit(sens, profiles={"h100": BASE})["h100"]
    want_gemm = _gemm(BASE) * np.array([TRUTH[f"g{j}"] for j in range(GEMM_POINTS)])
    np.testing.assert_allclose(_gemm(got), want_gemm, rtol=0.03)
    assert got.attention_efficiency[-1][1] == pytest.approx(0.25 * 0.8, rel=0.03)
    assert got.memory_efficiency == pytest.approx(0.5 * 1.2, rel=0.03)
    assert got.expert_efficiency == pytest.approx(0.6 * 0.7, rel=0.03)
    assert got.precision_efficiency["fp8"] == pytest.approx(1.1, rel=0.03)
    assert got.link_eff("nvlink") == pytest.approx(BASE.link_eff("nvlink") * 1.05, rel=0.03)
    assert got.kernel_overhead == pytest.approx(2e-6 * 1.5, rel=0.05)


def test_fit_respects_bounds() -> None:
    # the closed form asks for GEMMs at 0.60 x 1.8 = 1.08 of peak and an FP8 factor of 1.6: both out of bounds
    truth = {**TRUTH, "g5": 1.8, "g4": 1.8, "fp8": 1.6, "attn": 5.0}
    got = fit(_synthetic(truth, np.random.default_rng(2)), profiles={"h100": BASE})["h100"]
    gemm = _gemm(got)
    bounds = Bounds()
    assert gemm.max() <= bounds.max_efficiency + 1e-9
    assert np.all(np.diff(gemm) >= 0)
    assert bounds.fp8[0] <= got.precision_efficiency["fp8"] <= bounds.fp8[1]
    assert max(e for _, e in got.attention_efficiency) <= bounds.max_efficiency + 1e-9
    assert got.link_eff("nic") <= bounds.max_nic_efficiency + 1e-9


def test_fit_and_cross_validation_are_deterministic() -> None:
    sens = _synthetic(TRUTH, np.random.default_rng(3), rows=40)  # cross_validate runs fit_scales, as fit does
    a = cross_validate(sens, 2, np.random.default_rng(0), profiles={"h100": BASE}, sweeps=1)
    b = cross_validate(sens, 2, np.random.default_rng(0), profiles={"h100": BASE}, sweeps=1)
    pd.testing.assert_frame_equal(a, b)
    assert list(a.test_rows) == [20, 20]
    # exact closed form: the held-out rows are predicted far better than by the base profile
    assert (a.test_mape < 0.3 * a.test_mape_before).all()


def test_perturb_changes_one_parameter() -> None:
    p = perturb(BASE, "g2")
    assert _gemm(p)[2] == pytest.approx(0.40 * PERTURB_FACTOR)
    assert np.array_equal(np.delete(_gemm(p), 2), np.delete(_gemm(BASE), 2))
    assert perturb(BASE, "kern").kernel_overhead == pytest.approx(4e-6)
    assert perturb(BASE, "fp4").precision_efficiency == {"fp8": 1.0, "fp4": PERTURB_FACTOR}
    assert perturb(BASE, "ak").attention_kernel_efficiency == {"flash2": pytest.approx(PERTURB_FACTOR)}
    assert perturb(BASE, "ak").attention_efficiency == BASE.attention_efficiency


def test_profile_key_matches_default_profile_rule() -> None:
    keys = ["a100", "b200", "gb200", "h100", "h200"]
    assert profile_key("A100-SXM4", keys) == "a100"
    assert profile_key("GB200", keys) == "gb200"
    assert profile_key("B200", keys) == "b200"
    assert profile_key("MI300X", keys) is None


def test_sensitivities_are_monotone_on_real_rows() -> None:
    runs = load_runs()
    rows = runs[runs.source_id == "mosaicml-llmfoundry"].head(2)
    sens = sensitivities(rows, {"a100": BASE, "h100": BASE}, ("g5", "attn", "kern"))
    assert list(sens.status) == ["ok", "ok"]
    for p in ("g5", "attn", "kern"):  # lower efficiency or more overhead never shortens a step
        assert (sens[p] >= sens.base * (1 - 1e-12)).all()
    assert (sens.g5 > sens.base).any()


def test_write_profiles_round_trip(tmp_path) -> None:
    written = write_profiles({"h100": BASE}, tmp_path, header="fitted on synthetic data\nmethod: closed form")
    text = written[0].read_text()
    assert text.startswith("# fitted on synthetic data\n# method: closed form\n")
    assert load_profile(written[0]) == BASE
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_cli_fit_profiles_writes_profiles_and_report(tmp_path) -> None:
    runs = load_runs()
    small = tmp_path / "runs.csv"
    runs[(runs.source_id == "mosaicml-llmfoundry") & (runs.gpu_type == "A100")].head(2).to_csv(small, index=False)
    out = tmp_path / "fit"
    res = CliRunner().invoke(app, ["validate", str(small), "--fit-profiles", str(out), "--workers", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    report = pd.read_csv(out / "fit_report.csv")
    assert list(report.group) == ["a100", "all"] and report.rows.tolist() == [2, 2]
    # x = 1 (the start) is feasible: the fitted first-order MAPE can only be lower
    assert report.mape_first_order.iloc[-1] <= report.mape_before.iloc[-1] + 1e-9
    assert load_profile(out / "a100.yaml").name == "a100-published-runs"
    assert load_profile(out / "h200.yaml") == load_profile(out / "h200.yaml")  # every bundled stem is written
    bad = CliRunner().invoke(app, ["validate", str(small), "--fit-profiles", str(out), "--calibration", str(out / "a100.yaml")])
    assert bad.exit_code == 2


def test_kernel_overhead_is_fitted_from_zero() -> None:
    # the bundled profiles sat at kernel_overhead 0.0, which a multiplicative probe can never move:
    # the probe adds KERNEL_OVERHEAD_PROBE seconds, and the fit recovers an overhead from zero
    from clustersim.simulator.calibration.fit_params import KERNEL_OVERHEAD_PROBE
    zero = BASE.replace(kernel_overhead=0.0)
    assert perturb(zero, "kern").kernel_overhead == pytest.approx(KERNEL_OVERHEAD_PROBE)
    def at_zero(sens: pd.DataFrame) -> pd.DataFrame:
        # the closed form taken at overhead 0: T(o) = C + sum_k B_k / s_k + B_kern o / probe
        k = sens.kern - sens.base
        out = sens.copy()
        for col in ["base", *EFF_PARAMS]:
            out[col] = sens[col] - k
        out["kern"] = out.base + k
        return out

    sens = at_zero(_synthetic({**TRUTH, "kern": 3.0}, np.random.default_rng(5)))  # measured: 3 probes = 6 us per op
    got = fit(sens, profiles={"h100": zero})["h100"]
    assert got.kernel_overhead == pytest.approx(3 * KERNEL_OVERHEAD_PROBE, rel=0.05)
    # and it stays inside its bound however much the rows ask for
    over = fit(at_zero(_synthetic({**TRUTH, "kern": 40.0}, np.random.default_rng(6))), profiles={"h100": zero})["h100"]
    assert over.kernel_overhead == pytest.approx(Bounds().max_kernel_overhead)
