"""Tests of clustersim.simulator.calibration.fit_pooling: partial pooling across GPU types.

Closed-form synthetic sensitivities (test_fit_defaults: the first-order model is exact) for two
trained GPU types whose true GEMM levels differ by a known factor, and a third type seen only in
the held-out family. Checked: the unseen type takes the geometric mean of the trained levels (not
one donor's profile), the pull shrinks the spread monotonically with the strength and vanishes at
0, and the strength is chosen without the held-out family's measured times.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from clustersim.simulator.calibration.fit_crossval import fit_fold
from clustersim.simulator.calibration.fit_first_order import first_order_problem, measured_times, row_weights
from clustersim.simulator.calibration.fit_params import GEMM_POINTS
from clustersim.simulator.calibration.fit_pooling import choose_strength, evidence, fit_pooled, levels
from clustersim.simulator.calibration.validate import family_of
from tests.simulator.test_fit_defaults import BASE, TRUTH, _synthetic

SLOW = 0.8
"""The a100 rows' true GEMM scales are TRUTH's times this (h100 and b200: TRUTH's)."""


def _part(group: str, source: str, gemm: float, seed: int, start: int) -> pd.DataFrame:
    truth = {k: (v * gemm if k.startswith("g") else v) for k, v in TRUTH.items()}
    part = _synthetic(truth, np.random.default_rng(seed), rows=30)
    return part.assign(group=group, gpu_type=group.upper(), source_id=source, row_id=np.arange(start, start + 30))


def _three_types() -> pd.DataFrame:
    return pd.concat([_part("h100", "mosaicml-llmfoundry", 1.0, 1, 0), _part("a100", "nemo-perf-24.07", SLOW, 2, 30),
                      _part("b200", "megatron-bridge-25.09", 1.0, 3, 60)], ignore_index=True)


PROFILES = {g: BASE.replace(name=g) for g in ("a100", "b200", "h100")}


def _top(prof: object) -> float:
    return max(e for _, e in prof.gemm_efficiency)  # type: ignore[attr-defined]


def test_unseen_type_takes_the_geometric_mean_of_the_trained_levels() -> None:
    sens = _three_types()
    bridge = sens.source_id.str.startswith("megatron-bridge").to_numpy()
    fold = fit_fold(sens, PROFILES, ~bridge, family="megatron-bridge", sweeps=1, pooling=True, strength=0.0)
    h, a, b = (_top(fold.profiles[g]) for g in ("h100", "a100", "b200"))
    assert a / h == pytest.approx(SLOW, rel=0.03)  # each trained type fitted on its own rows
    assert b == pytest.approx((h * a) ** 0.5, rel=0.01)  # not a copy of either donor
    assert fold.fitted_params["b200"] == 0 and fold.fitted_params["h100"] > 0


def test_pull_shrinks_the_spread_with_the_strength() -> None:
    sens = _three_types()
    pb = first_order_problem(sens, PROFILES)
    meas, w = measured_times(sens, None), row_weights(sens)
    train = ~sens.source_id.str.startswith("megatron-bridge").to_numpy()
    have = evidence(pb, train)
    assert have["gemm"].tolist() == [True, False, True]  # a100, b200, h100
    spread = []
    for s in (0.0, 10.0, 1e4):
        x, _ = fit_pooled(pb, meas, w, train, s, sweeps=1)
        lv = levels(pb, x)["gemm"]
        spread.append(abs(lv[0] - lv[2]))
    assert spread[0] == pytest.approx(-np.log(SLOW), abs=0.03)
    assert spread[0] > spread[1] > spread[2]
    assert spread[2] < 0.02  # an overwhelming prior: one shared level


def test_strength_is_chosen_without_the_held_out_family() -> None:
    sens = _three_types()
    pb = first_order_problem(sens, PROFILES)
    w = row_weights(sens)
    fam = sens.source_id.map(family_of).to_numpy()
    train = fam != "megatron-bridge"
    meas = measured_times(sens, None)
    moved = meas.copy()
    moved[~train] *= 1.7
    a = choose_strength(pb, meas, w, fam, train, sweeps=1)
    b = choose_strength(pb, moved, w, fam, train, sweeps=1)
    assert a == b
    assert set(a[1]) == {0.0, 1.0, 10.0} and all(np.isfinite(v) for v in a[1].values())


def test_every_gemm_point_counts_as_gemm_evidence() -> None:
    sens = _three_types()
    for j in range(GEMM_POINTS):  # only point j moves on the a100 rows
        only = sens.copy()
        a100 = only.group == "a100"
        for k in range(GEMM_POINTS):
            if k != j:
                only.loc[a100, f"g{k}"] = only.loc[a100, "base"]
        have = evidence(first_order_problem(only, PROFILES), np.ones(len(only), bool))
        assert have["gemm"][0]
