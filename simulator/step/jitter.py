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

Closed form: with M = max of n |Z_i|, P(M <= x) = erf(x / sqrt 2)^n, and for increasing g,
E[g(M)] = g(0) + int_0^inf g'(x) (1 - P(M <= x)) dx, integrated on a fixed grid (trapezoid,
0 <= x <= 12: P(|Z| > 12) < 1e-32, negligible for any rank count below 1e20).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

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
