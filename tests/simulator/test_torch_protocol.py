"""The torch backend's measurement protocol without torch: median intervals, stop and settle rules,
the timing recipe's checks and thread resolution, and the ranking figures of ``calibrate check``.

Everything here is deterministic (closed forms, exact binomial sums, a seeded Generator);
nothing is timed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustersim.simulator.calibration.torch_backend import stats
from clustersim.simulator.calibration.torch_backend.check import (
    CheckRow,
    fastest_gap,
    misordered,
    plan_collectives,
    plan_frameworks,
    plan_profile,
    rank_correlation,
)
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.calibration.torch_backend.measure import standard_plans
from clustersim.simulator.calibration.torch_backend.specs import TimingRecipe
from clustersim.simulator.errors import CalibrationError


def _coverage(n: int) -> float:
    """Exact coverage of [x_(lo), x_(hi)] for the median: 1 - 2 P(Binomial(n, 1/2) <= lo)."""
    lo, _ = stats.median_ci_ranks(n)
    return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(lo + 1)) / 2.0 ** n


def test_median_interval_ranks_match_the_binomial_table() -> None:
    # n = 10: P(B <= 1) = 11/1024 = 1.1 % <= 2.5 % < P(B <= 2) = 5.5 %, so x_(2)..x_(9) (1-based)
    assert stats.median_ci_ranks(10) == (1, 8)
    # n <= 5 cannot reach 95 %: the interval is the range (n = 5 covers 1 - 2/32 = 93.75 %)
    assert stats.median_ci_ranks(5) == (0, 4)
    # n = 30: the textbook 95 % interval is x_(10)..x_(21)
    assert stats.median_ci_ranks(30) == (9, 20)


@pytest.mark.parametrize("n", range(6, 61))
def test_median_interval_covers_at_least_95_percent_and_is_the_tightest(n: int) -> None:
    lo, hi = stats.median_ci_ranks(n)
    assert lo + hi == n - 1  # symmetric in rank
    assert _coverage(n) >= 0.95
    tighter = 1.0 - 2.0 * sum(math.comb(n, i) for i in range(lo + 2)) / 2.0 ** n
    assert tighter < 0.95 or lo + 1 > hi - 1


def test_median_interval_covers_a_skewed_population_at_its_rate() -> None:
    # log-normal step times (skewed like preempted steps); the population median is exp(0) = 1
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        lo, hi = stats.median_ci(list(rng.lognormal(0.0, 0.5, size=15)))
        hits += lo <= 1.0 <= hi
    assert 0.95 <= hits / 2000 <= 0.99  # exact coverage at n = 15 is 96.5 %


def test_stop_rule_minimum_width_and_cap() -> None:
    flat = [1.0] * 5
    assert not stats.enough_repeats(flat[:4], minimum=5, maximum=30, width=0.05)
    assert stats.enough_repeats(flat, minimum=5, maximum=30, width=0.05)
    noisy = [1.0, 2.0] * 5
    assert not stats.enough_repeats(noisy, minimum=5, maximum=30, width=0.05)
    assert stats.enough_repeats(noisy, minimum=5, maximum=10, width=0.05)
    assert stats.ci_relative_width([1.0, 1.1, 0.9, 1.0, 1.05]) == pytest.approx(0.2)


def test_settle_rule_needs_the_last_window_to_agree() -> None:
    first_slow = [3.0, 1.5, 1.02, 1.0, 0.98]
    assert not stats.settled(first_slow[:3], window=3, tolerance=0.1)
    assert stats.settled(first_slow, window=3, tolerance=0.1)
    assert not stats.settled([1.0, 1.0], window=3, tolerance=0.1)


def test_median_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        stats.median([])


def test_threads_are_the_cores_split_over_the_ranks() -> None:
    t = TimingRecipe()
    assert [t.for_world(w, 2).threads_per_rank for w in (1, 2, 4)] == [2, 1, 1]
    assert t.for_world(1, 16).threads_per_rank == 16
    assert TimingRecipe(threads_per_rank=3).for_world(1, 2).threads_per_rank == 3  # explicit wins


@pytest.mark.parametrize("field, value", [("repeats", 0), ("repeats_max", 1), ("ci_width", 0.0),
                                          ("warmup_max", 1), ("threads_per_rank", -1), ("budget_s", 0.0)])
def test_a_bad_timing_recipe_names_its_field(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"warmup": 2, "repeats": 5, field: value}
    with pytest.raises(CalibrationError, match=field):
        TimingRecipe(**kwargs)  # type: ignore[arg-type]  # the parametrised field is one of the recipe's


def _row(plan: str, measured: float, predicted: float, ci: float = 0.02) -> CheckRow:
    return CheckRow(plan=plan, world_size=2, measured=measured, predicted=predicted, spread=0.0, ci_width=ci)


def test_rank_correlation_closed_forms() -> None:
    same = [_row(str(i), i + 1.0, 10.0 * (i + 1)) for i in range(5)]
    assert rank_correlation(same) == pytest.approx(1.0)
    reversed_ = [_row(str(i), i + 1.0, 10.0 - i) for i in range(5)]
    assert rank_correlation(reversed_) == pytest.approx(-1.0)
    # one adjacent swap of 5: rho = 1 - 6 * 2 / (5 * 24) = 0.9
    swapped = [_row(str(i), i + 1.0, p) for i, p in enumerate((1.0, 3.0, 2.0, 4.0, 5.0))]
    assert rank_correlation(swapped) == pytest.approx(0.9)
    assert math.isnan(rank_correlation(same[:1]))


def test_misordered_pairs_and_predicted_ties_are_flagged() -> None:
    rows = [_row("a", 1.0, 1.0), _row("b", 1.2, 0.9), _row("c", 1.5, 2.0), _row("d", 1.51, 2.0, ci=0.05)]
    bad = misordered(rows)
    assert [(m.faster, m.slower) for m in bad] == [("a", "b"), ("c", "d")]
    assert bad[0].measured_gap == pytest.approx(0.2) and not bad[0].within_noise
    assert bad[1].within_noise  # 0.7 % apart, intervals 2 % and 5 % wide
    assert fastest_gap(rows) == ("b", "a", pytest.approx(0.2))


LAWS = {"all_reduce": (1e-4, 2e9), "all_gather": (2e-4, 1e9), "reduce_scatter": (3e-4, 3e9),
        "send_recv": (5e-5, 4e9)}
FRAMEWORK = {"ddp": 1e-4, "fsdp": 4e-4, "tp": 6e-4, "tp-sp": 8e-4}


def _profile() -> CalibrationProfile:
    return CalibrationProfile(machine={"peak_flops": 1e11, "memory_bandwidth": 1e10, "link_bandwidth": 1.5e9},
                              collective_laws=LAWS, framework_overhead=FRAMEWORK)


def test_each_plan_is_priced_with_the_laws_of_what_it_runs() -> None:
    plans = {p.name: p for p in standard_plans(2) + standard_plans(4)}
    assert plan_collectives(plans["dp2-ddp"]) == ("all_reduce",)
    assert plan_collectives(plans["tp2-sp"]) == ("all_gather", "reduce_scatter")
    assert plan_frameworks(plans["dp2-fsdp-tp2-sp"]) == ("fsdp", "tp-sp")
    ddp = plan_profile(plans["dp2-ddp"], _profile())
    assert ddp.collective_overhead == FRAMEWORK["ddp"] and ddp.machine["link_bandwidth"] == pytest.approx(2e9)
    fsdp = plan_profile(plans["dp2-fsdp"], _profile())
    # equal bytes through all-gather and reduce-scatter: harmonic mean 2 / (1/1e9 + 1/3e9) = 1.5e9
    assert fsdp.machine["link_bandwidth"] == pytest.approx(1.5e9)
    assert fsdp.collective_overhead == FRAMEWORK["fsdp"]
    pp = plan_profile(plans["pp2-1f1b"], _profile())
    assert pp.p2p_overhead == LAWS["send_recv"][0] and pp.machine["link_bandwidth"] == pytest.approx(LAWS["send_recv"][1])
    mix = plan_profile(plans["dp2-fsdp-tp2-sp"], _profile())
    assert mix.collective_overhead == pytest.approx(0.5 * (FRAMEWORK["fsdp"] + FRAMEWORK["tp-sp"]))


def test_a_profile_without_measured_laws_is_left_as_it_is() -> None:
    plain = CalibrationProfile(machine={"peak_flops": 1e11, "memory_bandwidth": 1e10})
    assert plan_profile(standard_plans(2)[0], plain) == plain
