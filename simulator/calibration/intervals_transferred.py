"""The interval of a prediction on a GPU type whose profile no row of that type fitted, from the
leave-one-GPU-type-out residuals (``clustersim validate --cross-validate gpu``).

Owns the table stored in ``calibration/intervals_transferred.yaml`` (``transferred_table``): the
split-conformal bounds on measured / predicted with each held-out GPU type one unit of evidence
(``fold_weights``), widened by the measured factor that covers a type left out of the others'
bounds (``type_widening``), and their coverage with each type scored on bounds and widening
calibrated on the other types only (``transferred_coverage``). The lookup of a prediction's
interval is ``intervals.interval_for``; this module is the fitting side (pandas frames of the
cross-validation rows, with a ``fold`` column naming each row's held-out type).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import numpy.typing as npt

from clustersim.simulator.interval_fit import conformal_bounds, ratios, row_quantile, widening_scores
from clustersim.simulator.intervals import LEVELS, widen

if TYPE_CHECKING:
    import pandas as pd


def fold_weights(frame: pd.DataFrame) -> npt.NDArray[np.float64]:
    """1 / (rows of the row's held-out GPU type, the ``fold`` column) per row: each held-out type
    weighs one unit (``interval_fit.family_weights``' reasoning, with the GPU type as the exchangeable unit)."""
    fold = frame.fold.astype(str)
    weights: npt.NDArray[np.float64] = np.divide(1.0, fold.map(fold.value_counts()).to_numpy(dtype=np.float64))
    return weights


def type_widening(frame: pd.DataFrame, level: float) -> float:
    """The factor on the transferred interval's log-ratio bounds that makes it hold for a GPU type not
    seen: each held-out type (``fold``) left out in turn, its rows scored (``widening_scores``) against
    the bounds calibrated on the other types (``fold_weights``); the split-conformal ``level``
    quantile of the scores with each row one unit (``intervals.row_quantile``), never below 1.
    Fewer than two types: 1."""
    if frame.fold.nunique() < 2:
        return 1.0
    scores = []
    for fold, test in frame.groupby("fold"):
        cal = frame[frame.fold != fold]
        lo, hi = conformal_bounds(ratios(cal), level, fold_weights(cal))
        scores.append(widening_scores(ratios(test), lo, hi))
    return row_quantile(np.concatenate(scores), level)


def _bounds_and_widening(frame: pd.DataFrame, level: float) -> tuple[float, float, float]:
    """``transferred_bounds`` and the ``type_widening`` factor they were widened by."""
    factor = type_widening(frame, level)
    lo, hi = widen(*conformal_bounds(ratios(frame), level, fold_weights(frame)), factor)
    return lo, hi, factor


def transferred_bounds(frame: pd.DataFrame, level: float) -> tuple[float, float]:
    """The transferred interval of ``frame``'s leave-one-GPU-type-out rows at ``level``: the bounds
    with each held-out type one unit, widened by ``type_widening``."""
    lo, hi, _ = _bounds_and_widening(frame, level)
    return lo, hi


def transferred_coverage(frame: pd.DataFrame, levels: Sequence[float] = LEVELS) -> pd.DataFrame:
    """Per held-out GPU type of a leave-one-GPU-type-out table (``fold`` column) and level: the share
    of its rows inside the transferred interval (``transferred_bounds``: bounds and widening both)
    calibrated on the other types' rows only; plus one "all" line per level. Columns: fold, level,
    rows, covered, coverage."""
    import pandas as pd  # the fitting side only

    out = []
    for level in levels:
        tot = cov = 0
        for fold, test in frame.groupby("fold"):
            lo, hi = transferred_bounds(frame[frame.fold != fold], level)
            q = ratios(test)
            inside = int(np.sum((q >= lo) & (q <= hi)))
            out.append({"fold": str(fold), "level": level, "rows": len(test), "covered": inside,
                        "coverage": inside / len(test)})
            tot, cov = tot + len(test), cov + inside
        out.append({"fold": "all", "level": level, "rows": tot, "covered": cov, "coverage": cov / tot if tot else math.nan})
    return pd.DataFrame(out)


def transferred_table(frame: pd.DataFrame, levels: Sequence[float] = LEVELS,
                      coverage: pd.DataFrame | None = None) -> dict[str, Any]:
    """The data stored in ``intervals_transferred.yaml`` from a leave-one-GPU-type-out table (each row
    held out with every row of its GPU type, the ``fold`` column): the GPU types fitted on their own
    rows, the bounds on measured / predicted (``transferred_bounds``) and their widening, and the
    coverage with each type scored on the others' bounds and widening (``coverage``, computed by
    ``transferred_coverage`` when not given)."""
    cov = transferred_coverage(frame, levels) if coverage is None else coverage
    every = cov[cov.fold == "all"].set_index("level").coverage
    fitted = {f"ratio_{int(lv * 100)}": _bounds_and_widening(frame, lv) for lv in levels}
    return {"levels": list(levels), "rows": int(len(frame)), "gpu_types": sorted(frame.fold.astype(str).unique().tolist()),
            **{key: [lo, hi] for key, (lo, hi, _) in fitted.items()},
            "widen": {key: factor for key, (_, _, factor) in fitted.items()},
            "coverage_held_out_type": {f"ratio_{int(lv * 100)}": float(every[lv]) for lv in levels}}
