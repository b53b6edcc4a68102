"""Steady-state extrapolation of one step: engine cost independent of the number of micro-batches.

A pipeline schedule of m micro-batches is a warm-up, a periodic steady state and a cool-down;
``c`` more micro-batches (1; pp for the interleaved schedule's groups of pp; 2 for DualPipe's two
halves) add one period to the middle of every stream and shift what follows. ``extrapolate`` runs
the engine at three small counts m1, m1 + c and m1 + 2c (m1 = m mod c), aligns, stream by stream,
run A (m1) with run B (m1 + c) as "A with blocks inserted" (same category, pass kind and chunk,
duration and gap to the previous interval, within ``TOLERANCE`` of the step; each block repeats
the intervals just before it, so it is a period) and some intervals grown (GPipe's idle between
its forward and backward phases, or a gap before the cool-down, lengthens by the same amount per
period), predicts run C (m1 + 2c) from that alignment and accepts it only if C matches the
prediction interval by interval. The step at m is A with n = (m - m1) / c copies of each block
and each growth applied n times: exact up to float rounding (the tests compare it with the full
run). The inserted periods come back compressed: one interval per category of a block, n
times as long, labelled as such, so sums, the critical unit and the trace read them as they read
the full run, and memory does not grow with m. When no period is found (a transient longer than
the short runs) ``extrapolate`` returns None and the caller runs every micro-batch.

It does not simulate anything itself (the engine does, through the ``simulate`` callable), and it
knows no schedule: the period is found from the intervals alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from clustersim.simulator.step.interval import Interval

Simulate = Callable[[int], tuple[list[Interval], float]]
"""The engine at a given number of micro-batches: (intervals, step time)."""
StreamKey = tuple[int, int, str]
TOLERANCE: float = 1e-10
"""Largest time difference, as a fraction of the step, still counted as the same gap or duration."""
BUDGET: float = 1 / 3
"""Most micro-batches the short runs may simulate in all, as a fraction of ``m``: when no period is
confirmed the full run follows, so a failed search costs at most a third more."""
ATTEMPTS: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 2), (4, 2), (6, 2), (8, 2))
"""(period in schedule units of micro-batches, multiple of ``base`` the short runs start from),
tried in order: short periods after a short warm-up first."""
WINDOW: int = 3
"""Intervals after an inserted block that must match again for the block to be accepted."""
_PASS = re.compile(r"^([FBW])(\d+)\.(\d+)$")


@dataclass(frozen=True)
class _Insert:
    """A block of run B that run A lacks: B[start : start + length] goes before A[at]."""

    at: int
    start: int
    length: int


@dataclass(frozen=True)
class _Alignment:
    """One stream of run A, the same stream of run B, and how B is A with periods inserted."""

    a: list[Interval]
    b: list[Interval]
    inserts: tuple[_Insert, ...]
    match: tuple[int, ...]
    """Index in B of each interval of A."""
    growth: tuple[tuple[float, float], ...]
    """Per interval of A: (gap, duration) in B minus in A; zero unless the interval grows with m."""


def extrapolate(simulate: Simulate, m: int, unit: int, base: int) -> tuple[list[Interval], float] | None:
    """Intervals (periods compressed) and step time of ``m`` micro-batches, or None.

    Tries the periods and starts of ``ATTEMPTS`` (stages of unequal speed can repeat only every
    few micro-batches, e.g. one bubble per 4 passes at a 4:5 speed ratio, and a split backward
    settles later) while the short runs stay within ``BUDGET``; None when ``m`` is too small to gain
    anything or no period is confirmed.
    """
    runs: dict[int, tuple[list[Interval], float]] = {}

    def cached(k: int) -> tuple[list[Interval], float]:
        if k not in runs:
            runs[k] = simulate(k)
        return runs[k]

    attempts = [(cycle, scale, 0) for cycle, scale in ATTEMPTS]
    probed: set[int] = set()
    tried = 0
    while tried < len(attempts):
        if tried in (1, 2) and runs and (longest := max(runs)) not in probed:
            # the cheapest attempt (or the next, from twice the start) failed: next, the periods the
            # longest short run shows, from that run's start multiple and, if the warm-up outlasts it,
            # one period later (runs reused)
            probed.add(longest)
            scale_seen = max(1, longest // base)
            seen = [(k // unit, scale_seen, skip)
                    for k in _detected_cycles(runs[longest][0], unit, TOLERANCE * runs[longest][1]) for skip in (0, 1)]
            attempts[tried:tried] = [a for a in seen if a not in attempts]
        cycle, scale, skip = attempts[tried]
        tried += 1
        c, first = cycle * unit, scale * base
        m1 = first + (m - first) % c + skip * c
        counts = (m1, m1 + c, m1 + 2 * c)
        if counts[-1] >= m:
            continue
        spent = sum(runs) + sum(k for k in counts if k not in runs)
        if spent > BUDGET * m:  # trying further would cost a good part of the full run
            continue
        out = _try(cached, m, m1, c)
        if out is not None:
            return out
    return None


def _detected_cycles(log: list[Interval], unit: int, tol: float) -> list[int]:
    """Periods in micro-batches (multiples of ``unit``) of one run: per stream, the shortest shift
    under which the middle half of its intervals repeats (pass kind, gap and duration; values
    compared on a grid of 10 ``tol``: a hint, confirmed by ``_try``), as the micro-batch advance of
    its passes over that shift; their least common multiple, if longer than every ``ATTEMPTS`` cycle."""
    advances = set()
    for items in _streams(log).values():
        toks = [(k, round(g / (10 * tol)), round(d / (10 * tol))) for k, g, d in _shape(items)]
        lo, hi = len(toks) // 4, 3 * len(toks) // 4
        shift = next((q for q in range(1, (hi - lo) // 2 + 1) if toks[lo:hi - q] == toks[lo + q:hi]), None)
        if shift is not None:
            advances.add(_advance(items, lo, shift))
    cycle = math.lcm(unit, *(a for a in advances if a > 0))
    return [cycle] if cycle > unit else []


def _advance(items: list[Interval], lo: int, shift: int) -> int:
    """Micro-batches a stream's passes move over ``shift`` intervals from ``lo`` (0: no pass there)."""
    for i in range(lo, min(lo + shift, len(items) - shift)):
        x, y = _PASS.match(items[i].label), _PASS.match(items[i + shift].label)
        if x is not None and y is not None and x[1] == y[1] and x[3] == y[3]:
            return int(y[2]) - int(x[2])
    return 0


def _try(simulate: Simulate, m: int, m1: int, c: int) -> tuple[list[Interval], float] | None:
    (log_a, step_a), (log_b, step_b), (log_c, step_c) = (simulate(k) for k in (m1, m1 + c, m1 + 2 * c))
    tol = TOLERANCE * step_c
    if abs(step_a + 2 * (step_b - step_a) - step_c) > tol:
        return None
    runs = [_streams(log) for log in (log_a, log_b, log_c)]
    if not runs[0].keys() == runs[1].keys() == runs[2].keys():
        return None
    plans: list[_Alignment] = []
    for key, a in runs[0].items():
        plan = next((p for p in (_align(a, runs[1][key], tol, longest) for longest in (False, True))
                     if p is not None and _matches(_expand(p, 2, compress=False), runs[2][key], tol)), None)
        if plan is None:
            return None
        plans.append(plan)
    n, period = (m - m1) // c, step_b - step_a
    units: dict[tuple[int, int], list[_Alignment]] = {}
    for plan in plans:
        units.setdefault((plan.a[0].replica, plan.a[0].stage), []).append(plan)
    out: list[Interval] = []
    for unit_plans in units.values():
        stretched = _stretch(unit_plans, n, period, tol)
        out += stretched if stretched is not None else [iv for p in unit_plans for iv in _expand(p, n, compress=True)]
    return out, step_a + n * period


def _stretch(plans: list[_Alignment], n: int, period: float, tol: float) -> list[Interval] | None:
    """One unit's run B with one common period window [T, T + period) stretched n-fold and what
    follows shifted by (n - 1) periods: a monotone map of time, so sums gain n - 1 periods and the
    overlap of the unit's streams (what the energy model integrates) is kept exactly. None when the
    unit's streams do not share such a window (a gap that grows with m, as in GPipe)."""
    regions = []
    for plan in plans:
        if any(g != (0.0, 0.0) for g in plan.growth) or len(plan.inserts) > 1:
            return None
        if plan.inserts:
            if abs(_span(plan.b, plan.inserts[0]) - period) > tol:
                return None
            regions.append(_periodic_region(plan, tol))
    if not regions:
        return None
    t0 = max(lo for lo, _ in regions)  # a window every repeating stream of the unit repeats over
    t1 = t0 + period
    if t1 > min(hi for _, hi in regions) + tol:
        return None
    if any(iv.end > t0 and iv.start < t1 for p in plans if not p.inserts for iv in p.b):
        return None  # a stream that does not repeat has work inside the window

    def phi(t: float) -> float:
        return t if t <= t0 else t0 + n * (t - t0) if t < t1 else t + (n - 1) * period

    out = []
    for plan in plans:
        a_of = {j: i for i, j in enumerate(plan.match)}
        for j, y in enumerate(plan.b):
            label = _shift_label(plan.a[a_of[j]].label, y.label, n) if j in a_of else y.label
            if y.end > t0 and y.start < t1:
                label = f"{label} (x{n} steady periods)"
            out.append(y._replace(start=phi(y.start), end=phi(y.end), label=label))
    return out


def _streams(log: list[Interval]) -> dict[StreamKey, list[Interval]]:
    """The intervals of each (replica, stage, stream), in the order the engine logged them."""
    out: dict[StreamKey, list[Interval]] = {}
    for iv in log:
        out.setdefault((iv.replica, iv.stage, iv.stream), []).append(iv)
    return out


def _key(iv: Interval) -> tuple[str, str]:
    """Category and label with the micro-batch number dropped (``F12.1`` -> ``F.1``)."""
    m = _PASS.match(iv.label)
    return iv.category, f"{m[1]}.{m[3]}" if m else iv.label


def _shape(items: list[Interval]) -> list[tuple[tuple[str, str], float, float]]:
    """Shift-invariant form of a stream: (key, gap since the previous interval's end, duration)."""
    out, prev = [], 0.0
    for iv in items:
        out.append((_key(iv), iv.start - prev, iv.end - iv.start))
        prev = iv.end
    return out


def _align(a: list[Interval], b: list[Interval], tol: float, longest: bool = False) -> _Alignment | None:
    """B as A with periodic blocks inserted and some gaps or durations grown, matched greedily
    from the front, each block as short as fits (or, with ``longest``, as long: a period of many
    intervals whose stretches also repeat on their own); None if it is not."""
    sa, sb = _shape(a), _shape(b)

    def same(x: tuple[tuple[str, str], float, float], y: tuple[tuple[str, str], float, float]) -> bool:
        return x[0] == y[0] and abs(x[1] - y[1]) <= tol and abs(x[2] - y[2]) <= tol

    def fits(i: int, j: int, length: int) -> bool:
        if j < length or j + length > len(b):
            return False
        if not all(same(sb[j + k], sb[j - length + k]) for k in range(length)):
            return False  # a block must repeat the intervals just before it
        ahead = min(WINDOW, len(a) - i, len(b) - j - length)
        return all(sa[i + k][0] == sb[j + length + k][0] for k in range(ahead))

    extra = len(b) - len(a)
    i = j = 0
    inserts: list[_Insert] = []
    match: list[int] = []
    growth: list[tuple[float, float]] = []
    while i < len(a):
        if j < len(b) and same(sa[i], sb[j]):
            match.append(j)
            growth.append((0.0, 0.0))
            i, j = i + 1, j + 1
            continue
        lengths = range(extra, 0, -1) if longest else range(1, extra + 1)
        length = next((k for k in lengths if fits(i, j, k)), None)
        if length is not None:
            inserts.append(_Insert(i, j, length))
            j, extra = j + length, extra - length
        elif j < len(b) and sa[i][0] == sb[j][0]:  # the same interval, longer by one period's worth
            match.append(j)
            growth.append((sb[j][1] - sa[i][1], sb[j][2] - sa[i][2]))
            i, j = i + 1, j + 1
        else:
            return None
    if extra:
        if not fits(len(a), j, extra):
            return None
        inserts.append(_Insert(len(a), j, extra))
    return _Alignment(a=a, b=b, inserts=tuple(inserts), match=tuple(match), growth=tuple(growth))


def _expand(plan: _Alignment, n: int, compress: bool) -> list[Interval]:
    """Run A with ``n`` copies of every inserted block (merged per category if ``compress``) and
    every grown gap or duration grown ``n`` times; times rebuilt along the stream."""
    a, b = plan.a, plan.b
    out: list[Interval] = []
    end = 0.0
    pending = list(plan.inserts)
    for i in range(len(a) + 1):
        while pending and pending[0].at == i:
            ins = pending.pop(0)
            out += _block(b, ins, end, n, compress)
            end += n * _span(b, ins)
        if i < len(a):
            x, y = a[i], b[plan.match[i]]
            d_gap, d_dur = plan.growth[i]
            start = end + (x.start - (a[i - 1].end if i > 0 else 0.0)) + n * d_gap
            end = start + (x.end - x.start) + n * d_dur
            out.append(x._replace(start=start, end=end, label=_shift_label(x.label, y.label, n)))
    return out


def _periodic_region(plan: _Alignment, tol: float) -> tuple[float, float]:
    """Times over which run B repeats the inserted block: back from the block while each interval
    equals the one a block length later, up to the block's end."""
    sb, ins = _shape(plan.b), plan.inserts[0]
    x = ins.start - 1
    while x >= 0 and _same(sb[x], sb[x + ins.length], tol):
        x -= 1
    lo = plan.b[x].end if x >= 0 else 0.0
    return lo, plan.b[ins.start + ins.length - 1].end


def _same(x: tuple[tuple[str, str], float, float], y: tuple[tuple[str, str], float, float], tol: float) -> bool:
    """Same key, gap and duration (within ``tol``)."""
    return x[0] == y[0] and abs(x[1] - y[1]) <= tol and abs(x[2] - y[2]) <= tol


def _span(b: list[Interval], ins: _Insert) -> float:
    """Seconds one copy of the block adds to the stream (end of its last interval minus end before it)."""
    before = b[ins.start - 1].end if ins.start > 0 else 0.0
    return b[ins.start + ins.length - 1].end - before


def _block(b: list[Interval], ins: _Insert, base_end: float, n: int, compress: bool) -> list[Interval]:
    """``n`` copies of the block after ``base_end``: in full, or one interval per category."""
    items = b[ins.start: ins.start + ins.length]
    before = b[ins.start - 1].end if ins.start > 0 else 0.0
    span = _span(b, ins)
    if not compress:
        return [y._replace(start=base_end + k * span + y.start - before, end=base_end + k * span + y.end - before)
                for k in range(n) for y in items]
    totals: dict[str, float] = {}
    for y in items:
        totals[y.category] = totals.get(y.category, 0.0) + (y.end - y.start)
    head = items[0]
    t = base_end + head.start - before
    out = []
    for cat, secs in totals.items():
        label = f"{n} steady periods ({span * 1e3:.3f} ms each): {cat}"
        out.append(Interval(head.replica, head.stage, head.stream, cat, t, t + n * secs, label))
        t += n * secs
    return out


def _shift_label(label_a: str, label_b: str, n: int) -> str:
    """A pass label at ``n`` more periods: its micro-batch moves by n times its move from A to B."""
    pa, pb = _PASS.match(label_a), _PASS.match(label_b)
    if pa is None or pb is None:
        return label_a
    mb = int(pa[2]) + n * (int(pb[2]) - int(pa[2]))
    return f"{pa[1]}{mb}.{pa[3]}"


def _matches(pred: list[Interval], actual: list[Interval], tol: float) -> bool:
    """Same intervals (category, pass kind and chunk, start and end within ``tol``), in order."""
    return len(pred) == len(actual) and all(
        _key(x) == _key(y) and abs(x.start - y.start) <= tol and abs(x.end - y.end) <= tol
        for x, y in zip(pred, actual)
    )
