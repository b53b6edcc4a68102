"""The wait for the slowest rank at synchronisation points: closed form against Monte Carlo, and
what the engine adds with it (issue 14, weak scaling)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from clustersim.simulator.calibration.fit_defaults import perturb
from clustersim.simulator.calibration.fit_first_order import fit
from clustersim.simulator.calibration.fit_params import JITTER_MEASURED, JITTER_STEP, PARAMS, Bounds, jitter_start
from clustersim.simulator.profile import (SYNC_JITTER_CV_MEASURED, SYNC_JITTER_MAX, CalibrationProfile, default_profile,
                                         load_profile)
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.engine import EngineInput, run
from clustersim.simulator.step.jitter import (expected_max_multiplier, lognormal_sigma, mean_multiplier,
                                              pass_jitter_cv, pass_wait_fraction, sync_wait_fraction)
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


def test_a_jitter_pinned_at_a_measured_cv_is_known_to_the_fit_of_the_rest() -> None:
    # rows made with the efficiency closed form at TRUTH plus the wait of a known cv c (linear in
    # the jit column); the fit pinned at c (Bounds.jitter = (c, c)) must return c and recover
    # TRUTH's efficiencies, as the fit does without jitter. Before jitter_start, the search began at
    # cv 0 outside (c, c), rejected every move and returned the base profile unfitted.
    rng = np.random.default_rng(7)
    sens = _synthetic(TRUTH, rng)
    a_jit = rng.uniform(0.05, 0.3, size=len(sens))
    sens["jit"] = sens.base + a_jit
    c = JITTER_MEASURED[0]
    assert c == SYNC_JITTER_CV_MEASURED == 0.0209
    sens["measured"] = sens.measured + a_jit * c / JITTER_STEP
    got = fit(sens, profiles={"h100": BASE}, bounds=Bounds(jitter=JITTER_MEASURED))["h100"]
    assert got.sync_jitter_cv == c
    gemm = np.array([e for _, e in got.gemm_efficiency])
    want = np.array([e for _, e in BASE.gemm_efficiency]) * np.array([TRUTH[f"g{j}"] for j in range(6)])
    np.testing.assert_allclose(gemm, want, rtol=0.03)
    assert got.memory_efficiency == pytest.approx(BASE.memory_efficiency * TRUTH["mem"], rel=0.03)
    # blind to the wait (pinned at 0), the same rows fit a slower GEMM curve: the wait is absorbed
    blind = fit(sens, profiles={"h100": BASE})["h100"]
    assert blind.sync_jitter_cv == 0.0
    assert np.mean([e for _, e in blind.gemm_efficiency]) < np.mean(gemm)


def test_the_jitter_start_moves_the_base_cv_into_its_bounds() -> None:
    assert jitter_start(0.0, (0.0, 0.0)) == 1.0
    assert jitter_start(0.0, (0.02, 0.02)) == pytest.approx(1.2)
    assert jitter_start(0.05, (0.0, SYNC_JITTER_MAX)) == 1.0
    assert jitter_start(0.2, (0.0, 0.15)) == pytest.approx(0.5)


def test_a_fit_that_cannot_start_inside_its_bounds_says_so() -> None:
    # a base profile already beyond the bounds (fp8 factor 1.5 > 1.2): no move could be accepted
    sens = _synthetic(TRUTH, np.random.default_rng(3))
    with pytest.raises(CalibrationError, match="bounds"):
        fit(sens, profiles={"h100": BASE.replace(precision_efficiency={"fp8": 1.5, "fp4": 1.0})})


def _law_cv(cv_ref: float, t: float) -> float:
    # the law by hand: log-linear through (53.6 ms, cv_ref) with the slope of the two H200 chunks
    b = math.log(0.090 / 0.0209) / math.log(53.6 / 6.43)
    return cv_ref * (min(max(t, 6.43e-3), 53.6e-3) / 53.6e-3) ** -b


def test_the_pass_length_law_passes_through_both_measured_chunks() -> None:
    assert pass_jitter_cv(0.0209, 53.6e-3) == pytest.approx(0.0209, rel=1e-12)
    assert pass_jitter_cv(0.0209, 6.43e-3) == pytest.approx(0.090, rel=1e-12)
    # log-linear between them: the geometric middle of the lengths has the geometric middle of the cvs
    assert pass_jitter_cv(0.0209, math.sqrt(6.43e-3 * 53.6e-3)) == pytest.approx(math.sqrt(0.0209 * 0.090), rel=1e-12)
    # no extrapolation outside the measured lengths, and shorter passes never jitter less
    assert pass_jitter_cv(0.0209, 2.0) == pytest.approx(0.0209, rel=1e-12)
    assert pass_jitter_cv(0.0209, 1e-4) == pytest.approx(0.090, rel=1e-12)
    lengths = np.geomspace(1e-3, 1.0, 40)
    cvs = [pass_jitter_cv(0.0209, t) for t in lengths]
    assert all(a >= b for a, b in zip(cvs, cvs[1:]))
    assert pass_jitter_cv(0.0, 1e-3) == 0.0
    assert pass_jitter_cv(0.1, 1e-3) == SYNC_JITTER_MAX  # 0.1 x 4.3 capped at the field's bound


def test_engine_waits_per_pass_at_the_cv_of_its_length() -> None:
    # one stage: forward 10 ms and backward 30 ms per micro-batch, 16 ranks; each pass waits its own
    # E[max of 16] / E[one] - 1 at the law's cv for its length: step = m sum_p t_p (1 + w(16, cv(t_p)))
    f, b, m, n = 0.010, 0.030, 4, 16
    law = functools.partial(pass_wait_fraction, n, 0.0209)
    inp = EngineInput(stages=stages(1, f, b), schedule="1f1b", microbatches=m, vpp=1, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, 1)), sync_wait=0.5, sync_wait_of=law)
    _, t = run(inp)
    want = m * sum(p * (1 + sync_wait_fraction(n, _law_cv(0.0209, p))) for p in (f, b))
    assert t == pytest.approx(want, rel=1e-4)  # the cv is rounded to 5 digits for the cache
    assert t > m * (f + b) * (1 + sync_wait_fraction(n, 0.0209))  # both passes shorter than 53.6 ms


def test_simulate_with_the_pass_length_law_waits_each_pass_at_its_own_cv() -> None:
    training = TrainingSpec(seq_len=2048, global_batch_size=64)
    cluster = get_cluster("dgx-h100", 64)
    plan = ParallelPlan(tp=8, dp=8, zero=1)
    prof = default_profile(cluster.accelerator.name).replace(sync_jitter_cv=0.0209)
    assert prof.sync_jitter_law == "constant"
    law = simulate(LLAMA, training, cluster, plan, profile=prof.replace(sync_jitter_law="pass_length"))
    computes = {iv.label: iv.end - iv.start for iv in law.intervals if iv.category == "compute"}
    waits = [(iv.label.removeprefix("wait slowest rank "), iv.end - iv.start) for iv in law.intervals
             if iv.label.startswith("wait slowest rank")]
    assert waits
    for label, wait in waits:
        d = computes[label]
        assert wait == pytest.approx(d * sync_wait_fraction(8, _law_cv(0.0209, d)), rel=1e-3)
    # the constant law is the old one, bit for bit
    const = simulate(LLAMA, training, cluster, plan, profile=prof)
    waited = sum(iv.end - iv.start for iv in const.intervals if iv.label.startswith("wait slowest rank"))
    assert waited == pytest.approx(const.breakdown["compute"] * sync_wait_fraction(8, 0.0209), rel=1e-9)
