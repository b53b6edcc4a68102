"""The interval of one prediction from the stored table, and the extrapolation flag.

Owns the regimes (``regime``: model kind dense | moe | hybrid x GPU generation), the interval of
one prediction (``interval_for``, ``interval_of``) read from the table stored as data
(``simulator/calibration/intervals.yaml``, ``load_intervals``): its regime's bounds widened by the
stored between-family factor of its distance class, or, when its regime or scale has no held-out
evidence, the pooled bounds widened by the stored extrapolation factor, marked extrapolated with
the nearest validated regime named; on a GPU type no row fitted, the union with the
leave-one-GPU-type-out table (``load_transferred``). The table itself is built from the
cross-validated residuals by ``interval_fit``; this module needs no pandas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.step import Result
from clustersim.workloads import ModelSpec

INTERVALS_PATH = Path(__file__).parent / "calibration" / "intervals.yaml"
"""The bundled interval table (``clustersim validate --cross-validate family --write-intervals``)."""

LEVELS: tuple[float, ...] = (0.8, 0.9)
"""Nominal coverages stored and checked."""

GENERATIONS: Mapping[str, str] = {
    "a100": "ampere", "a800": "ampere", "h100": "hopper", "h800": "hopper", "h200": "hopper", "h20": "hopper",
    "gh200": "hopper", "b200": "blackwell", "b300": "blackwell", "gb200": "blackwell", "gb300": "blackwell",
    "mi250x": "cdna2", "mi300x": "cdna3", "mi325x": "cdna3"}
"""GPU generation by profile stem / accelerator name prefix (longest prefix wins)."""

MIN_REGIME_ROWS = 10
"""Fewer held-out residuals than this in a regime: the pooled residuals are used (extrapolated)."""

WIDEN_FALLBACK = 2.0
"""The widening of a stored table written before ``extrapolation_widening`` (its ``widen`` is one
number): the pooled interval's log-ratio bounds times this factor, the rule of those tables."""

SCALE_HEADROOM = 2.0
"""A prediction on more than this times the largest validated GPU count of its regime extrapolates."""

TRANSFERRED_PATH = Path(__file__).parent / "calibration" / "intervals_transferred.yaml"
"""The bundled interval of a prediction on a GPU type whose profile no row of that type fitted
(``clustersim validate --cross-validate gpu``, ``calibration.intervals_transferred.transferred_table``)."""


def generation(name: str) -> str:
    """GPU generation of an accelerator or profile name ('' when unknown)."""
    key = name.strip().lower().split()[0] if name.strip() else ""
    hits = [p for p in GENERATIONS if key.startswith(p)]
    return GENERATIONS[max(hits, key=len)] if hits else ""


def regime(kind: str, gpu: str) -> str:
    """``kind/generation``, e.g. ``dense/hopper``."""
    return f"{kind}/{generation(gpu) or gpu.lower()}"


def widen(lo: float, hi: float, factor: float) -> tuple[float, float]:
    """(lo, hi) with their log-ratios times ``factor`` (never narrower; inf factor: unbounded)."""
    if not math.isfinite(factor):
        return 0.0, math.inf
    lo_w = math.exp(factor * math.log(lo)) if lo > 0 else 0.0
    hi_w = math.exp(factor * math.log(hi)) if math.isfinite(hi) else math.inf
    return min(lo_w, lo), max(hi_w, hi)


def load_transferred(path: str | Path = TRANSFERRED_PATH) -> dict[str, Any] | None:
    """The stored transferred-profile interval, None where none is stored."""
    where = Path(path)
    if not where.exists():
        return None
    table: dict[str, Any] = yaml.safe_load(where.read_text())
    return table


def transferred_stem(gpu: str, fitted: Sequence[str]) -> str | None:
    """The bundled profile stem a prediction on ``gpu`` runs at when no row of that GPU type fitted it
    (its part is not among the ``fitted`` types: H800 at H100's, H200 at the copy of H100's), else
    None (a fitted part, or a part without a bundled profile: the generic defaults)."""
    from clustersim.simulator.profile import MEMORY_VARIANTS, PROFILE_OF_PART, part_key

    key = part_key(gpu)
    stem = PROFILE_OF_PART.get(key) if key is not None else None
    if key is None or stem is None:
        return None
    return None if MEMORY_VARIANTS.get(key, key) in fitted else stem


def load_intervals(path: str | Path = INTERVALS_PATH) -> dict[str, Any]:
    """The stored interval table."""
    where = Path(path)
    if not where.exists():
        raise CalibrationError(f"interval table {where} missing; run clustersim validate --cross-validate family --write-intervals")
    table: dict[str, Any] = yaml.safe_load(where.read_text())
    return table


@dataclass(frozen=True, kw_only=True)
class Interval:
    """The interval of one predicted step time."""

    low_s: float
    """Lower bound of the measured step time (s)."""
    high_s: float
    """Upper bound (s; inf when the residuals cannot bound it)."""
    level: float
    """Nominal coverage."""
    regime: str
    """kind/generation of the prediction."""
    extrapolated: bool
    """No held-out evidence for this regime or scale: pooled interval widened (``extrapolation_widening``)."""
    nearest: str
    """The validated regime (or "pooled") the interval comes from, with its rows and GPU range."""


def _bound(v: Any) -> float:
    return float(v)


def interval_for(step_time: float, kind: str, gpu: str, num_gpus: int, *, level: float = 0.8,
                 table: Mapping[str, Any] | None = None, transferred: Mapping[str, Any] | None = None) -> Interval:
    """The interval of a prediction of ``step_time`` s for a ``kind`` model on ``num_gpus`` ``gpu``s.

    On a GPU type whose profile no row of that type fitted (``transferred_stem``), the union of its
    regime's interval and the transferred table's bounds (``transferred``, by default the bundled
    ``intervals_transferred.yaml``; with ``table`` given and ``transferred`` not, none): the
    leave-one-GPU-type-out residuals, marked extrapolated; never narrower than a fitted part's."""
    tab = table if table is not None else load_intervals()
    key = f"ratio_{int(round(level * 100))}"
    own = _regime_interval(step_time, kind, gpu, num_gpus, level, tab, key)
    moved = transferred if transferred is not None else (load_transferred() if table is None else None)
    stem = transferred_stem(gpu, moved["gpu_types"]) if moved is not None else None
    if moved is None or stem is None:
        return own
    if key not in moved:
        raise CalibrationError(f"interval level {level} not stored; use one of {moved['levels']}")
    lo, hi = (_bound(v) for v in moved[key])
    return Interval(low_s=min(step_time * lo, own.low_s), high_s=max(step_time * hi, own.high_s), level=level,
                    regime=own.regime, extrapolated=True,
                    nearest=f"no {gpu} row fitted its profile ({stem}'s); interval: leave-one-GPU-type-out residuals "
                            f"({moved['rows']} rows of {len(moved['gpu_types'])} held-out GPU types) or {own.nearest}, "
                            "the wider")


def _regime_interval(step_time: float, kind: str, gpu: str, num_gpus: int, level: float, tab: Mapping[str, Any],
                     key: str) -> Interval:
    """The interval of the prediction's regime: its own held-out residuals, or the pooled ones widened."""
    reg = regime(kind, gpu)
    entry = tab["regimes"].get(reg)
    if entry is not None and key not in entry:
        raise CalibrationError(f"interval level {level} not stored; use one of {tab['levels']}")
    if entry is not None and entry["rows"] >= tab["min_regime_rows"] and num_gpus <= SCALE_HEADROOM * entry["max_gpus"]:
        lo, hi = widen(_bound(entry[key][0]), _bound(entry[key][1]), stored_family_widening(tab, key, "validated"))
        return Interval(low_s=step_time * lo, high_s=step_time * hi, level=level, regime=reg, extrapolated=False,
                        nearest=f"{reg} ({entry['rows']} held-out rows, up to {entry['max_gpus']} GPUs)")
    factor = stored_widening(tab, key)
    pooled_lo, pooled_hi = (_bound(v) for v in tab["pooled"][key])
    lo, hi = widen(pooled_lo, pooled_hi, factor)
    lo, hi = widen(lo, hi, stored_family_widening(tab, key, "extrapolated"))
    near = _nearest(tab, reg, factor)
    return Interval(low_s=step_time * lo, high_s=step_time * hi, level=level, regime=reg, extrapolated=True,
                    nearest=near)


def stored_widening(tab: Mapping[str, Any], key: str) -> float:
    """The table's widening factor at level ``key`` (``ratio_80``): per level since the factor is
    measured (``extrapolation_widening``); one number (``WIDEN_FALLBACK``'s rule) in older tables."""
    widen = tab.get("widen", WIDEN_FALLBACK)
    return float(widen[key]) if isinstance(widen, Mapping) else float(widen)


def stored_family_widening(tab: Mapping[str, Any], key: str, distance: str) -> float:
    """The table's between-family factor at level ``key`` for a prediction of class ``distance``
    (``class_widening``: one number per ``DISTANCE_CLASSES`` name); a table with one number per
    level (``family_widening``, before the classes) applies it to both, and one without it 1
    (its intervals as they were)."""
    factor = tab.get("family_widen", {}).get(key, 1.0)
    return float(factor[distance]) if isinstance(factor, Mapping) else float(factor)


def _nearest(tab: Mapping[str, Any], reg: str, factor: float) -> str:
    """The validated regime sharing the model kind, else the generation, else 'pooled'."""
    kind, gen = reg.split("/", 1)
    regs = tab["regimes"]
    for cand in [r for r in regs if r.startswith(kind + "/")] + [r for r in regs if r.endswith("/" + gen)]:
        if regs[cand]["rows"] >= tab["min_regime_rows"]:
            return f"{cand} ({regs[cand]['rows']} held-out rows, up to {regs[cand]['max_gpus']} GPUs); interval: pooled, log-ratio x{factor:.2f}"
    return f"pooled ({tab['pooled']['rows']} held-out rows); interval: pooled, log-ratio x{factor:.2f}"


def model_kind(layer_pattern: str | None, is_moe: bool) -> str:
    """dense | moe | hybrid from a ModelSpec's ``layer_pattern`` and ``is_moe``."""
    return "hybrid" if layer_pattern is not None else ("moe" if is_moe else "dense")


def interval_of(result: Result, model: ModelSpec, *, level: float = 0.8,
                table: Mapping[str, Any] | None = None) -> Interval:
    """The interval of a simulated ``result`` of ``model`` (its regime from the model and accelerator)."""
    return interval_for(result.step_time, model_kind(model.layer_pattern, model.is_moe),
                        str(result.labels.get("accelerator", "")), result.num_gpus, level=level, table=table)
