"""Tests of clustersim.simulator.calibration.fit_crossval: leave-one-family-out without leakage.

The synthetic sensitivities of test_fit_defaults (closed form, first-order model exact) are split
into publication families and GPU types; the checks are what the protocol promises: a held-out
family's measured times cannot change its fold's profiles, a GPU type absent from training takes
its donor's fitted profile, a factor no training row moves takes its prior, families weigh equally.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from clustersim.simulator.calibration.fit_crossval import DONOR_MIN_FAMILIES, GROUP_DONORS, PRIORS, at_bounds, fit_fold
from clustersim.simulator.calibration.fit_first_order import row_weights
from clustersim.simulator.calibration.fit_params import Bounds
from clustersim.simulator.calibration.validate import FAMILIES, family_of, load_runs
from clustersim.simulator.profile import GROUPED_GEMM_EFFICIENCY_PRIOR
from tests.simulator.test_fit_defaults import BASE, TRUTH, _synthetic


def _families(rng_seed: int = 5) -> pd.DataFrame:
    """60 rows: 0-29 family mosaicml (h100), 30-59 megatron-bridge (h100 even, b200 odd; only these are MoE)."""
    sens = _synthetic(TRUTH, np.random.default_rng(rng_seed), rows=60)
    idx = np.arange(60)
    sens["source_id"] = np.where(idx < 30, "mosaicml-llmfoundry", np.where(idx % 3 == 0, "megatron-bridge-26.04", "megatron-bridge-25.09"))
    sens["group"] = np.where((idx >= 30) & (idx % 2 == 1), "b200", "h100")
    sens["gpu_type"] = sens.group.str.upper()
    sens.loc[idx < 30, "exp"] = sens.loc[idx < 30, "base"]  # no MoE row outside the Bridge family
    return sens


PROFILES = {"h100": BASE, "b200": BASE.replace(name="b200")}


@pytest.mark.parametrize(("source_id", "family"), [
    ("megatron-bridge-25.09", "megatron-bridge"), ("megatron-bridge-26.06.01", "megatron-bridge"),
    ("mosaicml-llmfoundry", "mosaicml"), ("sc21-table2", "sc21"), ("megatron-readme-2021-01", "megatron-lm-readme"),
    ("megatron-readme-2024-h100-strong", "megatron-lm-readme"), ("nemo-perf-24.07", "nemo"),
    ("nemo-perf-longseq", "nemo"), ("someone-else-2025", "someone-else-2025")])
def test_family_table(source_id: str, family: str) -> None:
    assert family_of(source_id) == family


def test_every_bundled_source_is_in_the_family_table() -> None:
    sources = load_runs().source_id.unique()
    prefixes = [p for p, _ in FAMILIES]
    assert all(any(s.startswith(p) for p in prefixes) for s in sources), sources
    assert len({family_of(s) for s in sources}) == 5


def test_weights_are_equal_per_family_and_average_one() -> None:
    sens = _families()
    w = row_weights(sens)
    fam = sens.source_id.map(family_of)
    totals = pd.Series(w).groupby(fam.to_numpy()).sum()
    assert totals.to_numpy() == pytest.approx([totals.iloc[0]] * len(totals))
    assert w.mean() == pytest.approx(1.0)


def test_held_out_family_cannot_move_its_fold() -> None:
    sens = _families()
    bridge = sens.source_id.str.startswith("megatron-bridge").to_numpy()
    a = fit_fold(sens, PROFILES, ~bridge, family="megatron-bridge", sweeps=1)
    moved = sens.copy()
    moved.loc[bridge, "measured"] *= 1.5  # the held-out truth changes wildly
    b = fit_fold(moved, PROFILES, ~bridge, family="megatron-bridge", sweeps=1)
    assert a.profiles["h100"] == b.profiles["h100"]
    assert a.profiles["b200"].gemm_efficiency == b.profiles["b200"].gemm_efficiency
    full_a = fit_fold(sens, PROFILES, np.ones(len(sens), bool), sweeps=1)
    full_b = fit_fold(moved, PROFILES, np.ones(len(sens), bool), sweeps=1)
    assert full_a.profiles["h100"] != full_b.profiles["h100"]  # the in-sample fit does see them


def test_gpu_type_without_training_rows_takes_its_donor_and_priors() -> None:
    sens = _families()
    bridge = sens.source_id.str.startswith("megatron-bridge").to_numpy()
    fold = fit_fold(sens, PROFILES, ~bridge, family="megatron-bridge", sweeps=1, transfer=False)
    assert fold.profiles["b200"].gemm_efficiency == fold.profiles["h100"].gemm_efficiency  # donor copy
    assert fold.fitted_params["b200"] == 0
    assert fold.profiles["h100"].expert_efficiency == PRIORS["exp"][1]  # no MoE row in training
    assert any("b200: no training row" in n for n in fold.notes)
    full = fit_fold(sens, PROFILES, np.ones(len(sens), bool), sweeps=1)
    assert full.profiles["h100"].expert_efficiency == pytest.approx(0.6 * 0.7, rel=0.05)


@pytest.mark.parametrize("gb200_families", [1, 2])
def test_a_donor_needs_rows_of_two_families(gb200_families: int) -> None:
    # b200 has rows only in the held-out Bridge family; its first listed donor with a fit, gb200,
    # rests on one family (dgxc) or two (dgxc and sc21); h100 on two (mosaicml and nemo). One family
    # is not enough to carry a profile to another part: the next donor, h100, is taken instead
    assert DONOR_MIN_FAMILIES == 2 and GROUP_DONORS["b200"].index("gb200") < GROUP_DONORS["b200"].index("h100")
    sens = _families()
    idx = np.arange(len(sens))
    gb = (idx < 30) & (idx % 5 == 0)
    sens.loc[gb, "group"], sens.loc[gb, "gpu_type"] = "gb200", "GB200"
    sens.loc[gb, "source_id"] = np.where(idx[gb] % 10 == 0, "dgxc-grok1", "sc21-table2" if gb200_families == 2 else "dgxc-grok1")
    sens.loc[(idx < 30) & (idx % 5 == 1), "source_id"] = "nemo-perf-24.07"
    profiles = {**PROFILES, "gb200": BASE.replace(name="gb200")}
    bridge = sens.source_id.str.startswith("megatron-bridge").to_numpy()
    fold = fit_fold(sens, profiles, ~bridge, family="megatron-bridge", sweeps=1, transfer=False)
    donor = "gb200" if gb200_families >= DONOR_MIN_FAMILIES else "h100"
    assert fold.profiles["b200"].name == f"b200-from-{donor}"
    assert fold.profiles["b200"].gemm_efficiency == fold.profiles[donor].gemm_efficiency
    assert any(f"b200: no training row, the fitted {donor} profile (rows of 2 families)" in n for n in fold.notes)


def test_expert_prior_is_the_cited_grouped_gemm_figure() -> None:
    """A fold without MoE rows runs routed-expert GEMMs at the cited prior: the geometric middle of
    the fused-over-unfused kernel speedup of 1.3x-2x (NVIDIA blog, 2026-06-15), strictly inside the
    fit's range, so the in-sample fit can move it either way, and not the old 1.0."""
    prior = PRIORS["exp"][1]
    assert prior == GROUPED_GEMM_EFFICIENCY_PRIOR
    assert prior == pytest.approx(1.0 / (1.3 * 2.0) ** 0.5, abs=0.005)
    lo, hi = Bounds().expert
    assert lo < prior < hi
    assert 1.0 / 2.0 <= prior <= 1.0 / 1.3


def test_at_bounds_reports_a_value_on_its_bound() -> None:
    b = Bounds()
    on = BASE.replace(precision_efficiency={"fp8": b.fp8[1], "fp4": 1.0})
    assert any(s.startswith("fp8") for s in at_bounds(on, b))
    assert not any(s.startswith("fp8") for s in at_bounds(BASE, b))


def test_cli_rejects_an_unknown_cross_validation_scheme() -> None:
    from typer.testing import CliRunner

    from clustersim.simulator.cli.app import app
    res = CliRunner().invoke(app, ["validate", "--cross-validate", "random", "--no-progress"])
    assert res.exit_code == 2
    assert "--cross-validate 'random': use family" in res.output


def test_fold_profiles_carry_the_cited_constants_not_fitted_values() -> None:
    from clustersim.simulator.calibration.fit_params import FLASH2_FACTOR, OVERLAP_SLOWDOWN
    from clustersim.simulator.profile import OVERLAP_SLOWDOWN_MEASURED
    sens = _families()
    bridge = sens.source_id.str.startswith("megatron-bridge").to_numpy()
    for fold in (fit_fold(sens, PROFILES, ~bridge, family="megatron-bridge", sweeps=1),
                 fit_fold(sens, PROFILES, np.ones(len(sens), bool), sweeps=1)):
        for stem in ("h100", "b200"):  # fitted, and taken from its donor
            prof = fold.profiles[stem]
            assert prof.overlap_slowdown == OVERLAP_SLOWDOWN == {"all_gather": OVERLAP_SLOWDOWN_MEASURED,
                                                                  "reduce_scatter": OVERLAP_SLOWDOWN_MEASURED,
                                                                  "all_to_all": OVERLAP_SLOWDOWN_MEASURED}
            assert prof.attention_kernel_efficiency == {"flash2": FLASH2_FACTOR[stem]}
    assert BASE.overlap_slowdown == {}  # the starting profile had none: the fit sets it, it does not fit it
