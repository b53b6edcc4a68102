"""The held-out half of the cross-validation: rows re-simulated at their fold's profiles, and the
per-family table of the errors.

Owns ``simulate_held_out`` (every ok row at its fold's fitted profile and, when asked, at the
all-families one, in worker processes), ``regime_of_row`` (dense / MoE / hybrid, the intervals'
regimes) and ``family_table`` (in- and out-of-sample MAPE, bias and the repeatability floor per held-out
family). The folds themselves, what is fitted inside each and the protocol are
``calibration.fit_crossval``'s; this module never fits and never reads a measured time but to score.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

import numpy as np
import pandas as pd

from clustersim.simulator.calibration.fit_defaults import map_chunks, profile_key
from clustersim.simulator.calibration.repeatability import row_floors
from clustersim.simulator.calibration.validate import ClusterKey, validate_row
from clustersim.simulator.calibration.validate_rules import SkipRow, model_for_row
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.network import Fidelity
from clustersim.simulator.profile import CalibrationProfile
from clustersim.topologies import Cluster


class Fitted(Protocol):
    """A fold's fit as this module reads it (``fit_crossval.FoldFit``): a profile per GPU type."""

    @property
    def profiles(self) -> Mapping[str, CalibrationProfile]: ...


def regime_of_row(row: Mapping[str, Any]) -> str:
    """dense | moe | hybrid of the row's model (the row mapping's own model); '' if unreadable."""
    try:
        model = model_for_row(row, [])
    except (SkipRow, ValueError):
        return ""
    return "hybrid" if model.layer_pattern is not None else ("moe" if model.is_moe else "dense")


def simulate_chunk(items: list[tuple[dict[str, Any], CalibrationProfile, CalibrationProfile | None]],
                    fidelity: Fidelity) -> list[dict[str, Any]]:
    """Worker: each row at its fold profile (held out) and, unless None, at the all-families profile."""
    cache: dict[ClusterKey, Cluster] = {}
    out = []
    for row, fold_prof, full_prof in items:
        held = validate_row(row, profile=fold_prof, fidelity=fidelity, cache=cache)
        full = validate_row(row, profile=full_prof, fidelity=fidelity, cache=cache) if full_prof is not None else None
        out.append({"row_id": int(row["row_id"]), "held_out_s": held["predicted_step_time_s"],
                    "in_sample_s": full["predicted_step_time_s"] if full else None, "held_status": held["status"],
                    "held_reason": held["reason"], "regime": regime_of_row(row), "scenario": held["scenario"],
                    "predicted_oom": "memory check lifted" in str((full or held)["inferred"] or "")})
    return out


def simulate_held_out(runs: pd.DataFrame, ok: pd.DataFrame, fam: np.ndarray, fold_of: Mapping[str, Fitted],
                      full: Fitted | None, fidelity: Fidelity, workers: int,
                      progress: Callable[[int, int], None] | None) -> pd.DataFrame:
    """Each ok row (``ok``, its fold label in ``fam``) re-simulated at its fold's profile of its GPU type
    (``held_out_s``) and, unless ``full`` is None, at the all-families profile (``in_sample_s``); rows in
    chunks of 8 over ``workers`` processes, ``progress(done, total)`` after each chunk."""
    by_id = {int(r["row_id"]): {str(k): v for k, v in r.items()} for r in runs.to_dict("records")}
    keys = list(next(iter(fold_of.values())).profiles)
    items = []
    for rid, f, gpu in zip(ok.row_id.astype(int), fam, ok.gpu_type.astype(str)):
        key = profile_key(gpu, keys)
        if key is None:
            raise CalibrationError(f"gpu_type {gpu!r} of an ok row: no profile among {keys}")
        items.append((by_id[rid], fold_of[f].profiles[key], full.profiles[key] if full is not None else None))
    chunks = [items[i:i + 8] for i in range(0, len(items), 8)]
    return map_chunks(simulate_chunk, chunks, (fidelity,), workers=workers, total=len(items), progress=progress)


def family_table(frame: pd.DataFrame, column: str = "family") -> pd.DataFrame:
    """Per held-out family (per value of ``column``: "fold" for the held-out GPU types) and "all":
    rows, in-sample MAPE, out-of-sample MAPE, out-of-sample bias, and the repeatability floor
    (``repeatability.row_floors``: the least MAPE any prediction from the rows' inputs can reach,
    their scenarios measured more than once; nan without a ``scenario`` column)."""
    def line(name: str, g: pd.DataFrame) -> dict[str, Any]:
        return {"family": name, "rows": len(g), "mape_in_sample": float(g.error_in_pct.abs().mean()),
                "mape_out_of_sample": float(g.error_out_pct.abs().mean()),
                "median_abs_out": float(g.error_out_pct.abs().median()), "bias_out": float(g.error_out_pct.mean()),
                "floor_mape": float(row_floors(g.scenario, g.measured_s).mean()) if "scenario" in g else float("nan")}
    out = [line(str(f), g) for f, g in frame.groupby(column)]
    return pd.DataFrame(out + [line("all", frame)])
