"""Failure rates and drawn timelines: closed-form rates, renewal counts, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustersim.simulator.longrun.checkpoint import LongRunError
from clustersim.simulator.longrun.failures import KINDS, FailureSpec, draw_failures, kind_rates, system_mtbf

HOUR = 3600.0
DAY = 86400.0


def test_rates_add_up() -> None:
    spec = FailureSpec(mtbf_gpu=1e6, mtbf_node=2e6, mtbf_link=4e6, system_mtbf=1e5, links_per_gpu=2)
    rates = kind_rates(spec, 64, 8)
    assert rates == pytest.approx({"gpu": 64 / 1e6, "node": 8 / 2e6, "link": 128 / 4e6, "system": 1e-5})
    assert system_mtbf(spec, 64, 8) == pytest.approx(1 / sum(rates.values()))
    assert system_mtbf(FailureSpec(), 64, 8) == math.inf


def test_llama3_interruption_rate() -> None:
    # Llama 3 paper, sec. 3.3.4: 419 unexpected interruptions in a 54-day snapshot -> one per 3.09 h
    spec = FailureSpec(system_mtbf=54 * DAY / 419)
    assert system_mtbf(spec, 16384, 8) / HOUR == pytest.approx(54 * 24 / 419)
    assert system_mtbf(spec, 16384, 8) / HOUR == pytest.approx(3.09, abs=0.01)


def test_exponential_count_matches_rate() -> None:
    spec = FailureSpec(mtbf_gpu=1000 * HOUR, mtbf_link=4000 * HOUR)
    rate = sum(kind_rates(spec, 512, 8).values())
    rng = np.random.default_rng(11)
    counts = [draw_failures(spec, num_gpus=512, gpus_per_node=8, horizon=30 * DAY, rng=rng).times.size
              for _ in range(300)]
    expected = rate * 30 * DAY
    assert abs(np.mean(counts) - expected) < 4 * math.sqrt(expected / 300)
    assert np.var(counts) == pytest.approx(expected, rel=0.25)  # Poisson: variance = mean


@pytest.mark.parametrize("shape", [0.7, 1.0, 2.0])
def test_weibull_renewal_rate(shape: float) -> None:
    # elementary renewal theorem: failures / horizon -> components / MTBF for a long horizon
    spec = FailureSpec(mtbf_gpu=100.0, distribution="weibull", weibull_shape=shape)
    timeline = draw_failures(spec, num_gpus=256, gpus_per_node=8, horizon=4e4,
                             rng=np.random.default_rng(5))
    assert timeline.times.size == pytest.approx(256 * 4e4 / 100.0, rel=0.03)
    assert np.all(np.diff(timeline.times) >= 0) and timeline.times.max() < 4e4


def test_kinds_and_swaps() -> None:
    spec = FailureSpec(mtbf_gpu=1e5, mtbf_link=1e5, system_mtbf=1e5 / 64, system_swap_fraction=0.25)
    tl = draw_failures(spec, num_gpus=64, gpus_per_node=8, horizon=1e7, rng=np.random.default_rng(2))
    link, gpu, system = (tl.kinds == KINDS.index(k) for k in ("link", "gpu", "system"))
    assert not tl.needs_swap[link].any() and tl.needs_swap[gpu].all()
    assert tl.needs_swap[system].mean() == pytest.approx(0.25, abs=0.05)
    assert link.mean() == pytest.approx(1 / 3, abs=0.03)  # three equal rates of 64/1e5


def test_seeded_draws_are_identical() -> None:
    spec = FailureSpec(mtbf_gpu=1e5, distribution="weibull", weibull_shape=0.8)
    first = draw_failures(spec, num_gpus=64, gpus_per_node=8, horizon=1e6, rng=np.random.default_rng(7))
    again = draw_failures(spec, num_gpus=64, gpus_per_node=8, horizon=1e6, rng=np.random.default_rng(7))
    other = draw_failures(spec, num_gpus=64, gpus_per_node=8, horizon=1e6, rng=np.random.default_rng(8))
    assert np.array_equal(first.times, again.times) and np.array_equal(first.kinds, again.kinds)
    assert not np.array_equal(first.times[:5], other.times[:5])


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(LongRunError, match="mtbf_gpu"):
        kind_rates(FailureSpec(mtbf_gpu=-1.0), 8, 8)
    with pytest.raises(LongRunError, match="weibull_shape"):
        kind_rates(FailureSpec(weibull_shape=0.0), 8, 8)
    with pytest.raises(LongRunError, match="horizon"):
        draw_failures(FailureSpec(), num_gpus=8, gpus_per_node=8, horizon=0.0, rng=np.random.default_rng(0))
