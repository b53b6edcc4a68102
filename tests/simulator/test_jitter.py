"""The wait for the slowest rank at synchronisation points: closed form against Monte Carlo, and
what the engine adds with it (issue 14, weak scaling)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustersim.simulator.calibration.fit_defaults import perturb
from clustersim.simulator.calibration.fit_first_order import JITTER_STEP, PARAMS, Bounds, fit
from clustersim.simulator.profile import SYNC_JITTER_MAX, CalibrationProfile, default_profile, load_profile
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.engine import EngineInput, run
from clustersim.simulator.step.jitter import (expected_max_multiplier, lognormal_sigma, mean_multiplier,
                                              sync_wait_fraction)
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

from tests.simulator.test_engine import stages
from tests.simulator.test_fit_defaults import BASE, TRUTH, _synthetic


@pytest.mark.parametrize("n,cv", [(1, 0.1), (8, 0.05), (128, 0.1), (512, 0.15), (4096, 0.08)])
def test_expected_max_matches_monte_carlo(n: int, cv: float) -> None:
    rng = np.random.default_rng(1234)
    reps = 4000
    draws = np.exp(lognormal_sigma(cv) * np.abs(rng.standard_normal((reps, n)))).max(axis=1)
    se = draws.std() / math.sqrt(reps)
    assert expected_max_multiplier(n, cv) == pytest.approx(draws.mean(), abs=4 * se)


def test_one_rank_is_the_exact_folded_lognormal_mean() -> None:
    # E[exp(s|Z|)] = 2 exp(s^2/2) Phi(s): the quadrature against the exact mean
    for cv in (0.01, 0.1, 0.3):
        assert expected_max_multiplier(1, cv) == pytest.approx(mean_multiplier(cv), rel=1e-7)
        assert sync_wait_fraction(1, cv) == 0.0


def test_the_wait_grows_with_ranks_and_jitter_and_like_sqrt_log_n() -> None:
    ns = [2, 16, 128, 512, 16384]
    waits = [sync_wait_fraction(n, 0.1) for n in ns]
    assert all(a < b for a, b in zip(waits, waits[1:]))
    assert sync_wait_fraction(512, 0.05) < sync_wait_fraction(512, 0.1) < sync_wait_fraction(512, 0.15)
    assert sync_wait_fraction(512, 0.0) == 0.0
    # extreme-value growth: E[max |Z|] ~ sqrt(2 ln 2n), so the wait at 16,384 ranks stays below
    # exp(s sqrt(2 ln 2n)) / E[one] - 1
    s = lognormal_sigma(0.1)
    assert waits[-1] < math.exp(s * math.sqrt(2 * math.log(2 * 16384))) / mean_multiplier(0.1) - 1


def test_bad_ranks_or_cv_raise() -> None:
    with pytest.raises(ValueError, match="ranks"):
        expected_max_multiplier(0, 0.1)
    with pytest.raises(ValueError, match="cv"):
        expected_max_multiplier(4, -0.1)


def test_engine_adds_the_wait_to_every_pass_of_compute() -> None:
    # one stage, no communication: step = m (f + b) (1 + wait), and the wait is logged as exposed DP
    f, b, m, wait = 1.0, 2.0, 4, 0.25
    inp = EngineInput(stages=stages(1, f, b), schedule="1f1b", microbatches=m, vpp=1, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, 1)), sync_wait=wait)
    log, t = run(inp)
    assert t == pytest.approx(m * (f + b) * (1 + wait), rel=1e-12)
    waited = sum(iv.end - iv.start for iv in log if iv.category == "exposed_dp")
    assert waited == pytest.approx(m * (f + b) * wait, rel=1e-12)


LLAMA = get_model("llama3-8b")


def test_simulate_waits_for_the_slowest_of_the_dp_ranks() -> None:
    training = TrainingSpec(seq_len=2048, global_batch_size=64)
    cluster = get_cluster("dgx-h100", 64)
    plan = ParallelPlan(tp=8, dp=8, zero=1)
    prof = default_profile(cluster.accelerator.name)
    assert prof.sync_jitter_cv == 0.0  # bundled profiles: no wait unless fitted
    base = simulate(LLAMA, training, cluster, plan, profile=prof)
    jit = simulate(LLAMA, training, cluster, plan, profile=prof.replace(sync_jitter_cv=0.1))
    compute = base.breakdown["compute"]
    waited = sum(iv.end - iv.start for iv in jit.intervals if iv.label.startswith("wait slowest rank"))
    assert waited == pytest.approx(compute * sync_wait_fraction(8, 0.1), rel=1e-9)
    # the DP stream runs on during the waits, so the step grows by at most the wait
    assert base.step_time < jit.step_time <= base.step_time + waited * (1 + 1e-12)
    # tp only (dp x cp = 1): nobody to wait for
    solo = ParallelPlan(tp=8, dp=1)
    one = get_cluster("dgx-h100", 8)
    t8 = TrainingSpec(seq_len=2048, global_batch_size=8)
    assert (simulate(LLAMA, t8, one, solo, profile=prof.replace(sync_jitter_cv=0.1)).step_time
            == simulate(LLAMA, t8, one, solo, profile=prof).step_time)


def test_the_fit_perturbs_the_jitter_by_a_step_within_its_bound() -> None:
    assert "jit" in PARAMS
    p = CalibrationProfile()
    assert perturb(p, "jit").sync_jitter_cv == pytest.approx(JITTER_STEP)
    high = p.replace(sync_jitter_cv=SYNC_JITTER_MAX)
    assert perturb(high, "jit").sync_jitter_cv == SYNC_JITTER_MAX


def test_a_jitter_outside_its_bound_names_the_field() -> None:
    with pytest.raises(CalibrationError, match="sync_jitter_cv"):
        load_profile({"sync_jitter_cv": 0.5})


def test_the_first_order_fit_recovers_a_known_jitter() -> None:
    # synthetic rows linear in the jitter (T = T0 + A (cv / JITTER_STEP)) on top of the efficiency
    # closed form of test_fit_defaults: the fit must return the cv the measured times were made with
    rng = np.random.default_rng(5)
    sens = _synthetic(TRUTH, rng)
    a_jit = rng.uniform(0.05, 0.3, size=len(sens))
    sens["jit"] = sens.base + a_jit  # the step time at cv = JITTER_STEP
    true_cv = 0.04
    sens["measured"] = sens.measured + a_jit * true_cv / JITTER_STEP
    free = Bounds(jitter=(0.0, SYNC_JITTER_MAX))
    got = fit(sens, profiles={"h100": BASE}, bounds=free)["h100"]
    assert got.sync_jitter_cv == pytest.approx(true_cv, abs=0.004)
    # by default the GPU fit keeps the jitter pinned at the profile's 0 (it worsened out of sample)
    assert fit(sens, profiles={"h100": BASE})["h100"].sync_jitter_cv == 0.0
    # and a truth beyond the bound stops at the bound
    sens["measured"] = sens.measured + a_jit * 1.0
    assert fit(sens, profiles={"h100": BASE}, bounds=free)["h100"].sync_jitter_cv <= SYNC_JITTER_MAX
