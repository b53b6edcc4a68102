"""Static GPU-to-GPU speed variability: the slowest of a job's GPUs, closed forms against Monte
Carlo, and what simulate adds with it (issue 14, weak scaling)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustersim.simulator.profile import (GPU_VARIABILITY_CV_MEASURED, GPU_VARIABILITY_VARIATION,
                                          CalibrationProfile, default_profile, load_profile)
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.jitter import (expected_max_lognormal, expected_max_multiplier, lognormal_sigma, sync_wait_fraction,
                                              variability_wait_fraction)
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@pytest.mark.parametrize("cv", [0.01, GPU_VARIABILITY_CV_MEASURED, 0.1, 0.3])
def test_one_and_two_gpus_are_the_exact_lognormal_forms(cv: float) -> None:
    s = lognormal_sigma(cv)
    # E[exp(sZ)] = exp(s^2/2); E[max of two] = 2 exp(s^2/2) Phi(s / sqrt 2)
    assert expected_max_lognormal(1, cv) == pytest.approx(math.exp(s * s / 2), rel=1e-9)
    assert expected_max_lognormal(2, cv) == pytest.approx(2 * math.exp(s * s / 2) * _phi(s / math.sqrt(2)), rel=1e-9)
    assert variability_wait_fraction(1, cv) == 0.0


@pytest.mark.parametrize("n,cv", [(8, 0.05), (128, GPU_VARIABILITY_CV_MEASURED), (512, 0.1), (4096, 0.06)])
def test_expected_max_matches_monte_carlo(n: int, cv: float) -> None:
    rng = np.random.default_rng(2208)
    reps = 4000
    draws = np.exp(lognormal_sigma(cv) * rng.standard_normal((reps, n))).max(axis=1)
    se = draws.std() / math.sqrt(reps)
    assert expected_max_lognormal(n, cv) == pytest.approx(draws.mean(), abs=4 * se)


def test_the_wait_grows_with_gpus_and_cv_and_stays_below_the_folded_jitter() -> None:
    ns = [2, 16, 128, 512, 16384]
    waits = [variability_wait_fraction(n, 0.05) for n in ns]
    assert all(a < b for a, b in zip(waits, waits[1:]))
    assert variability_wait_fraction(512, 0.0) == 0.0
    assert variability_wait_fraction(512, 0.02) < variability_wait_fraction(512, 0.05)
    # |Z| >= Z: the slowest of n unfolded lognormals is below the slowest of n folded ones
    for n in ns:
        assert expected_max_lognormal(n, 0.05) < expected_max_multiplier(n, 0.05)
    # extreme-value bound: E[max Z] <= sqrt(2 ln n), so E[max e^(sZ)] <= e^(s sqrt(2 ln n) + s^2/2)
    s = lognormal_sigma(0.05)
    assert expected_max_lognormal(16384, 0.05) < math.exp(s * math.sqrt(2 * math.log(16384)) + s * s / 2)


def test_bad_gpus_or_cv_raise() -> None:
    with pytest.raises(ValueError, match="GPUs"):
        expected_max_lognormal(0, 0.1)
    with pytest.raises(ValueError, match="cv"):
        expected_max_lognormal(4, -0.1)
    with pytest.raises(CalibrationError, match="gpu_variability_cv"):
        load_profile({"gpu_variability_cv": 0.5})


def test_the_cited_constant_is_the_whisker_reading_of_the_published_variation() -> None:
    # Sinha et al. (SC'22): 8 % average variation; the whiskers at the 1.5 IQR fences span 4 IQR,
    # IQR = 2 x 0.6745 sigma for a normal
    assert GPU_VARIABILITY_VARIATION == 0.08
    iqr = 2 * 0.67449
    assert GPU_VARIABILITY_CV_MEASURED == pytest.approx(0.08 / (4 * iqr), abs=1e-4)
    assert CalibrationProfile().gpu_variability_cv == 0.0  # a field default that changes nothing


def _artifact_percent_variability(perf: np.ndarray) -> float:
    """The statistic of Sinha et al.'s artifact (plot_script/plot_aggregated.py): the span of the
    box plot's 1.5 IQR fences over the median, in percent."""
    q1, q2, q3 = np.quantile(perf, [0.25, 0.5, 0.75])
    iqr = q3 - q1
    return float((q3 + 1.5 * iqr - (q1 - 1.5 * iqr)) / q2 * 100)


def test_the_artifacts_statistic_of_gpus_at_the_cited_cv_is_the_published_8_percent() -> None:
    # thousands of GPUs whose speed is lognormal at the installed cv: the artifact's statistic reads 8 %;
    # the interquartile reading's cv (4x larger) would read 32 %
    rng = np.random.default_rng(14)
    s = lognormal_sigma(GPU_VARIABILITY_CV_MEASURED)
    perf = np.exp(s * rng.standard_normal(200_000))
    assert _artifact_percent_variability(perf) == pytest.approx(100 * GPU_VARIABILITY_VARIATION, rel=0.02)
    wide = np.exp(lognormal_sigma(GPU_VARIABILITY_VARIATION / 1.349) * rng.standard_normal(200_000))
    assert _artifact_percent_variability(wide) == pytest.approx(4 * 100 * GPU_VARIABILITY_VARIATION, rel=0.03)


LLAMA = get_model("llama3-8b")


def test_simulate_waits_for_the_slowest_gpu_of_the_job() -> None:
    training = TrainingSpec(seq_len=2048, global_batch_size=64)
    cluster = get_cluster("dgx-h100", 64)
    plan = ParallelPlan(tp=8, dp=8, zero=1)
    prof = default_profile(cluster.accelerator.name)
    assert prof.gpu_variability_cv == 0.0  # bundled profiles: every GPU alike
    base = simulate(LLAMA, training, cluster, plan, profile=prof)
    var = simulate(LLAMA, training, cluster, plan, profile=prof.replace(gpu_variability_cv=0.05))
    compute = base.breakdown["compute"]
    waited = sum(iv.end - iv.start for iv in var.intervals if iv.label.startswith("wait slowest rank"))
    # over all 64 GPUs of the job (tp x dp), not the 8 dp ranks the jitter counts
    assert waited == pytest.approx(compute * variability_wait_fraction(64, 0.05), rel=1e-9)
    assert base.step_time < var.step_time <= base.step_time + waited * (1 + 1e-12)
    # with the jitter as well, the two multiply
    both = simulate(LLAMA, training, cluster, plan, profile=prof.replace(gpu_variability_cv=0.05, sync_jitter_cv=0.1))
    waited2 = sum(iv.end - iv.start for iv in both.intervals if iv.label.startswith("wait slowest rank"))
    f = (1 + sync_wait_fraction(8, 0.1)) * (1 + variability_wait_fraction(64, 0.05)) - 1
    assert waited2 == pytest.approx(compute * f, rel=1e-9)
    # tp only, one node: the 8 GPUs of the TP group still wait for their slowest
    one, t8 = get_cluster("dgx-h100", 8), TrainingSpec(seq_len=2048, global_batch_size=8)
    solo = ParallelPlan(tp=8, dp=1)
    assert (simulate(LLAMA, t8, one, solo, profile=prof.replace(gpu_variability_cv=0.05)).step_time
            > simulate(LLAMA, t8, one, solo, profile=prof).step_time)
