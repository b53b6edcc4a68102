"""How far published measurements of one scenario disagree: the error floor of any predictor.

Megatron-Bridge re-publishes the same recipes with every release (25.09 ... 26.08), so the bundled
table holds scenarios (model, training, cluster and plan, everything the simulator reads) measured
more than once, sometimes far apart (the same plan on the same part 1.8x slower in one release than
in the next). No prediction made from a scenario's inputs can follow both measurements, so their
spread bounds every model of those inputs from below. This module measures that bound.

Owns the identity of a simulated scenario (``scenario_key``: a hash of the model, training, cluster
and plan objects the simulator receives; two rows share it exactly when the simulator sees the same
inputs) and the floor (``repeatability_floor``): for each scenario measured more than once, the
least mean absolute percentage error one prediction can have over its rows. That prediction
minimises sum_i |p - m_i| / m_i, a convex piecewise-linear function of p whose minimum lies at one
of the m_i (a median of the m_i weighted by 1 / m_i), so the floor is found by trying each
measurement. A scenario measured once contributes 0. It does not simulate anything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd


def scenario_key(*parts: Any) -> str:
    """The identity of the scenario ``parts`` (their ``repr``, in order): "s" and 12 hex digits of a
    sha256, equal for equal inputs, deterministic across runs and processes (no ``hash()`` salt),
    and never read back from a CSV as a number."""
    text = "\x1f".join(repr(p) for p in parts)
    return "s" + hashlib.sha256(text.encode()).hexdigest()[:12]


def best_constant_errors(measured: Iterable[float]) -> np.ndarray:
    """Absolute percentage errors of the one prediction that minimises their sum over ``measured``
    (all > 0); the first such measurement when several tie."""
    m = np.asarray(list(measured), dtype=float)
    if m.size == 0:
        return m
    if (m <= 0).any() or not np.isfinite(m).all():
        raise ValueError(f"measured step times must be finite and > 0, got {m.tolist()}")
    errs: np.ndarray = np.abs(m[:, None] - m[None, :]) / m[None, :] * 100.0  # row j: the prediction m_j
    best: np.ndarray = errs[int(np.argmin(errs.sum(axis=1)))]
    return best


@dataclass(frozen=True)
class Floor:
    """The repeatability floor of a set of simulated rows."""

    rows: int
    """Simulated rows."""
    repeated_rows: int
    """Rows whose scenario is measured more than once."""
    scenarios: int
    """Scenarios measured more than once."""
    floor_mape: float
    """Least MAPE (percent) over all rows of any prediction from the scenario's inputs."""
    floor_mape_repeated: float
    """The same over the repeated rows only (nan without any)."""
    model_mape_repeated: float
    """The model's MAPE over the repeated rows (nan without any)."""
    scenarios_beyond_40: int
    """Scenarios where every prediction leaves at least one row beyond 40 % (the largest measurement
    above 1.4 / 0.6 times the smallest: no p has p <= 1.4 min and p >= 0.6 max)."""


def row_floors(scenario: pd.Series, measured: pd.Series) -> pd.Series:
    """Each row's absolute percentage error at its scenario's best single prediction
    (``best_constant_errors`` over the rows sharing its ``scenario``); 0 for a scenario measured once.
    Same index as ``scenario``."""
    floor = pd.Series(0.0, index=scenario.index)
    for _, idx in scenario.groupby(scenario, sort=True).groups.items():
        if len(idx) > 1:
            floor.loc[idx] = best_constant_errors(measured.loc[idx].astype(float))
    return floor


def repeatability_floor(results: pd.DataFrame) -> Floor:
    """The floor of ``results`` (``validate`` output: ``status``, ``scenario``, ``measured_step_time_s``,
    ``error_pct``); only ``status == "ok"`` rows count."""
    ok = results[results.status == "ok"]
    floor = row_floors(ok.scenario, ok.measured_step_time_s)
    sizes = ok.groupby("scenario").scenario.transform("size") if len(ok) else pd.Series(dtype=int)
    rep = ok.index[sizes > 1] if len(ok) else ok.index
    spans = ok.loc[rep].groupby("scenario").measured_step_time_s.agg(["min", "max"])
    nan = float("nan")
    return Floor(rows=len(ok), repeated_rows=len(rep), scenarios=len(spans),
                 floor_mape=float(floor.mean()) if len(ok) else nan,
                 floor_mape_repeated=float(floor.loc[rep].mean()) if len(rep) else nan,
                 model_mape_repeated=float(ok.error_pct.loc[rep].abs().mean()) if len(rep) else nan,
                 scenarios_beyond_40=int((0.6 * spans["max"] > 1.4 * spans["min"]).sum()))
