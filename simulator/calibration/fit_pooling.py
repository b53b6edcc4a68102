"""Partial pooling of the per-GPU efficiency scales across GPU types, inside a fold's fit.

Owns how knowledge crosses GPU types in the first-order fit (``fit_first_order``): every per-GPU
parameter of ``PER_GROUP`` is read as a level, the log of an absolute fraction of that part's own
datasheet peak (``levels``: the GEMM curve's top point, the attention curve's top, the geometric
mean of NVLink and NIC efficiency, expert, FP8, FP4). The fit minimises the weighted MAPE plus
``strength`` x the squared deviations of each GPU type's level from the mean level of the types
whose training rows move that parameter (``pool_penalty``: a normal prior on the per-type
deviation around a pooled value, the random-effects form of Gelman & Hill 2007, "Data Analysis
Using Regression and Multilevel/Hierarchical Models", ch. 12: a type with few rows is drawn
toward the pool, one with many keeps its own value). A type that no training row moves for a
parameter takes the pooled level (``fill_pooled``), instead of one donor's whole profile; a
parameter no type has evidence for keeps its prior (``fit_crossval.PRIORS``).
The strength is chosen from ``STRENGTHS`` on the training rows only, by leave-one-family-out
inside them (``choose_strength``: nested cross-validation; each inner family weighs one unit), so
a held-out family never picks it. numpy only; it simulates nothing.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from clustersim.simulator.calibration.fit_first_order import _Problem, fit_scales, predict
from clustersim.simulator.calibration.fit_params import GEMM_POINTS, PER_GROUP, Bounds

STRENGTHS: tuple[float, ...] = (0.0, 1.0, 10.0)
"""Candidate prior strengths (objective percent points per unit of squared log deviation; 0 = no
pull, each type fitted on its own rows, types without rows still take the pooled level). One
type 20 % off the pool on one parameter (log 0.18) costs 0.03 / 0.3 MAPE points at 1 / 10; a
spread like that on all six parameters of seven types ~1.4 / 14 points: from a light pull to
nearly one shared profile."""
INNER_SWEEPS = 1
"""Coarse-grid sweeps of the inner fits of ``choose_strength`` (the outer fit keeps its own):
three strengths x four inner families per fold make the selection the fit's main cost."""

Scales = dict[str, np.ndarray]


def evidence(pb: _Problem, train: np.ndarray) -> dict[str, np.ndarray]:
    """Per parameter of ``PER_GROUP``: which GPU types have a training row with a nonzero slope."""
    out = {}
    for p in PER_GROUP:
        cols = [f"g{j}" for j in range(GEMM_POINTS)] if p == "gemm" else [p]
        moved = np.zeros(len(pb.t0), bool)
        for c in cols:
            if c in pb.slopes:
                moved |= pb.slopes[c] != 0
        out[p] = np.array([bool(np.any(moved & train & (pb.gi == i))) for i in range(len(pb.groups))])
    return out


def references(pb: _Problem, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per parameter, the log absolute level of each type at scale 1 (its level = ref + log scale)."""
    b = pb.base
    gemm_top = np.max(b["gemm"] * x["curve"][None, :], axis=1)
    return {"gemm": np.log(gemm_top), "attn": np.log(b["attn_max"]),
            "link": 0.5 * (np.log(b["nvlink"]) + np.log(b["nic"])),
            "exp": np.log(b["exp"]), "fp8": np.log(b["fp8"]), "fp4": np.log(b["fp4"])}


def levels(pb: _Problem, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per parameter, the log absolute level of every GPU type at scales ``x``."""
    return {p: r + np.log(x[p]) for p, r in references(pb, x).items()}


def pool_penalty(pb: _Problem, have: Mapping[str, np.ndarray],
                 strength: float) -> Callable[[Mapping[str, np.ndarray]], float]:
    """strength x sum over parameters of the squared deviations of the types with evidence from
    their mean level (a parameter with evidence on fewer than two types adds nothing)."""
    pooled = [p for p in PER_GROUP if int(have[p].sum()) >= 2]

    def penalty(x: Mapping[str, np.ndarray]) -> float:
        if strength <= 0 or not pooled:
            return 0.0
        lv = levels(pb, x)
        return strength * float(sum(np.sum((lv[p][have[p]] - lv[p][have[p]].mean()) ** 2) for p in pooled))
    return penalty


def fill_pooled(pb: _Problem, x: Scales, have: Mapping[str, np.ndarray],
                bounds: Bounds) -> tuple[Scales, list[str]]:
    """``x`` with each type lacking evidence for a parameter set to the mean level of the types
    that have it (kept within ``bounds``); notes name what was pooled and from which types."""
    out = {k: v.copy() for k, v in x.items()}
    ref, lv = references(pb, x), levels(pb, x)
    notes = []
    for p in PER_GROUP:
        donors = have[p]
        if not donors.any():
            continue
        mean = float(lv[p][donors].mean())
        for i in np.flatnonzero(~donors):
            out[p][i] = _clip(pb, p, int(i), float(np.exp(mean - ref[p][i])), x, bounds)
            names = ", ".join(g for g, d in zip(pb.groups, donors) if d)
            notes.append(f"{pb.groups[i]} {p}: no training row moves it, pooled level {np.exp(mean):.3f} of {names}")
    return out, notes


def _clip(pb: _Problem, p: str, i: int, s: float, x: Mapping[str, np.ndarray], bounds: Bounds) -> float:
    """Scale ``s`` of parameter ``p`` for type ``i``, lowered or raised into ``bounds``."""
    b, hi = pb.base, bounds.max_efficiency
    if p == "gemm":
        return min(s, hi / float(np.max(b["gemm"][i] * x["curve"])))
    if p == "attn":
        return float(min(s, hi / b["attn_max"][i], hi / (b["attn_max"][i] * b["ak"][i])))
    if p == "link":
        return float(min(s, hi / b["nvlink"][i], bounds.max_nic_efficiency / b["nic"][i]))
    lo, up = {"exp": bounds.expert, "fp8": bounds.fp8, "fp4": bounds.fp4}[p]
    return float(np.clip(s * b[p][i], lo, up) / b[p][i])


def fit_pooled(pb: _Problem, measured: np.ndarray, weights: np.ndarray, train: np.ndarray, strength: float, *,
               bounds: Bounds = Bounds(), sweeps: int = 4) -> tuple[Scales, list[str]]:
    """Scales fitted on the ``train`` rows with the pooling prior at ``strength``, then every type
    without evidence for a parameter filled with the pooled level."""
    have = evidence(pb, train)
    x, _ = fit_scales(pb, measured, weights, bounds=bounds, sweeps=sweeps, mask=train,
                      penalty=pool_penalty(pb, have, strength))
    return fill_pooled(pb, x, have, bounds)


def choose_strength(pb: _Problem, measured: np.ndarray, weights: np.ndarray, family: np.ndarray, train: np.ndarray,
                    *, bounds: Bounds = Bounds(), sweeps: int = 4,
                    strengths: tuple[float, ...] = STRENGTHS) -> tuple[float, dict[float, float]]:
    """The strength with the least first-order MAPE on inner held-out families, and every score.

    Inner folds: each family among the ``train`` rows held out in turn, the fit on the rest of the
    training rows; the score is the mean over those families of their MAPE (each family one unit).
    Ties go to the smaller strength. One training family leaves nothing to hold out: the first
    strength, with no score."""
    fams = sorted(set(family[train]))
    if len(fams) < 2:
        return strengths[0], {}
    scores = {}
    for s in strengths:
        per_family = []
        for f in fams:
            inner = train & (family != f)
            x, _ = fit_pooled(pb, measured, weights, inner, s, bounds=bounds, sweeps=min(sweeps, INNER_SWEEPS))
            test = train & (family == f)
            per_family.append(float(np.mean(np.abs(predict(pb, x)[test] - measured[test]) / measured[test])) * 100.0)
        scores[s] = float(np.mean(per_family))
    best = min(strengths, key=lambda s: (scores[s], s))
    return best, scores
