"""The interval of a user's fitted profile: the fit report beside it (``calibrate fit --runs``).

Owns reading ``P.fit.json`` beside a profile ``P.yaml`` and saying the interval it gives a
prediction. Light on purpose (json only), so that ``simulate`` and ``scale`` can read it without
loading the fitting code; fitting itself lives in ``fit_logs``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["fitted_interval_json", "fitted_interval_text", "interval_path", "read_interval"]


def interval_path(profile_path: str | os.PathLike[str]) -> Path:
    """The fit report beside a profile: ``P.yaml`` -> ``P.fit.json``."""
    p = Path(profile_path)
    return p.with_name(p.stem + ".fit.json")


def read_interval(profile_path: str | os.PathLike[str]) -> tuple[float, float] | None:
    """The interval of the fit report beside a profile, or None when there is none."""
    p = interval_path(profile_path)
    if not p.is_file():
        return None
    lo, hi = json.loads(p.read_text())["interval"]
    return float(lo), float(hi)


def fitted_interval_text(profile_path: str | os.PathLike[str] | None, step_time_s: float) -> str | None:
    """A prediction's interval from the fit report beside its profile (``calibrate fit --runs``), in
    words; None when the profile has no report (the published-runs interval applies then)."""
    found = read_interval(profile_path) if profile_path is not None else None
    if found is None or profile_path is None:
        return None
    lo, hi = found
    return (f"interval {step_time_s * lo:.3g}-{step_time_s * hi:.3g} s (measured = predicted x [{lo:.3f}, {hi:.3f}], "
            f"held-out run families of {interval_path(profile_path)})")


def fitted_interval_json(profile_path: str | os.PathLike[str] | None, step_time_s: float) -> dict[str, float | str] | None:
    """The same interval as data (``simulate --json``'s ``fitted_interval``); None without a report."""
    found = read_interval(profile_path) if profile_path is not None else None
    if found is None or profile_path is None:
        return None
    lo, hi = found
    return {"low_s": step_time_s * lo, "high_s": step_time_s * hi, "ratio_low": lo, "ratio_high": hi,
            "source": str(interval_path(profile_path))}
