"""Fitting a profile from a user's own measured runs, with the error on held-out runs reported.

Owns ``clustersim calibrate import-runs``: rows of a CSV with the columns of
``workloads/data/published_runs.csv`` are split at random (a passed Generator) into a fitting
part and a held-out part; two scales are fitted on the fitting part only, one on the compute
efficiency curves (GEMM and attention) and one on every link efficiency, by a log-spaced grid
search that includes 1 (so the fit never worsens its own rows); the median |error| is reported
before and after, on both parts. Row mapping and simulation are ``clustersim.simulator.calibration.validate``'s.
It does not fit microbenchmarks (``clustersim.simulator.calibration.fit``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.calibration.validate import load_runs, validate_runs

COMPUTE_GRID = tuple(float(x) for x in np.geomspace(0.5, 2.0, 7))
"""Compute-efficiency scales tried, log-spaced; the middle one is 1.0 (the starting profile)."""
LINK_GRID = tuple(float(x) for x in np.geomspace(0.5, 2.0, 5))
"""Link-efficiency scales tried; the middle one is 1.0."""


@dataclass(frozen=True, kw_only=True)
class RunsFit:
    """The fitted profile and its errors (fractions, median |predicted / measured - 1|)."""

    profile: CalibrationProfile
    """Starting profile with the two scales applied."""
    compute_scale: float
    """Factor on the GEMM and attention efficiencies (clipped to at most 1)."""
    link_scale: float
    """Factor on every link efficiency (clipped to at most 1)."""
    train_rows: int
    """Rows simulated and used for the fit."""
    holdout_rows: int
    """Rows simulated and held out of the fit."""
    before: Mapping[str, float]
    """Median |error| with the starting profile: keys train, holdout."""
    after: Mapping[str, float]
    """Median |error| with the fitted profile: keys train, holdout."""


def scaled(profile: CalibrationProfile, compute: float, link: float) -> CalibrationProfile:
    """``profile`` with its compute efficiencies x ``compute`` and link efficiencies x ``link``."""
    def curve(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(x, float(np.clip(e * compute, 1e-4, 1.0))) for x, e in points]

    links = {k: float(np.clip(v * link, 1e-4, 1.0)) for k, v in profile.link_efficiency.items()}
    return profile.replace(gemm_efficiency=curve(profile.gemm_efficiency),
                           attention_efficiency=curve(profile.attention_efficiency), link_efficiency=links)


def median_abs_error(runs: pd.DataFrame, profile: CalibrationProfile) -> tuple[float, int]:
    """(median |error| as a fraction, rows simulated) of ``runs`` under ``profile``."""
    if runs.empty:
        return float("nan"), 0
    out = validate_runs(runs, profile=profile)
    ok = out[out.status == "ok"]
    return (float(ok.error_pct.abs().median()) / 100.0 if len(ok) else float("nan")), int(len(ok))


def split(runs: pd.DataFrame, holdout: float, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fitting part, held-out part): a random ``holdout`` fraction of the rows held out."""
    if not 0.0 <= holdout < 1.0:
        raise CalibrationError(f"--holdout {holdout}: use a fraction in [0, 1)")
    held = rng.random(len(runs)) < holdout
    return runs[~held], runs[held]


Progress = Callable[[int], None]
"""Called with the number of profile evaluations just finished (each simulates every row)."""

EVALUATIONS = len(COMPUTE_GRID) + len(LINK_GRID) + 3
"""Profile evaluations of one ``fit_runs``: both grids, then held-out before, both parts after."""


def _best(runs: pd.DataFrame, grid: tuple[float, ...], make: Callable[[float], CalibrationProfile], progress: Progress) -> tuple[float, dict[float, float]]:
    """(best scale, median |error| by scale); ties go to the scale nearest 1."""
    errors = {}
    for g in grid:
        errors[g] = median_abs_error(runs, make(g))[0]
        progress(1)
    scores = [(e, abs(np.log(g)), g) for g, e in errors.items() if not np.isnan(e)]
    if not scores:
        raise CalibrationError("import-runs: no row could be simulated; check the CSV's columns and values")
    return min(scores)[2], errors


def fit_runs(path: str | os.PathLike[str], base: CalibrationProfile, *, holdout: float = 0.3,
             rng: np.random.Generator, progress: Progress | None = None) -> RunsFit:
    """Fit compute and link scales on a random part of the runs in ``path``; report both parts."""
    tick: Progress = progress or (lambda n: None)
    train, held = split(load_runs(Path(path)), holdout, rng)
    if train.empty:
        raise CalibrationError(f"import-runs: {path} leaves no rows to fit with --holdout {holdout}")
    compute, by_scale = _best(train, COMPUTE_GRID, lambda g: scaled(base, g, 1.0), tick)
    link, _ = _best(train, LINK_GRID, lambda g: scaled(base, compute, g), tick)
    fitted = scaled(base, compute, link).replace(name=f"fitted on {path}",
                                                 source=f"clustersim calibrate import-runs {path}")
    b_train = by_scale[min(COMPUTE_GRID, key=lambda g: abs(np.log(g)))]  # the grid holds 1.0
    (a_train, n_train), (a_held, n_held) = median_abs_error(train, fitted), median_abs_error(held, fitted)
    b_held = median_abs_error(held, base)[0]
    tick(3)
    return RunsFit(profile=fitted, compute_scale=compute, link_scale=link, train_rows=n_train, holdout_rows=n_held,
                   before={"train": b_train, "holdout": b_held}, after={"train": a_train, "holdout": a_held})
