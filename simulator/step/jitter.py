"""The expected wait for the slowest rank at a synchronisation point (per-rank compute jitter).

Owns the closed forms of the jitter model the straggler module draws from
(``clustersim.simulator.longrun.stragglers``): each rank's compute between two synchronisation
points is multiplied by exp(sigma |Z|), Z ~ N(0, 1), sigma = sqrt(ln(1 + cv^2)) (a lognormal of
coefficient of variation ``cv``, folded at 1: noise only slows a device). When ``n`` ranks meet
(an FSDP gather, a DP reduction, the step's end), everyone waits for the slowest: the interval
lasts E[max of n multipliers] instead of E[one multiplier]. ``sync_wait_fraction`` is that
ratio minus 1, the seconds of waiting per second of (mean-rate) compute; it is 0 for one rank and
grows like sigma * sqrt(2 ln 2n) with the ranks. It does not schedule anything (the engine adds
the wait, ``clustersim.simulator.step.engine``) nor draw per-rank samples (the straggler model).

Also the static counterpart (``variability_wait_fraction``): GPUs of one SKU differ in speed for
the whole run (manufacturing and power management; ``profile.gpu_variability_cv``), each GPU's
time multiplier exp(sigma Z) unfolded around the median, and a job whose every rank synchronises
every step runs at its slowest GPU's pace: E[max of n] / E[one] - 1 over the job's GPUs.

Closed form: with M = max of n |Z_i|, P(M <= x) = erf(x / sqrt 2)^n, and for increasing g,
E[g(M)] = g(0) + int_0^inf g'(x) (1 - P(M <= x)) dx, integrated on a fixed grid (trapezoid,
0 <= x <= 12: P(|Z| > 12) < 1e-32, negligible for any rank count below 1e20).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from clustersim.simulator.profile import (SYNC_JITTER_CV_MEASURED, SYNC_JITTER_CV_SHORT, SYNC_JITTER_MAX,
                                          SYNC_JITTER_PASS_S, SYNC_JITTER_SHORT_PASS_S)

_GRID = np.linspace(0.0, 12.0, 6001)
"""Quadrature points of x = max |Z| (step 0.002; the integrand is smooth)."""
_LOG_CDF = np.log1p(-np.array([math.erfc(x / math.sqrt(2.0)) for x in _GRID[1:]]))
"""log P(|Z| <= x) on the grid, x > 0 (erfc keeps the tail accurate where P is near 1)."""


def lognormal_sigma(cv: float) -> float:
    """Log-sd of a lognormal with coefficient of variation ``cv``: sqrt(ln(1 + cv^2))."""
    return math.sqrt(math.log1p(cv * cv))


@lru_cache(maxsize=4096)
def expected_max_multiplier(n: int, cv: float) -> float:
    """E[max over ``n`` ranks of exp(sigma |Z|)], the slowest rank's expected compute multiplier."""
    if n < 1:
        raise ValueError(f"ranks n = {n} must be >= 1")
    if not 0.0 <= cv < 10.0:
        raise ValueError(f"jitter cv = {cv} must lie in [0, 10)")
    s = lognormal_sigma(cv)
    if s == 0.0:
        return 1.0
    tail = np.concatenate([[1.0], -np.expm1(n * _LOG_CDF)])  # 1 - P(M <= x); 1 at x = 0
    return 1.0 + float(np.trapezoid(s * np.exp(s * _GRID) * tail, _GRID))


def mean_multiplier(cv: float) -> float:
    """E[exp(sigma |Z|)] = 2 exp(sigma^2 / 2) Phi(sigma), one rank's mean multiplier (exact)."""
    s = lognormal_sigma(cv)
    return math.exp(s * s / 2.0) * (1.0 + math.erf(s / math.sqrt(2.0)))


def sync_wait_fraction(n: int, cv: float) -> float:
    """Seconds waited for the slowest of ``n`` ranks per second of mean-rate compute:
    E[max of n multipliers] / E[one multiplier] - 1 (0 for n = 1 or cv = 0)."""
    if n <= 1 or cv == 0.0:
        return 0.0
    return expected_max_multiplier(n, cv) / expected_max_multiplier(1, cv) - 1.0


PASS_LENGTH_EXPONENT = math.log(SYNC_JITTER_CV_SHORT / SYNC_JITTER_CV_MEASURED) / math.log(
    SYNC_JITTER_PASS_S / SYNC_JITTER_SHORT_PASS_S)
"""b of the pass-length law cv(T) = cv_ref (T / T_ref)^-b through the two chunks measured on one
H200 (``profile.SYNC_JITTER_CV_MEASURED`` at 53.6 ms, ``SYNC_JITTER_CV_SHORT`` at 6.43 ms):
ln(0.090 / 0.0209) / ln(53.6 / 6.43) = 0.689 (independent noise per kernel alone would give 0.5)."""


def pass_jitter_cv(cv_ref: float, seconds: float) -> float:
    """``sync_jitter_cv`` of one pass of ``seconds`` of compute under the measured pass-length law:
    ``cv_ref`` is the cv of a ``SYNC_JITTER_PASS_S`` (53.6 ms) pass, and the cv scales as
    (T / 53.6 ms)^-``PASS_LENGTH_EXPONENT``, so ``cv_ref`` = 0.0209 gives the 6.43 ms chunk's 0.090.
    T is held inside the measured range [6.43 ms, 53.6 ms] (no extrapolation: a longer pass jitters
    as the 53.6 ms one, a shorter one as the 6.43 ms one), the cv capped at ``SYNC_JITTER_MAX``."""
    if cv_ref == 0.0:
        return 0.0
    t = min(max(seconds, SYNC_JITTER_SHORT_PASS_S), SYNC_JITTER_PASS_S)
    return min(cv_ref * math.pow(t / SYNC_JITTER_PASS_S, -PASS_LENGTH_EXPONENT), SYNC_JITTER_MAX)


def pass_wait_fraction(n: int, cv_ref: float, seconds: float) -> float:
    """``sync_wait_fraction`` of ``n`` ranks at the cv of a ``seconds`` pass (``pass_jitter_cv``);
    the cv is rounded to 5 digits so that the closed form's cache serves every pass of one length."""
    return sync_wait_fraction(n, round(pass_jitter_cv(cv_ref, seconds), 5))


_NORMAL_GRID = np.linspace(-12.0, 12.0, 12001)
"""Quadrature points of x = max Z (step 0.002); below -12 and above 12 the normal tails are < 1e-32."""
_LOG_PHI = np.array([math.log(0.5 * math.erfc(-x / math.sqrt(2.0))) if x < 0.0
                     else math.log1p(-0.5 * math.erfc(x / math.sqrt(2.0))) for x in _NORMAL_GRID])
"""log Phi(x) on the grid (erfc of the nearer tail keeps both ends accurate)."""


@lru_cache(maxsize=4096)
def expected_max_lognormal(n: int, cv: float) -> float:
    """E[max over ``n`` GPUs of exp(sigma Z)], Z ~ N(0, 1) unfolded (a GPU may be faster or slower
    than the median): the slowest GPU's expected time multiplier. With M = max of n Z_i,
    P(M <= x) = Phi(x)^n and E[e^(sigma M)] = e^(-12 sigma) + int_-12^12 sigma e^(sigma x)
    (1 - Phi(x)^n) dx (the mass below -12 is < n 1e-32). n = 1: exp(sigma^2 / 2); n = 2:
    2 exp(sigma^2 / 2) Phi(sigma / sqrt 2)."""
    if n < 1:
        raise ValueError(f"GPUs n = {n} must be >= 1")
    if not 0.0 <= cv < 10.0:
        raise ValueError(f"GPU variability cv = {cv} must lie in [0, 10)")
    s = lognormal_sigma(cv)
    if s == 0.0:
        return 1.0
    tail = -np.expm1(n * _LOG_PHI)  # 1 - Phi(x)^n
    lo = float(_NORMAL_GRID[0])
    return math.exp(s * lo) + float(np.trapezoid(s * np.exp(s * _NORMAL_GRID) * tail, _NORMAL_GRID))


def variability_wait_fraction(n: int, cv: float) -> float:
    """Seconds of compute lost to the slowest of ``n`` GPUs of one job, per second of a mean GPU's
    compute, under static GPU-to-GPU speed variability (manufacturing and power management: the
    same GPU is slow all run long, ``profile.gpu_variability_cv``): E[max of n] / E[one] - 1 of
    the unfolded lognormal (0 for n = 1 or cv = 0)."""
    if n <= 1 or cv == 0.0:
        return 0.0
    return expected_max_lognormal(n, cv) / expected_max_lognormal(1, cv) - 1.0
