"""Fitting a profile on imported runs, with leave-one-run-family-out error and intervals.

Owns ``clustersim calibrate fit --runs DIR``: every imported run (``imported_runs``) is simulated
at the two scales of ``fit_runs.scaled`` (one on the compute efficiency curves, one on every
link efficiency; log-spaced grids that include 1); the scales minimising the median
|log(predicted / measured)| are found on all families but one, and that family's runs are
predicted: those held-out ratios measured / predicted are the out-of-sample error and give the
interval a prediction carries ([min, max] of the ratios under 20 runs, else the 5-95%
quantiles). The profile written is fitted on every run. A family named in ``hold_out`` is kept
out of everything and predicted at the end, with the check that it falls in the interval.
It does not parse logs nor simulate anything but the runs' own scenarios.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from clustersim.files import write_json
from clustersim.simulator.calibration.fit_runs import scaled
from clustersim.simulator.fitted_interval import interval_path
from clustersim.simulator.calibration.imported_runs import load_run, run_folders
from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.scenario import Scenario, load_scenario
from clustersim.simulator.step import simulate_step as simulate

COMPUTE_GRID = tuple(float(x) for x in np.geomspace(0.125, 8.0, 13))
"""Compute-efficiency scales tried: log-spaced, 1 in the middle; wider than ``fit_runs``'s (a
user's cluster, or a loaded host, can sit further from the bundled profiles than published runs)."""
LINK_GRID = COMPUTE_GRID
"""Link-efficiency scales tried."""
QUANTILE_RUNS = 20
"""From this many held-out runs on, the interval is the 5-95% quantiles (below: min to max)."""


@dataclass(frozen=True, kw_only=True)
class Run:
    """One imported run, ready to simulate."""

    name: str
    family: str
    scenario: Scenario
    base: CalibrationProfile
    """The scenario's own profile, else the bundled default of its GPU."""
    measured_s: float
    """Steady-state median step time."""


@dataclass(frozen=True, kw_only=True)
class HeldOut:
    """One run predicted by a fit that did not see its family."""

    name: str
    family: str
    measured_s: float
    predicted_s: float
    compute_scale: float
    link_scale: float

    @property
    def ratio(self) -> float:
        """measured / predicted."""
        return self.measured_s / self.predicted_s


@dataclass(frozen=True, kw_only=True)
class LogsFit:
    """The fitted scales, the profile, and the out-of-sample figures."""

    compute_scale: float
    link_scale: float
    profile: CalibrationProfile
    held_out: tuple[HeldOut, ...]
    interval: tuple[float, float]
    """(low, high) multipliers on a prediction: measured / predicted of held-out runs."""
    in_sample_error: float
    """Median |predicted / measured - 1| of the final fit on its own runs."""
    before_error: float
    """Median |predicted / measured - 1| with the base profiles."""
    check: tuple[HeldOut, ...] = ()
    """Runs of the ``hold_out`` family, predicted by the final fit."""

    @property
    def out_of_sample_error(self) -> float:
        """Median |predicted / measured - 1| over the held-out predictions."""
        return float(np.median([abs(1.0 / h.ratio - 1.0) for h in self.held_out]))


Progress = Callable[[int], None]
Cache = dict[tuple[str, float, float], float]
"""Simulated step times by (run, compute scale, link scale)."""


def load_runs(root: str | os.PathLike[str]) -> list[Run]:
    """Every imported run under ``root``, with its scenario loaded (errors name the folder)."""
    runs = []
    for folder in run_folders(root):
        doc, scenario_path = load_run(folder)
        sc = load_scenario(scenario_path)
        base = sc.profile or default_profile(sc.cluster.accelerator.name)
        runs.append(Run(name=str(doc["name"]), family=str(doc["family"]), scenario=sc, base=base,
                        measured_s=float(doc["steady"]["median_s"])))
    if not runs:
        raise CalibrationError(f"--runs {root}: no imported run (run.json) found; import runs with `clustersim import-run`")
    return runs


def predict(run: Run, compute: float, link: float, cache: Cache) -> float:
    """Simulated step time of ``run`` with its base profile scaled (cached)."""
    key = (run.name, compute, link)
    if key not in cache:
        sc = run.scenario
        prof = scaled(run.base, compute, link)
        cache[key] = float(simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=prof,
                                    mode=sc.mode, seed=sc.seed).step_time)
    return cache[key]


def _score(runs: Sequence[Run], compute: float, link: float, cache: Cache, tick: Progress) -> float:
    tick(1)
    return float(np.median([abs(np.log(predict(r, compute, link, cache) / r.measured_s)) for r in runs]))


def fit_scales(runs: Sequence[Run], cache: Cache, tick: Progress) -> tuple[float, float]:
    """Compute scale on its grid (link 1), then link scale at it; ties go to the scale nearest 1."""
    def best(grid: tuple[float, ...], score: Callable[[float], float]) -> float:
        return min((score(g), abs(np.log(g)), g) for g in grid)[2]

    c = best(COMPUTE_GRID, lambda g: _score(runs, g, 1.0, cache, tick))
    return c, best(LINK_GRID, lambda g: _score(runs, c, g, cache, tick))


def interval_of(ratios: Sequence[float]) -> tuple[float, float]:
    """(low, high) multipliers: min-max under ``QUANTILE_RUNS`` ratios, else 5-95% quantiles."""
    r = np.asarray(ratios, dtype=float)
    if len(r) < QUANTILE_RUNS:
        return float(r.min()), float(r.max())
    return float(np.quantile(r, 0.05)), float(np.quantile(r, 0.95))


def _held_out(run: Run, c: float, l: float, cache: Cache) -> HeldOut:
    return HeldOut(name=run.name, family=run.family, measured_s=run.measured_s,
                   predicted_s=predict(run, c, l, cache), compute_scale=c, link_scale=l)


def fit_on_runs(runs: Sequence[Run], *, hold_out: str | None = None, progress: Progress | None = None) -> LogsFit:
    """Leave-one-family-out cross-validation, then the fit on every run (minus ``hold_out``)."""
    tick: Progress = progress or (lambda n: None)
    if hold_out is not None and hold_out not in {r.family for r in runs}:
        raise CalibrationError(f"--hold-out {hold_out!r} is no family of the runs; families: {sorted({r.family for r in runs})}")
    use = [r for r in runs if r.family != hold_out]
    families = sorted({r.family for r in use})
    if len(families) < 2:
        raise CalibrationError(f"leave-one-family-out needs runs of >= 2 families; found {families}: "
                               "import runs of other models or plans, or give them different --family names")
    cache: Cache = {}
    held = []
    for fam in families:
        c, l = fit_scales([r for r in use if r.family != fam], cache, tick)
        held += [_held_out(r, c, l, cache) for r in use if r.family == fam]
    c, l = fit_scales(use, cache, tick)
    own = [abs(predict(r, c, l, cache) / r.measured_s - 1.0) for r in use]
    before = [abs(predict(r, 1.0, 1.0, cache) / r.measured_s - 1.0) for r in use]
    base = use[0].base
    profile = scaled(base, c, l).replace(name=f"{base.name} fitted on {len(use)} imported runs",
                                         source=f"clustersim calibrate fit --runs ({', '.join(families)})")
    check = tuple(_held_out(r, c, l, cache) for r in runs if r.family == hold_out)
    return LogsFit(compute_scale=c, link_scale=l, profile=profile, held_out=tuple(held),
                   interval=interval_of([h.ratio for h in held]), in_sample_error=float(np.median(own)),
                   before_error=float(np.median(before)), check=check)


def evaluations(runs: Sequence[Run], hold_out: str | None) -> int:
    """Grid evaluations ``fit_on_runs`` makes (for a progress bar)."""
    families = {r.family for r in runs if r.family != hold_out}
    return (len(families) + 1) * (len(COMPUTE_GRID) + len(LINK_GRID))


def fit_report(fit: LogsFit) -> dict[str, Any]:
    """The JSON written beside the profile (``watch`` reads its interval)."""
    def rows(hs: Sequence[HeldOut]) -> list[dict[str, Any]]:
        return [{"run": h.name, "family": h.family, "measured_s": h.measured_s, "predicted_s": h.predicted_s,
                 "ratio": h.ratio, "compute_scale": h.compute_scale, "link_scale": h.link_scale} for h in hs]

    return {"interval": list(fit.interval), "compute_scale": fit.compute_scale, "link_scale": fit.link_scale,
            "out_of_sample_median_abs_error": fit.out_of_sample_error, "in_sample_median_abs_error": fit.in_sample_error,
            "base_median_abs_error": fit.before_error, "held_out": rows(fit.held_out), "check": rows(fit.check),
            "interval_rule": f"min-max of held-out measured/predicted under {QUANTILE_RUNS} runs, else 5-95% quantiles"}


def write_report(fit: LogsFit, profile_path: str | os.PathLike[str]) -> Path:
    """Write the fit report beside the profile."""
    return write_json(interval_path(profile_path), fit_report(fit))


def within(h: HeldOut, interval: tuple[float, float]) -> bool:
    """Whether a run's measured time lies in predicted x [low, high]."""
    return interval[0] <= h.ratio <= interval[1]


def families_of(runs: Sequence[Run]) -> Mapping[str, int]:
    """Runs per family."""
    out: dict[str, int] = {}
    for r in runs:
        out[r.family] = out.get(r.family, 0) + 1
    return out
