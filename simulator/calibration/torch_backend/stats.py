"""The statistics of the measurement protocol: medians, their confidence intervals, settling.

Owns the distribution-free confidence interval of a median (order statistics, no normality
assumed: step times on a shared host are skewed by preemption), the stop rule of the repeats
(the interval's relative width under a target) and the settle rule of the warm-up. Pure Python,
no torch, no numpy, so every rank and the launcher apply the same rules. It does not time
anything (``runners``) nor decide what is measured (``measure``).
"""

from __future__ import annotations

import math
from typing import Sequence

CONFIDENCE = 0.95
"""Two-sided confidence of the median's interval."""


def median(xs: Sequence[float]) -> float:
    """Median of a non-empty sequence (mean of the two middle values for an even count)."""
    s = sorted(xs)
    if not s:
        raise ValueError("median of no samples")
    n = len(s)
    return 0.5 * (s[(n - 1) // 2] + s[n // 2])


def _binom_cdf_half(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n


def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based order-statistic ranks (lo, hi) whose values bracket the median with ``confidence``.

    The j-th smallest of n samples lies below the median with probability P(B >= j), B ~
    Binomial(n, 1/2); [x_(j), x_(n-j+1)] covers it with 1 - 2 P(B <= j - 1). j is the largest
    rank keeping that coverage >= ``confidence`` (j = 1, the range, when none does: n <= 5).
    """
    if n < 1:
        raise ValueError("median_ci_ranks needs at least one sample")
    alpha = (1.0 - confidence) / 2.0
    j = 1
    while j + 1 <= (n + 1) // 2 and _binom_cdf_half(j, n) <= alpha:
        j += 1
    return j - 1, n - j


def median_ci(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free ``confidence`` interval of the median of ``xs`` (order statistics)."""
    s = sorted(xs)
    lo, hi = median_ci_ranks(len(s), confidence)
    return s[lo], s[hi]


def ci_relative_width(xs: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """(upper - lower) / median of the median's interval: the stop rule's figure."""
    lo, hi = median_ci(xs, confidence)
    return (hi - lo) / median(xs)


def enough_repeats(xs: Sequence[float], *, minimum: int, maximum: int, width: float) -> bool:
    """Stop timing: at the cap, or past the minimum once the median's interval is within ``width``."""
    n = len(xs)
    if n >= maximum:
        return True
    return n >= minimum and ci_relative_width(xs) <= width


def settled(xs: Sequence[float], *, window: int, tolerance: float) -> bool:
    """The warm-up has settled: the last ``window`` step times each lie within ``tolerance``
    (relative) of their median, so allocator, autograd-graph and connection set-up are done."""
    if len(xs) < window:
        return False
    last = xs[-window:]
    m = median(last)
    return all(abs(x / m - 1.0) <= tolerance for x in last)


def pass_steps(repeats: int, passes: int) -> int:
    """Timed steps of each plan in one pass of the interleaved protocol: the minimum ``repeats``
    spread over the minimum ``passes`` (at least one step a pass)."""
    return max(1, repeats // max(1, passes))


def pass_order(plans: int, k: int) -> list[int]:
    """Indices of ``plans`` in the order pass ``k`` (0-based) times them: rotated by ``k``, so over
    ``plans`` passes every plan takes every position (none always runs first after the others)."""
    return [(i + k) % plans for i in range(plans)]


def enough_passes(times: Sequence[Sequence[float]], *, passes_done: int, min_passes: int, minimum: int,
                  maximum: int, width: float, budget: float) -> bool:
    """Stop the interleaved protocol after a pass. ``times``: every plan's timed steps so far (all
    plans hold the same count). Stop at the cap, or once past ``min_passes`` passes and ``minimum``
    steps either every plan's median interval is within ``width`` or the plans' timed seconds add
    up to ``budget``."""
    n = min(len(t) for t in times)
    if n >= maximum:
        return True
    if passes_done < min_passes or n < minimum:
        return False
    narrow = all(ci_relative_width(t) <= width for t in times)
    return narrow or sum(sum(t) for t in times) >= budget


def pass_medians(xs: Sequence[float], passes: Sequence[int]) -> list[float]:
    """Median of each pass's steps (``passes``: the pass index of each step), in pass order."""
    if len(xs) != len(passes):
        raise ValueError(f"{len(xs)} step times but {len(passes)} pass indices")
    return [median([x for x, p in zip(xs, passes) if p == k]) for k in sorted(set(passes))]
