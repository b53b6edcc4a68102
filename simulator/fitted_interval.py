"""The interval of a user's fitted profile: the fit report beside it (``calibrate fit --runs``).

Owns reading ``P.fit.json`` beside a profile ``P.yaml`` and saying the interval it gives a
prediction. Light on purpose (json only), so that ``simulate`` and ``scale`` can read it without
loading the fitting code; fitting itself lives in ``fit_logs``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

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


def fitted_interval_text(found: Mapping[str, float | str]) -> str:
    """A prediction's interval from the fit report beside its profile (``fitted_interval_json``),
    in words."""
    return (f"interval {float(found['low_s']):.3g}-{float(found['high_s']):.3g} s (measured = predicted x "
            f"[{float(found['ratio_low']):.3f}, {float(found['ratio_high']):.3f}], held-out run families of {found['source']})")


def fitted_interval_json(profile_path: str | os.PathLike[str] | None, step_time_s: float) -> dict[str, float | str] | None:
    """The interval of the fit report beside a profile (``calibrate fit --runs``) for a prediction
    of ``step_time_s``, as data (``simulate --json``'s ``fitted_interval``); None when the profile
    has no report (the published-runs interval applies then)."""
    found = read_interval(profile_path) if profile_path is not None else None
    if found is None or profile_path is None:
        return None
    lo, hi = found
    return {"low_s": step_time_s * lo, "high_s": step_time_s * hi, "ratio_low": lo, "ratio_high": hi,
            "source": str(interval_path(profile_path))}
