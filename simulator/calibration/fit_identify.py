"""Which GPU types' training rows identify their GEMM level and FP8 factor, and the cited values of the others.

Owns the rule that keeps the fit from setting a GPU type's BF16 GEMM curve or its FP8 factor from
rows that cannot tell them apart from another factor. A row identifies the GEMM level when its step
time moves with the GEMM curve and with none of ``expert_efficiency``, the FP8 or the FP4 factor (a
dense model at BF16 or FP16), and the FP8 factor when it moves with it and with neither expert
efficiency nor FP4 (a dense FP8 run). In every other row the scale only enters multiplied by one
of them (an FP8 row fixes GEMM x fp8, an MoE row GEMM x expert efficiency), so with no identifying
row the fit splits the product however the rest of the rows pull. On the bundled table no Blackwell
row is a dense BF16 run and no B300 row a dense FP8 one: the bundled profiles of 2026-12-01 had
B300's BF16 GEMM level at 0.60 and GB300's at 0.77 of the cited level (H100's fit times the measured
matmul ratio), their FP8 factors at the upper bound (1.2, cited 0.95), and a dense BF16 model came
out about 1.45x slower on B300 than on B200 (same datasheet peak, a measured matmul rate 1.4 %
higher). ``cited_ties`` gives such a type the value of its donor (``fit_transfer.GROUP_DONORS``, the
first one whose training rows identify its own) times the cited part-to-part ratio
(``fit_transfer.transfer_ratios``, measured matmul FLOP/s over datasheet peak), and
``fit_identified`` redoes the fit with those scales, the donors' and the shared curve shape held
(``fit_first_order.fit_scales(frozen=)``); the type's other factors (expert efficiency, FP4, attention, links) are still fitted on its own rows. The
same rule in every fold and in ``--fit-profiles``; nothing is read from a held-out row.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from clustersim.simulator.calibration.fit_first_order import _Problem, fit_scales
from clustersim.simulator.calibration.fit_params import GEMM_POINTS, Bounds
from clustersim.simulator.calibration.fit_transfer import GROUP_DONORS, transfer_ratios

MOVE_REL = 1e-9
"""A row moves a parameter when its perturbed step time differs from the base by more than this
fraction of it (a parameter a row does not use changes it only by floating-point round-off)."""


def _moves(pb: _Problem, name: str) -> np.ndarray:
    slope = pb.slopes.get(name)
    if slope is None:
        return np.zeros(len(pb.t0), bool)
    moved: np.ndarray = np.abs(slope) > MOVE_REL * np.abs(pb.t0)
    return moved


CONFOUNDERS: Mapping[str, tuple[str, ...]] = {"gemm": ("exp", "fp8", "fp4"), "fp8": ("exp", "fp4")}
"""Per parameter the rule ties: the factors a row must not move to identify it. The GEMM scale
enters a row alone only in a dense BF16 run; the FP8 factor alone (times the GEMM level, which a
dense BF16 row or the cited tie fixes) only in a dense FP8 run."""


def identifying_rows(pb: _Problem, param: str = "gemm") -> np.ndarray:
    """Per row: its step time moves with ``param`` (for "gemm", any point of the GEMM curve) and with
    none of its ``CONFOUNDERS``."""
    if param == "gemm":
        moved = np.zeros(len(pb.t0), bool)
        for j in range(GEMM_POINTS):
            moved |= _moves(pb, f"g{j}")
    else:
        moved = _moves(pb, param)
    confounded = np.zeros(len(pb.t0), bool)
    for c in CONFOUNDERS[param]:
        confounded |= _moves(pb, c)
    out: np.ndarray = moved & ~confounded
    return out


def _level(pb: _Problem, x: Mapping[str, np.ndarray], param: str) -> np.ndarray:
    """Per group, the base value the scale of ``param`` multiplies: the GEMM curve's top (with the
    shared curve shape of ``x``) or the base FP8 factor."""
    if param == "gemm":
        top: np.ndarray = np.max(pb.base["gemm"] * x["curve"][None, :], axis=1)
        return top
    return np.asarray(pb.base[param], float)


def cited_ties(pb: _Problem, x: Mapping[str, np.ndarray], train: np.ndarray, *, bounds: Bounds = Bounds(),
               ) -> tuple[dict[str, dict[int, float]], dict[str, frozenset[int]], list[str]]:
    """What the refit holds (``fit_scales(frozen=)``), empty when every GPU type with training rows
    identifies its GEMM level and (where its rows move it) its FP8 factor: for each type that does
    not, the scale that gives it its donor's fitted level in ``x`` times the cited ratio, and the
    donors' scales (for the GEMM level also the shared curve shape: the level is scale x curve, so
    either moving would undo the tie); the tied group indices per parameter; one note per tie."""
    n = len(pb.groups)
    index = {g: i for i, g in enumerate(pb.groups)}
    rows_of = [train & (pb.gi == i) for i in range(n)]
    holds: dict[str, dict[int, float]] = {}
    tied: dict[str, frozenset[int]] = {}
    notes: list[str] = []
    for param in ("gemm", "fp8"):
        ident = identifying_rows(pb, param)
        used = np.ones(len(pb.t0), bool) if param == "gemm" else _moves(pb, param)
        has_ident = [bool(np.any(ident & r)) for r in rows_of]
        base = _level(pb, x, param)
        ties: dict[int, float] = {}
        donors_used: set[int] = set()
        for i, g in enumerate(pb.groups):
            if has_ident[i] or not np.any(used & rows_of[i]):
                continue
            donors = [d for d in GROUP_DONORS.get(g, ()) if d in index and has_ident[index[d]]]
            if not donors:
                notes.append(f"{g} {param}: no training row identifies it and no donor's does; fitted on its rows")
                continue
            d = index[donors[0]]
            ratio = transfer_ratios(donors[0], g).get(param, 1.0)
            scale = float(x[param][d]) * ratio * base[d] / base[i]
            if param == "gemm":
                scale = min(scale, bounds.max_efficiency / base[i])
                level = f"{base[i] * scale:.3f} at the curve's top"
            else:
                scale = min(max(scale, bounds.fp8[0] / base[i]), bounds.fp8[1] / base[i])
                level = f"{base[i] * scale:.3f}"
            ties[i] = scale
            donors_used.add(d)
            notes.append(f"{g} {param}: no training row identifies it (each also moves "
                         f"{' or '.join(CONFOUNDERS[param])}); the fitted {donors[0]} value x cited ratio {ratio:.3f} = {level}")
        if ties:
            holds[param] = {**{j: float(x[param][j]) for j in donors_used}, **ties}
            tied[param] = frozenset(ties)
            if param == "gemm":
                holds["curve"] = {j: float(v) for j, v in enumerate(x["curve"])}
    return holds, tied, notes


def fit_identified(pb: _Problem, measured: np.ndarray, weights: np.ndarray, *, train: np.ndarray | None = None,
                   hold: Mapping[str, Mapping[int, float]] | None = None, bounds: Bounds = Bounds(), sweeps: int = 4,
                   ) -> tuple[dict[str, np.ndarray], dict[str, frozenset[int]], list[str]]:
    """``fit_scales`` on the ``train`` rows (all by default) with ``hold`` held, then, where
    ``cited_ties`` ties a scale ``hold`` does not already hold, the fit redone with the ties held too
    (``hold`` wins: a tied type it holds keeps its held scale). The scales, the tied group indices
    per parameter (those ``hold`` holds left out) and the ties' notes."""
    mask = np.ones(len(pb.t0), bool) if train is None else train
    held = hold or {}
    x, _ = fit_scales(pb, measured, weights, bounds=bounds, sweeps=sweeps, mask=mask, frozen=held)
    ties, tied, notes = cited_ties(pb, x, mask, bounds=bounds)
    tied = {p: t for p, t in ((p, frozenset(i for i in s if i not in held.get(p, {}))) for p, s in tied.items()) if t}
    if tied:
        frozen = {name: {**ties.get(name, {}), **held.get(name, {})} for name in set(ties) | set(held)}
        x, _ = fit_scales(pb, measured, weights, bounds=bounds, sweeps=sweeps, mask=mask, frozen=frozen)
    return x, tied, notes
