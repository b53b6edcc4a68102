"""Scaling efficiency, lost-time fractions and the summary sentences follow the data."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from clustersim.reports.scaling import LOSS_CAUSES, SEGMENTS, largest_loss, lost_time_fractions, scaling_table
from clustersim.reports.summary import summary_sentences
from clustersim.reports.tables import best_rows, load_results

Factory = Callable[..., pd.DataFrame]


def test_fractions_sum_to_one(results_factory: Factory) -> None:
    frame = load_results(results_factory(clusters=("h100", "a100")))
    fractions = lost_time_fractions(best_rows(frame))
    total = fractions[[s.key for s in SEGMENTS]].sum(axis=1)
    np.testing.assert_allclose(total, 1.0, rtol=0, atol=1e-9)
    assert (fractions[[c.key for c in LOSS_CAUSES]] >= -1e-12).all().all()


def test_ideal_fraction_is_mfu(results_factory: Factory) -> None:
    frame = load_results(results_factory())
    best = best_rows(frame)
    # ideal compute share of the step = ideal_compute_s / step_time_s = MFU by definition
    np.testing.assert_allclose(lost_time_fractions(best)["ideal_compute"], best["mfu"],
                               rtol=1e-12)


def test_efficiency_is_one_at_smallest_scale_and_a_ratio(results_factory: Factory) -> None:
    curves = scaling_table(load_results(results_factory(clusters=("h100", "a100"),
                                                        counts=(16, 128, 1024))))
    for (_cluster, _series), group in curves.groupby(["cluster", "series"]):
        group = group.sort_values("num_gpus")
        assert group["scaling_efficiency"].iloc[0] == 1.0
        expected = group["tokens_per_s_per_gpu"] / group["tokens_per_s_per_gpu"].iloc[0]
        np.testing.assert_allclose(group["scaling_efficiency"], expected, rtol=1e-12)
        # losses grow with N in the synthetic data, so efficiency must fall monotonically
        assert group["scaling_efficiency"].is_monotonic_decreasing


def test_best_is_derived_when_absent(results_factory: Factory) -> None:
    frame = results_factory()
    frame = frame[frame["series"] != "best"]
    curves = scaling_table(load_results(frame))
    best = curves[curves["series"] == "best"].set_index("num_gpus")["tokens_per_s_per_gpu"]
    others = curves[curves["series"] != "best"].groupby("num_gpus")["tokens_per_s_per_gpu"].max()
    pd.testing.assert_series_equal(best, others, check_names=False)


def test_largest_loss_in_summary_follows_the_data(results_factory: Factory) -> None:
    dp_heavy = summary_sentences(load_results(results_factory(best_dp_loss=0.5)))
    bubble_heavy = summary_sentences(load_results(results_factory(bubble_loss=2.0)))
    assert "largest loss is exposed DP communication" in dp_heavy[0]
    assert "largest loss is pipeline bubble" in bubble_heavy[0]
    cause, share = largest_loss(lost_time_fractions(
        best_rows(load_results(results_factory(best_dp_loss=0.5)))).iloc[-1])
    assert cause.key == "exposed_dp" and f"({share:.0%} of step time)" in dp_heavy[0]


def test_summary_numbers_match_the_rows(results_factory: Factory) -> None:
    frame = load_results(results_factory(counts=(8, 64, 1024)))
    text = summary_sentences(frame)
    curves = scaling_table(frame)
    top = curves[(curves["series"] == "best") & (curves["num_gpus"] == 1024)].iloc[0]
    naive = curves[(curves["series"] == "naive_dp") & (curves["num_gpus"] == 1024)].iloc[0]
    assert text[0].startswith("At 1,024 GPUs on h100")
    assert f"{top['mfu']:.0%} MFU and {top['scaling_efficiency']:.0%} scaling efficiency" \
        in text[0]
    assert f"naive DP reaches {naive['scaling_efficiency']:.0%}" in text[0]
    assert text[-1] == "1 point failed to simulate and is listed under Errors."


def test_summary_names_cheapest_cluster(results_factory: Factory) -> None:
    from clustersim.reports.tables import with_costs
    frame = load_results(results_factory(clusters=("h100", "a100"), with_error=False))
    cheap_a100 = summary_sentences(with_costs(frame, {"h100": 10.0, "a100": 1.0}))
    cheap_h100 = summary_sentences(with_costs(frame, {"h100": 1.0, "a100": 1.0}))
    assert cheap_a100[-1].startswith("Cheapest per token: a100")
    assert cheap_h100[-1].startswith("Cheapest per token: h100")
