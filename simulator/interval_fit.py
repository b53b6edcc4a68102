"""Prediction intervals from the cross-validated residuals: conformal bounds, widening, coverage, the table.

Owns the split-conformal interval of the measured step time around a prediction
(``conformal_bounds``: finite-sample ranks of the held-out ratios measured / predicted, each
publication family weighted as one unit, ``family_weights``), its empirical coverage on held-out
families (``coverage_by_family``: intervals calibrated on the other families' held-out residuals,
scored on the family left out), the widening of the pooled interval for a prediction outside every
validated regime (``extrapolation_widening``: each validated regime left out of the pooled set in
turn, the conformal quantile of how far its rows fall outside the others' interval), the widening
of every interval by the spread between families (``family_widening``: each family left out in
turn), one factor per distance class (``class_widening``), and the table stored as data
(``interval_table``, ``write_intervals``). The lookup of one prediction's interval is
``intervals``'; the residuals come from ``calibration.fit_crossval``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import yaml

from clustersim.files import write_atomic
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.intervals import INTERVALS_PATH, LEVELS, MIN_REGIME_ROWS, regime, widen

if TYPE_CHECKING:
    import pandas as pd


def conformal_bounds(ratios: Sequence[float] | npt.NDArray[np.float64], level: float,
                     weights: Sequence[float] | npt.NDArray[np.float64] | None = None) -> tuple[float, float]:
    """Split-conformal bounds (lo, hi) on measured / predicted at ``level``, two-sided.

    With n calibration ratios sorted, hi is the ceil((n + 1)(1 - a/2))-th smallest and lo the
    floor((n + 1) a/2)-th, a = 1 - level (Vovk et al.; Lei et al. 2018): a new exchangeable ratio
    falls inside with probability >= level. A rank beyond n is unbounded (inf, or 0 below).

    ``weights`` (one per ratio): the weighted form (Tibshirani et al. 2019, "Conformal prediction
    under covariate shift"): hi is the (1 - a/2) quantile of the weighted ratios plus the new point's
    weight (the smallest calibration weight) at +inf, lo the mirror image; equal weights give the
    ranks above. ``family_weights`` makes every publication family one unit of evidence.
    """
    if not 0 < level < 1:
        raise CalibrationError(f"interval level {level}: use a fraction in (0, 1)")
    r = np.asarray(ratios, dtype=float)
    a = 1.0 - level
    if len(r) == 0:
        return 0.0, math.inf
    w = np.ones(len(r)) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != r.shape or np.any(w <= 0):
        raise CalibrationError(f"conformal weights: {len(w)} positive weights needed for {len(r)} ratios")
    hi = _weighted_upper(r, w, 1 - a / 2)
    lo = -_weighted_upper(-r, w, 1 - a / 2)
    return (0.0 if lo == -math.inf else lo), hi


def _weighted_upper(r: npt.NDArray[np.float64], w: npt.NDArray[np.float64], q: float) -> float:
    """The smallest r_k whose cumulative weight, over the total plus the new point's (min w) at
    +inf, reaches ``q``; inf when only the new point's mass would. Equal weights: the
    ceil((n + 1) q)-th smallest."""
    order = np.argsort(r, kind="stable")
    cum = np.cumsum(w[order]) / (w.sum() + w.min())
    k = int(np.searchsorted(cum, q - 1e-12))
    return float(r[order][k]) if k < len(r) else math.inf


def family_weights(frame: pd.DataFrame) -> npt.NDArray[np.float64]:
    """1 / (rows of the row's family) per row: each family's residuals weigh one unit in total.

    The held-out unit is a publication family and families differ in bias, so a new family's ratio
    is exchangeable with a family, not with a row of the largest family (Dunn, Wasserman & Ramdas
    2022, "Distribution-free prediction sets for two-layer hierarchical models": pooling the
    families' empirical CDFs with equal weight). Row weights let 139 MosaicML A100 rows decide the
    dense/ampere interval for every other family."""
    fam = frame.family.astype(str)
    counts = fam.map(fam.value_counts()).to_numpy(dtype=np.float64)
    weights: npt.NDArray[np.float64] = np.divide(1.0, counts)
    return weights


def ratios(frame: pd.DataFrame) -> npt.NDArray[np.float64]:
    """measured / held-out predicted step time of each row of a cross-validation table."""
    return (frame.measured_s / frame.held_out_s).to_numpy(float)


def _calibration(frame: pd.DataFrame, reg: object) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], bool]:
    """Ratios and family weights of regime ``reg`` (or pooled, extrapolated, when it has too few)."""
    mine = frame[frame.regime_key == reg]
    if len(mine) >= MIN_REGIME_ROWS:
        return ratios(mine), family_weights(mine), False
    return ratios(frame), family_weights(frame), True


def widening_scores(q: npt.NDArray[np.float64], lo: float, hi: float) -> npt.NDArray[np.float64]:
    """Per ratio in ``q``: the smallest factor w >= 0 with lo^w <= ratio <= hi^w, the factor by
    which (lo, hi)'s log-ratios must grow to cover it (inf when no factor can: a ratio above 1 with
    hi <= 1, or below 1 with lo >= 1)."""
    lq = np.log(q)
    up_base = math.log(hi) if math.isfinite(hi) else math.inf
    down_base = math.log(lo) if lo > 0 else -math.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(up_base > 0, lq / up_base, np.inf)
        down = np.where(down_base < 0, lq / down_base, np.inf)
    out: npt.NDArray[np.float64] = np.where(lq > 0, up, np.where(lq < 0, down, 0.0))
    return out


def extrapolation_widening(frame: pd.DataFrame, level: float) -> tuple[float, int]:
    """(factor, validated regimes): the widening of the pooled interval for a regime without evidence.

    Each validated regime (>= ``MIN_REGIME_ROWS`` rows) is treated in turn as the unseen one: the
    pooled interval at ``level`` is calibrated on the other regimes' rows (family-weighted, as
    ``conformal_bounds``), and each of its rows scores the factor its log-ratio needs
    (``widening_scores``). The factor is the split-conformal ``level`` quantile of the scores with
    each regime one unit of evidence (a new regime is exchangeable with a regime, not with a row:
    the family argument of ``family_weights`` one level up), never below 1 (an extrapolated
    prediction is never more confident than the pooled one). Fewer than two validated regimes
    leave nothing to measure the factor on: inf (unbounded)."""
    fr = frame if "regime_key" in frame else with_regimes(frame)
    regs = [r for r, p in fr.groupby("regime_key") if len(p) >= MIN_REGIME_ROWS]
    if len(regs) < 2:
        return math.inf, len(regs)
    scores, weights = [], []
    for reg in regs:
        mine, rest = fr[fr.regime_key == reg], fr[fr.regime_key != reg]
        lo, hi = conformal_bounds(ratios(rest), level, family_weights(rest))
        scores.append(widening_scores(ratios(mine), lo, hi))
        weights.append(np.full(len(mine), 1.0 / len(mine)))
    factor = _weighted_upper(np.concatenate(scores), np.concatenate(weights), level)
    return max(1.0, factor), len(regs)


def with_regimes(frame: pd.DataFrame) -> pd.DataFrame:
    """The cross-validation rows with a ``regime_key`` column (kind/generation)."""
    return frame.assign(regime_key=[regime(k or "dense", g) for k, g in zip(frame.regime, frame.group.astype(str))])


def _regime_bounds(cal: pd.DataFrame, reg: object, level: float, factor: list[float]) -> tuple[float, float, bool]:
    """The interval of regime ``reg`` calibrated on ``cal``: its own rows, or the pooled rows widened
    by ``extrapolation_widening`` of ``cal`` (computed once, kept in ``factor``); and whether pooled."""
    r, w, extrapolated = _calibration(cal, reg)
    lo, hi = conformal_bounds(r, level, w)
    if extrapolated:
        if not factor:
            factor.append(extrapolation_widening(cal, level)[0])
        lo, hi = widen(lo, hi, factor[0])
    return lo, hi, extrapolated


DISTANCE_CLASSES: tuple[str, ...] = ("validated", "extrapolated")
"""How far a prediction is from its evidence: its regime has held-out rows (``MIN_REGIME_ROWS``) of
families other than its own (validated: the regime's interval), or it has none and takes the pooled
interval (extrapolated: ``extrapolation_widening``). Each class gets its own family widening."""


def distance_class(extrapolated: bool) -> str:
    """The ``DISTANCE_CLASSES`` name of a prediction that is (or is not) extrapolated."""
    return DISTANCE_CLASSES[1] if extrapolated else DISTANCE_CLASSES[0]


@dataclass(frozen=True, kw_only=True)
class _Scored:
    """The widening scores of one regime's rows of a family left out (``_family_scores``)."""

    family: str
    """The family left out."""
    distance: str
    """Its ``DISTANCE_CLASSES`` name against the other families' evidence."""
    scores: npt.NDArray[np.float64]
    """``widening_scores`` of its rows against the interval calibrated on the other families."""


def _family_scores(fr: pd.DataFrame, level: float) -> list[_Scored]:
    """Each family of ``fr`` left out in turn: per regime of its rows, the scores against the intervals
    calibrated on the other families (``_regime_bounds``: the rule a prediction gets) and the class."""
    out = []
    for fam in sorted(fr.family.astype(str).unique()):
        test, cal = fr[fr.family == fam], fr[fr.family != fam]
        factor: list[float] = []
        for reg, part in test.groupby("regime_key"):
            lo, hi, extrapolated = _regime_bounds(cal, reg, level, factor)
            out.append(_Scored(family=fam, distance=distance_class(extrapolated), scores=widening_scores(ratios(part), lo, hi)))
    return out


def _family_quantile(scored: Sequence[_Scored], level: float) -> float:
    """The split-conformal ``level`` quantile of the scores, each row one unit, never below 1.

    Rows, not families, because the coverage it is set for is the share of a new family's rows
    inside (``coverage_by_family``'s figure): with families exchangeable as (size, scores) pairs,
    the expected share of covered rows is the row-weighted mean of the families' coverages, which
    is the row-weighted distribution of the left-out scores. Families as units set the mean of the
    families' coverages instead, and with four or five families of 12 to 233 rows that lets the
    smallest biased family's tail set every interval (98.0 % of rows at 90 %, December 2026)."""
    return row_quantile(np.concatenate([x.scores for x in scored]), level)


def row_quantile(scores: npt.NDArray[np.float64], level: float) -> float:
    """The split-conformal ``level`` quantile of widening ``scores`` with each row one unit, never
    below 1 (``_family_quantile``; ``calibration.intervals_transferred.type_widening``)."""
    return max(1.0, _weighted_upper(scores, np.ones(len(scores)), level))


def family_widening(frame: pd.DataFrame, level: float) -> float:
    """The factor on the log-ratio bounds that makes the interval hold for a family not seen.

    Each family of ``frame`` is treated in turn as the new one: its rows are scored
    (``widening_scores``) against the intervals of their regimes calibrated on the other families
    (``_regime_bounds``: the same rule a prediction gets); the factor is the split-conformal
    ``level`` quantile of the scores with each row one unit (``_family_quantile``: the figure it is set
    for is the share of a new family's rows covered; the families stay the unit left out, so no
    family sets its own score), never below 1. A family whose bias the others do not share drives it up; exchangeable families leave it
    near 1. Fewer than two families leave nothing to measure it on: 1 (the rows' own interval)."""
    fr = frame if "regime_key" in frame else with_regimes(frame)
    if fr.family.nunique() < 2:
        return 1.0
    return _family_quantile(_family_scores(fr, level), level)


def class_widening(frame: pd.DataFrame, level: float) -> dict[str, float]:
    """``family_widening`` per distance class (``DISTANCE_CLASSES``): the quantile of the scores of
    the rows that were of that class when their family was left out (each row one unit, as
    ``family_widening``). A class no left-out row fell in has nothing to measure it on: the all-rows factor."""
    fr = frame if "regime_key" in frame else with_regimes(frame)
    if fr.family.nunique() < 2:
        return dict.fromkeys(DISTANCE_CLASSES, 1.0)
    scored = _family_scores(fr, level)
    pooled = _family_quantile(scored, level)
    out = {}
    for cls in DISTANCE_CLASSES:
        mine = [s for s in scored if s.distance == cls]
        out[cls] = _family_quantile(mine, level) if mine else pooled
    return out


def coverage_by_family(frame: pd.DataFrame, levels: Sequence[float] = LEVELS) -> pd.DataFrame:
    """Per held-out family and level: the share of its rows inside intervals calibrated without it.

    The calibration set of family f is the held-out residuals of every other family (each itself
    predicted by a fit that did not see it); a regime with fewer than ``MIN_REGIME_ROWS`` of them
    uses the pooled set widened by ``extrapolation_widening`` of the same calibration set (the
    extrapolation rule, measured without the family scored), and every interval is widened by
    ``class_widening`` of the same calibration set for its distance class (measured on the other
    families only). Columns: family, level, rows, covered, coverage, extrapolated_rows,
    widening_validated, widening_extrapolated (the factors f's rows got), median_width (the median
    hi / lo of f's intervals); plus one "all" line per level (its factors those of every family).
    """
    import pandas as pd  # the fitting side only: ``simulate`` reads the stored table without pandas

    fr = with_regimes(frame)
    out = []
    for level in levels:
        tot = cov = ext = 0
        widths: list[float] = []
        for fam, test in fr.groupby("family"):
            cal = fr[fr.family != fam]
            inside = extra = 0
            factor: list[float] = []
            between = class_widening(cal, level)
            mine: list[float] = []
            for reg, part in test.groupby("regime_key"):
                lo, hi, extrapolated = _regime_bounds(cal, reg, level, factor)
                lo, hi = widen(lo, hi, between[distance_class(extrapolated)])
                extra += len(part) if extrapolated else 0
                q = ratios(part)
                inside += int(np.sum((q >= lo) & (q <= hi)))
                mine += [hi / lo if lo > 0 else math.inf] * len(part)
            out.append({"family": fam, "level": level, "rows": len(test), "covered": inside,
                        "coverage": inside / len(test), "extrapolated_rows": extra,
                        **{f"widening_{c}": between[c] for c in DISTANCE_CLASSES}, "median_width": float(np.median(mine))})
            tot, cov, ext, widths = tot + len(test), cov + inside, ext + extra, widths + mine
        every = class_widening(fr, level)
        out.append({"family": "all", "level": level, "rows": tot, "covered": cov, "coverage": cov / tot if tot else math.nan,
                    "extrapolated_rows": ext, **{f"widening_{c}": every[c] for c in DISTANCE_CLASSES},
                    "median_width": float(np.median(widths)) if widths else math.nan})
    return pd.DataFrame(out)


def interval_table(frame: pd.DataFrame, levels: Sequence[float] = LEVELS) -> dict[str, Any]:
    """The data stored in ``intervals.yaml``: per regime its rows, largest GPU count and bounds."""
    fr = with_regimes(frame)
    regimes: dict[str, Any] = {}
    for reg, part in fr.groupby("regime_key"):
        regimes[str(reg)] = {"rows": int(len(part)), "max_gpus": int(part.num_gpus.max()),
                             "families": sorted(part.family.unique().tolist()),
                             **{f"ratio_{int(lv * 100)}": list(conformal_bounds(ratios(part), lv, family_weights(part)))
                                for lv in levels}}
    pooled = {f"ratio_{int(lv * 100)}": list(conformal_bounds(ratios(fr), lv, family_weights(fr))) for lv in levels}
    widen = {f"ratio_{int(lv * 100)}": extrapolation_widening(fr, lv)[0] for lv in levels}
    between = {f"ratio_{int(lv * 100)}": class_widening(fr, lv) for lv in levels}
    return {"levels": list(levels), "min_regime_rows": MIN_REGIME_ROWS, "widen": widen, "family_widen": between,
            "pooled": {"rows": int(len(fr)), **pooled}, "regimes": regimes}


def write_intervals(table: Mapping[str, Any], path: str | Path = INTERVALS_PATH, header: str = "") -> Path:
    """Write the interval table as YAML (atomic)."""
    text = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return write_atomic(Path(path), text + yaml.safe_dump(_plain(table), sort_keys=False))


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    return v
