"""Tests of clustersim.simulator.intervals: split-conformal ranks, coverage, extrapolation.

The synthetic set has a known answer: two families whose held-out ratios are the same 20 values
0.90, 0.91, ..., 1.09. Calibrated on the other family (n = 20), the 80 % interval is the 2nd and 19th
order statistics, [0.91, 1.08] (floor(21 x 0.1) = 2, ceil(21 x 0.9) = 19), which holds 18 of 20
values: 90 % coverage; the 90 % interval is [0.90, 1.09] (ranks 1 and 20): 100 %.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from clustersim.simulator.interval_fit import (
    conformal_bounds, coverage_by_family, extrapolation_widening, interval_table, widening_scores, write_intervals,
)
from clustersim.simulator.intervals import MIN_REGIME_ROWS, WIDEN_FALLBACK, generation, interval_for, load_intervals

VALUES = np.round(np.arange(0.90, 1.095, 0.01), 2)


def _cv(values: np.ndarray = VALUES, families: tuple[str, ...] = ("a", "b"), group: str = "h100",
        kind: str = "dense") -> pd.DataFrame:
    rows = [{"family": f, "regime": kind, "group": group, "num_gpus": 64, "held_out_s": 1.0, "measured_s": float(v)}
            for f in families for v in values]
    return pd.DataFrame(rows)


def test_conformal_ranks() -> None:
    assert conformal_bounds(VALUES, 0.8) == (pytest.approx(0.91), pytest.approx(1.08))
    assert conformal_bounds(VALUES, 0.9) == (pytest.approx(0.90), pytest.approx(1.09))
    assert conformal_bounds(VALUES[:5], 0.9) == (0.0, math.inf)  # too few to bound: unbounded, never narrow


def test_coverage_on_a_synthetic_set_with_a_known_answer() -> None:
    cov = coverage_by_family(_cv())
    overall = cov[cov.family == "all"].set_index("level").coverage
    assert overall[0.8] == pytest.approx(0.9)
    assert overall[0.9] == pytest.approx(1.0)
    assert (cov.extrapolated_rows == 0).all()


def test_conformal_coverage_is_near_nominal_on_exchangeable_data() -> None:
    rng = np.random.default_rng(0)
    frame = _cv(values=np.exp(rng.normal(0, 0.1, 400)), families=tuple("abcdefghij"))
    frame["measured_s"] = np.exp(rng.normal(0, 0.1, len(frame)))
    cov = coverage_by_family(frame).query("family == 'all'").set_index("level").coverage
    assert cov[0.8] == pytest.approx(0.8, abs=0.03)
    assert cov[0.9] == pytest.approx(0.9, abs=0.03)


def test_regime_without_evidence_is_pooled_and_widened() -> None:
    frame = pd.concat([_cv(), _cv(values=VALUES[: MIN_REGIME_ROWS - 1], families=("c",), kind="moe")])
    cov = coverage_by_family(frame)
    assert cov[(cov.family == "c") & (cov.level == 0.8)].extrapolated_rows.iloc[0] == MIN_REGIME_ROWS - 1


def test_interval_for_and_the_table_round_trip(tmp_path) -> None:
    table = interval_table(_cv())
    path = write_intervals(table, tmp_path / "intervals.yaml", header="test")
    tab = load_intervals(path)
    iv = interval_for(2.0, "dense", "H100", 128, level=0.8, table=tab)
    assert not iv.extrapolated
    lo, hi = conformal_bounds(VALUES.tolist() * 2, 0.8)
    assert (iv.low_s, iv.high_s) == (pytest.approx(2 * lo), pytest.approx(2 * hi))
    far = interval_for(2.0, "dense", "H100", 100_000, level=0.8, table=tab)  # beyond 2x the validated 64 GPUs
    moe = interval_for(2.0, "moe", "B200", 64, level=0.8, table=tab)
    # one validated regime: no other regime to measure the widening on, so unbounded (never narrow)
    assert tab["widen"] == {"ratio_80": math.inf, "ratio_90": math.inf}
    for x in (far, moe):
        assert x.extrapolated and (x.low_s, x.high_s) == (0.0, math.inf)
    assert "dense/hopper" in far.nearest
    old = {**tab, "widen": WIDEN_FALLBACK}  # a table written before the measured widening: its one factor
    x = interval_for(2.0, "moe", "B200", 64, level=0.8, table=old)
    assert (x.low_s, x.high_s) == (pytest.approx(2 * lo ** WIDEN_FALLBACK), pytest.approx(2 * hi ** WIDEN_FALLBACK))
    assert generation("GB200 NVL72") == "blackwell" and generation("H100-SXM5") == "hopper"


def test_interval_of_a_result_uses_its_regime() -> None:
    from clustersim.simulator.intervals import interval_of
    from clustersim.simulator.plan.plan import ParallelPlan
    from clustersim.simulator.step.simulate import simulate
    from clustersim.topologies import get_cluster
    from clustersim.workloads import TrainingSpec, get_model
    model = get_model("llama3-8b")
    res = simulate(model, TrainingSpec(seq_len=2048, global_batch_size=16), get_cluster("dgx-h100", 8),
                   ParallelPlan(tp=1, dp=8, zero=1), fidelity="analytic")
    iv = interval_of(res, model, table=interval_table(_cv()))
    assert iv.regime == "dense/hopper" and not iv.extrapolated
    assert iv.low_s < res.step_time < iv.high_s


def test_family_weights_make_each_family_one_unit_of_evidence() -> None:
    from clustersim.simulator.interval_fit import family_weights
    # family a: 100 ratios 0.90 ... 0.999 (one bias), family b: 10 ratios of 1.5 (another)
    a = np.round(np.linspace(0.90, 0.999, 100), 4)
    frame = pd.DataFrame({"family": ["a"] * 100 + ["b"] * 10, "measured_s": np.r_[a, [1.5] * 10], "held_out_s": 1.0})
    w = family_weights(frame)
    assert w[:100].sum() == pytest.approx(1.0) and w[100:].sum() == pytest.approx(1.0)
    r = frame.measured_s.to_numpy()
    # by rows, family b is 9 % of the mass: the 80 % upper bound is a's ceil(111 x 0.9) = 100th value
    assert conformal_bounds(r, 0.8) == (pytest.approx(a[10]), pytest.approx(a[99]))
    # by family, b is half: the 0.9 quantile of (1 + 1 + 0.01 new-point mass) lies in b (cumulative
    # 1.0 after a, so 0.9 x 2.01 = 1.809 is reached inside b); the lower bound, the mirror image,
    # counts from the top: b's 1.0 and then 81 of a's 0.01 reach 1.809, the 81st largest of a
    lo, hi = conformal_bounds(r, 0.8, w)
    assert hi == pytest.approx(1.5) and lo == pytest.approx(a[19])
    # equal-size families: the weights change nothing (the rank rule of test_conformal_ranks)
    eq = _cv()
    assert conformal_bounds(eq.measured_s.to_numpy(), 0.8, family_weights(eq)) == conformal_bounds(eq.measured_s.to_numpy(), 0.8)


def _two_regimes(r_dense: float, r_moe: float) -> pd.DataFrame:
    return pd.concat([_cv(values=np.full(20, r_dense), families=("a",)),
                      _cv(values=np.full(20, r_moe), families=("b",), kind="moe")])


def test_widening_scores_are_the_factor_each_ratio_needs() -> None:
    q = np.array([1.21, 1.1, 1.0, 1.0 / 1.21, 2.0])
    s = widening_scores(q, 1.0 / 1.1, 1.1)
    assert s[:4] == pytest.approx([2.0, 1.0, 0.0, 2.0])
    assert widening_scores(np.array([1.2]), 0.5, 0.9)[0] == math.inf  # above 1 with hi <= 1: no factor covers it


def test_extrapolation_widening_known_answer() -> None:
    # dense ratios all 1.21 = 1.1^2, moe all 1.1: left out, dense needs the moe interval [1.1, 1.1]'s
    # log-ratio doubled (score 2), moe needs half of dense's (0.5); each regime one unit, the new
    # point's mass 1/20: the 0.8 quantile of (1 x 0.5, 1 x 2.0) over 2.05 lies among the 2.0s
    factor, regimes = extrapolation_widening(_two_regimes(1.21, 1.1), 0.8)
    assert regimes == 2 and factor == pytest.approx(2.0)
    # identical regimes: the pooled interval already covers an unseen one, and the floor keeps it at 1
    assert extrapolation_widening(_two_regimes(1.1, 1.1), 0.8)[0] == pytest.approx(1.0)
    # one validated regime: nothing to measure it on
    assert extrapolation_widening(_cv(), 0.8) == (math.inf, 1)


def test_coverage_uses_the_widening_of_its_own_calibration_set() -> None:
    # family c (hybrid, 5 rows: extrapolated) is scored with the widening measured on a and b only
    frame = pd.concat([_two_regimes(1.21, 1.1), _cv(values=np.full(5, 1.1 ** 3), families=("c",), kind="hybrid")])
    cov = coverage_by_family(frame, levels=(0.8,)).set_index("family")
    # pooled a+b bounds [1.1, 1.21] widened x2 (log): up to 1.21^2 = 1.4641 >= 1.331, so c is covered
    assert cov.loc["c", "extrapolated_rows"] == 5 and cov.loc["c", "coverage"] == 1.0
    table = interval_table(frame, levels=(0.8,))
    assert table["widen"]["ratio_80"] == pytest.approx(extrapolation_widening(frame, 0.8)[0])


def _families_at(ratios_by_family: dict[str, float]) -> pd.DataFrame:
    return pd.concat([_cv(values=np.full(20, r), families=(f,)) for f, r in ratios_by_family.items()])


def test_family_widening_known_answer() -> None:
    from clustersim.simulator.interval_fit import family_widening
    # a, b at 1.1, c at 1.21 = 1.1^2 (one dense/hopper regime, 20 rows each). Left out: a (and b)
    # against b+c's family-weighted [1.1, 1.21] scores log 1.1 / log 1.21 = 0.5; c against a+b's
    # [1.1, 1.1] scores 2. 40 rows at 0.5, 20 at 2.0: rank ceil(61 x 0.8) = 49 is among c's 2.0s
    assert family_widening(_families_at({"a": 1.1, "b": 1.1, "c": 1.21}), 0.8) == pytest.approx(2.0)
    # exchangeable families (same ratios): nothing to widen, and never narrower than 1
    assert family_widening(_families_at({"a": 1.1, "b": 1.1, "c": 1.1}), 0.8) == pytest.approx(1.0)
    assert family_widening(_cv(families=("a",)), 0.8) == 1.0  # one family: nothing to measure


def test_coverage_of_a_biased_family_uses_the_spread_of_the_others() -> None:
    from clustersim.simulator.interval_fit import family_widening
    # d (1.331 = 1.1^3) held out: a, b, c calibrate [1.1, 1.21], which misses d; the spread among
    # a, b, c (b off the others by 1.1) gives factor 2 (as the known answer above), so the
    # interval reaches 1.21^2 = 1.4641 and covers d
    frame = _families_at({"a": 1.1, "b": 1.21, "c": 1.1, "d": 1.331})
    cov = coverage_by_family(frame, levels=(0.8,)).set_index("family")
    assert cov.loc["d", "coverage"] == 1.0
    assert cov.loc["d", "widening_validated"] == pytest.approx(family_widening(frame[frame.family != "d"], 0.8))
    assert cov.loc["d", "widening_validated"] == pytest.approx(2.0)


def test_interval_for_applies_the_stored_family_widening() -> None:
    tab = interval_table(_cv())
    base = interval_for(1.0, "dense", "H100", 64, level=0.8, table={**tab, "family_widen": {"ratio_80": 1.0}})
    wide = interval_for(1.0, "dense", "H100", 64, level=0.8, table={**tab, "family_widen": {"ratio_80": 2.0}})
    assert (wide.low_s, wide.high_s) == (pytest.approx(base.low_s ** 2), pytest.approx(base.high_s ** 2))
    old = {k: v for k, v in tab.items() if k != "family_widen"}  # a table written before the factor
    assert interval_for(1.0, "dense", "H100", 64, level=0.8, table=old) == base


def _validated_and_extrapolated() -> pd.DataFrame:
    # a, b: dense Hopper and dense Ampere rows at 1.1 (20 each); c: MoE Hopper rows at 1.331 = 1.1^3,
    # a regime no other family has (extrapolated when c is left out)
    return pd.concat([_cv(values=np.full(20, 1.1), families=("a", "b")),
                      _cv(values=np.full(20, 1.1), families=("a", "b"), group="a100"),
                      _cv(values=np.full(20, 1.1 ** 3), families=("c",), kind="moe")])


def test_class_widening_known_answer() -> None:
    from clustersim.simulator.interval_fit import class_widening, family_widening
    frame = _validated_and_extrapolated()
    # a (or b) left out: its regimes are validated by the other's rows, [1.1, 1.1]: score 1 (its
    # log-ratio is the bound's). c left out: MoE has no rows in a + b, so the pooled [1.1, 1.1]
    # widened by extrapolation_widening(a + b) = 1 (either dense regime left out, the other covers
    # it): c's 1.331 needs 3. One factor for all (family_widening): 80 rows scoring 1, 20 scoring 3;
    # the 0.8 quantile (rank ceil(101 x 0.8) = 81) lies among c's 3s, so every validated interval too is widened x3;
    # per class, the validated rows need 1 and the extrapolated ones 3
    assert family_widening(frame, 0.8) == pytest.approx(3.0)
    assert class_widening(frame, 0.8) == {"validated": pytest.approx(1.0), "extrapolated": pytest.approx(3.0)}
    # no left-out row is extrapolated: the class has nothing to measure it on and takes the all-rows factor
    plain = _families_at({"a": 1.1, "b": 1.1, "c": 1.21})
    assert class_widening(plain, 0.8) == {"validated": pytest.approx(2.0), "extrapolated": pytest.approx(2.0)}


def test_coverage_applies_the_factor_of_each_rows_class() -> None:
    from clustersim.simulator.interval_fit import class_widening
    frame = _validated_and_extrapolated()
    cov = coverage_by_family(frame, levels=(0.8,)).set_index("family")
    # a left out: b + c calibrate; within b + c, b left out is extrapolated against c alone (one
    # validated regime: unbounded, score 0) and c against b scores 3, so no validated row is left
    # and both classes take the all-rows factor, 3; a's validated [1.1, 1.1]^3 holds its 1.1s
    assert cov.loc["a", ["widening_validated", "widening_extrapolated"]].tolist() == pytest.approx([3.0, 3.0])
    assert cov.loc["a", "coverage"] == 1.0 and cov.loc["a", "median_width"] == pytest.approx(1.1 ** 2)
    # c left out: a + b are exchangeable (class factors 1), so c's 1.331 falls outside [1.1, 1.1]
    assert cov.loc["c", "coverage"] == 0.0 and cov.loc["c", "extrapolated_rows"] == 20
    assert cov.loc["c", "widening_extrapolated"] == pytest.approx(class_widening(frame[frame.family != "c"], 0.8)["extrapolated"])
    # "all": the factors of the whole set
    assert cov.loc["all", ["widening_validated", "widening_extrapolated"]].tolist() == pytest.approx([1.0, 3.0])


def test_interval_for_applies_the_stored_factor_of_its_class() -> None:
    tab = interval_table(_validated_and_extrapolated(), levels=(0.8,))
    assert tab["family_widen"]["ratio_80"] == {"validated": pytest.approx(1.0), "extrapolated": pytest.approx(3.0)}
    dense = interval_for(1.0, "dense", "H100", 64, level=0.8, table=tab)
    assert not dense.extrapolated and (dense.low_s, dense.high_s) == (pytest.approx(1.1), pytest.approx(1.1))
    hybrid = interval_for(1.0, "hybrid", "H100", 64, level=0.8, table=tab)  # no hybrid rows: extrapolated
    lo, hi = (float(v) for v in tab["pooled"]["ratio_80"])
    w = tab["widen"]["ratio_80"]
    assert hybrid.extrapolated
    assert (hybrid.low_s, hybrid.high_s) == (pytest.approx(min(lo, lo ** (3 * w))), pytest.approx(hi ** (3 * w)))


def test_family_widening_counts_rows() -> None:
    from clustersim.simulator.interval_fit import family_widening
    # a, c: 80 rows at 1.1; b: 20 rows at 1.21. a (or c) left out: b + c's family-weighted dense
    # interval is [1.1, 1.21], score log 1.1 / log 1.21 = 0.5; b left out: [1.1, 1.1], score 2.
    # 160 rows at 0.5, 20 at 2: rank ceil(181 x 0.8) = 145 <= 160 is a 0.5, floored at 1. (Families
    # as units, (0.5, 0.5, 2), would give 2: b's 20 rows widening every interval of 180.)
    frame = pd.concat([_cv(values=np.full(80, 1.1), families=("a", "c")), _cv(values=np.full(20, 1.21), families=("b",))])
    assert family_widening(frame, 0.8) == pytest.approx(1.0)
    # at 0.9 the rank ceil(181 x 0.9) = 163 > 160 reaches b's 2s
    assert family_widening(frame, 0.9) == pytest.approx(2.0)
