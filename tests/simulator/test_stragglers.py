"""Stragglers: multipliers never speed a step up, the slowest rank gates, the tail is ordered."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustersim.simulator.longrun.checkpoint import LongRunError
from clustersim.simulator.scenario import scenario_from_dict
from clustersim.simulator.longrun.stragglers import (StragglerSpec, SymmetricStep, draw_compute_scale, draw_jitter,
                                  draw_slow_devices, step_time_distribution)

STEP = SymmetricStep(compute_time=6.0, comm_time=1.0, num_ranks=1024)


def test_scales_are_never_below_one() -> None:
    spec = StragglerSpec(jitter_cv=0.3, slow_device_fraction=0.01, slow_device_factor=1.5)
    scale = draw_compute_scale(spec, 4096, np.random.default_rng(0))
    assert scale.shape == (4096,) and scale.min() >= 1.0
    assert np.array_equal(draw_compute_scale(StragglerSpec(), 64, np.random.default_rng(0)), np.ones(64))


def test_slow_device_count_and_factor() -> None:
    spec = StragglerSpec(slow_device_fraction=0.01, slow_device_factor=1.25)
    slow = draw_slow_devices(spec, 1000, np.random.default_rng(1))
    assert (slow == 1.25).sum() == 10 and (slow == 1.0).sum() == 990


def test_jitter_log_is_half_normal() -> None:
    # log(scale) = sigma |Z|: mean sigma sqrt(2/pi), sigma = sqrt(ln(1 + cv^2))
    cv = 0.1
    logs = np.log(draw_jitter(StragglerSpec(jitter_cv=cv), (200_000,), np.random.default_rng(2)))
    sigma = math.sqrt(math.log1p(cv**2))
    assert logs.mean() == pytest.approx(sigma * math.sqrt(2 / math.pi), rel=0.01)


def test_no_stragglers_reproduces_the_base_step() -> None:
    dist = step_time_distribution(STEP, StragglerSpec(), 50, np.random.default_rng(3))
    assert np.all(dist.step_times == 7.0) and dist.base_step_time == 7.0
    assert np.all(dist.rank_wait_time == 0.0)


def test_stragglers_never_make_a_step_faster_and_tail_is_ordered() -> None:
    spec = StragglerSpec(jitter_cv=0.05, slow_device_fraction=0.001, slow_device_factor=1.2,
                         slow_link_fraction=0.01, slow_link_factor=2.0)
    dist = step_time_distribution(STEP, spec, 200, np.random.default_rng(4))
    assert dist.step_times.min() >= dist.base_step_time
    assert dist.base_step_time <= dist.p50 <= dist.p99 <= dist.max
    assert np.all(dist.rank_wait_time >= 0.0)


def test_only_slow_devices_is_the_closed_form() -> None:
    spec = StragglerSpec(slow_device_fraction=0.01, slow_device_factor=1.3,
                         slow_link_fraction=0.01, slow_link_factor=1.5)
    dist = step_time_distribution(STEP, spec, 10, np.random.default_rng(5))
    assert dist.step_times == pytest.approx(np.full(10, 6.0 * 1.3 + 1.0 * 1.5))


def test_the_straggler_waits_least() -> None:
    spec = StragglerSpec(jitter_cv=0.02, slow_device_fraction=1 / 1024, slow_device_factor=1.1)
    rng = np.random.default_rng(6)
    dist = step_time_distribution(STEP, spec, 100, rng)
    slow = draw_slow_devices(spec, 1024, np.random.default_rng(6))  # same first draw as inside
    assert dist.straggler_rank == int(np.argmax(slow))
    assert dist.rank_wait_time[dist.straggler_rank] < np.median(dist.rank_wait_time)


def test_more_jitter_is_never_faster_with_common_random_numbers() -> None:
    means = [step_time_distribution(STEP, StragglerSpec(jitter_cv=cv), 100, np.random.default_rng(7)).mean
             for cv in (0.01, 0.05, 0.2)]
    assert means[0] < means[1] < means[2]


def test_16k_ranks_is_fast_and_deterministic() -> None:
    step = SymmetricStep(compute_time=6.0, comm_time=0.7, num_ranks=16384)
    spec = StragglerSpec(jitter_cv=0.03, slow_device_fraction=1e-4, slow_device_factor=1.5)
    first = step_time_distribution(step, spec, 200, np.random.default_rng(8))
    again = step_time_distribution(step, spec, 200, np.random.default_rng(8))
    assert np.array_equal(first.step_times, again.step_times)
    # round(1e-4 x 16,384) = 2 slow devices gate every step: at least 1.5x the compute
    assert first.step_times.min() >= 6.0 * 1.5 + 0.7


def test_jitter_only_median_step_is_the_extreme_value_closed_form() -> None:
    # gate = exp(sigma * max_r |Z_r|); P(max |Z| < x) = (2 Phi(x) - 1)^n, so the median step has
    # 2 Phi(x) - 1 = 0.5^(1/n), i.e. erf(x / sqrt 2) = 0.5^(1/n)
    n, cv = 16384, 0.03
    target = 0.5 ** (1 / n)
    low, high = 0.0, 10.0
    for _ in range(60):  # bisection for x
        mid = (low + high) / 2
        low, high = (mid, high) if math.erf(mid / math.sqrt(2)) < target else (low, mid)
    sigma = math.sqrt(math.log1p(cv**2))
    step = SymmetricStep(compute_time=6.0, comm_time=0.7, num_ranks=n)
    dist = step_time_distribution(step, StragglerSpec(jitter_cv=cv), 300, np.random.default_rng(9))
    assert dist.p50 == pytest.approx(6.0 * math.exp(sigma * low) + 0.7, rel=0.005)


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(LongRunError, match="slow_device_factor"):
        step_time_distribution(STEP, StragglerSpec(slow_device_factor=0.5), 10, np.random.default_rng(0))
    with pytest.raises(LongRunError, match="jitter_cv"):
        step_time_distribution(STEP, StragglerSpec(jitter_cv=-0.1), 10, np.random.default_rng(0))


# --- full mode: one engine step per simulated step --------------------------------------------

def _tiny_scenario():
    return scenario_from_dict({"model": "tiny", "training": {"seq_len": 512, "global_batch_size": 32},
                               "cluster": {"preset": "dgx-h100", "num_gpus": 16},
                               "plan": {"tp": 2, "pp": 2, "dp": 4, "micro_batch": 1}})


def test_engine_steps_are_never_faster_and_the_straggler_waits_least() -> None:
    spec = StragglerSpec(jitter_cv=0.05, slow_device_fraction=1 / 16, slow_device_factor=1.5)
    dist = step_time_distribution(_tiny_scenario(), spec, 4, np.random.default_rng(0))
    assert dist.step_times.min() >= dist.base_step_time
    assert dist.p50 <= dist.p99 <= dist.max
    slow = draw_slow_devices(spec, 16, np.random.default_rng(0))  # the run's first draw
    assert dist.straggler_rank == int(np.argmax(slow))
    assert len(dist.rank_wait_time) == 16 and np.all(dist.rank_wait_time >= 0)


def test_engine_without_stragglers_matches_the_base_step() -> None:
    dist = step_time_distribution(_tiny_scenario(), StragglerSpec(), 2, np.random.default_rng(0))
    assert dist.step_times == pytest.approx([dist.base_step_time] * 2, rel=1e-12)
