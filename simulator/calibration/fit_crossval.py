"""Cross-validation by publication family: the out-of-sample error of the whole profile fit.

Owns the group k-fold protocol of docs/VALIDATION.md ("Out-of-sample"): a fold is one publication
family (``validate.FAMILIES``); inside each fold everything that learns from measured rows is redone
on the other families only: the first-order profile fit (``fit_first_order.fit_scales``, same
bounds, same weights), the choice of which per-GPU factors have evidence (a factor no training row
moves takes its prior, ``PRIORS``; ``host_launch_time`` a GPU type's training rows do not move stays
as given, 0, ``host_evidence``; a GPU type without training rows takes the fitted profile of
its donor, ``GROUP_DONORS``, times the cited part-to-part ratios of ``fit_transfer``; with ``pooling`` the GPU types are instead partially pooled and a type
without training rows takes the pooled levels, ``fit_pooling``, the strength chosen by
leave-one-family-out inside the training families), and the schedule knobs a row leaves unpublished (re-tuned at the fold's
profile by ``validate_row``, which picks the fastest plan and never looks at the measured time).
Held-out rows are then re-simulated at their fold's profile (``fit_crossval_rows``), so the held-out
error is the simulator's, not the first-order model's. One pass of sensitivities (``fit_defaults.sensitivities``,
or a cached ``fit_sensitivities.csv``) serves every fold: the fit only rescales them.
It also reports the fitted parameters per GPU type and the values sitting at their bounds.
It does not compute intervals (``simulator.intervals``) nor print (``cli.validate``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from clustersim.simulator.calibration.fit_crossval_rows import family_table, simulate_held_out
from clustersim.simulator.calibration.fit_defaults import sensitivities
from clustersim.simulator.calibration.fit_first_order import (
    apply_scales, first_order_problem, measured_times, row_weights, shared_held,
)
from clustersim.simulator.calibration.fit_params import (
    EXPERT_CALL_PROBE, GEMM_POINTS, HOST_LAUNCH_PROBE, JITTER_STEP, PER_GROUP, Bounds, with_cited_constants,
)
from clustersim.simulator.calibration.fit_pooling import choose_strength, evidence, fit_pooled
from clustersim.simulator.calibration.fit_identify import fit_identified
from clustersim.simulator.calibration.fit_transfer import DONOR_MIN_FAMILIES, GROUP_DONORS, transfer_profile
from clustersim.simulator.profile import GROUPED_GEMM_EFFICIENCY_PRIOR, CalibrationProfile
from clustersim.simulator.calibration.validate import family_of
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.network import DEFAULT_FIDELITY, Fidelity

PRIORS: Mapping[str, tuple[str, float]] = {
    "exp": ("expert_efficiency", GROUPED_GEMM_EFFICIENCY_PRIOR), "fp8": ("fp8", 1.0), "fp4": ("fp4", 1.0),
    "ecall": ("expert_call_time", 0.0)}
"""Value of a per-GPU factor that no training row of any GPU type moves (no MoE, FP8 or NVFP4 row;
with ``fit_fold(pooling=True)``, where some type has one, the others take its pooled level):
routed-expert GEMMs at the cited grouped-GEMM prior (``profile.GROUPED_GEMM_EFFICIENCY_PRIOR``,
0.62 of the dense GEMM curve read at one expert's shape) with no fixed time per expert call
(``expert_call_time`` 0: no cited size), FP8/FP4 GEMMs at the same fraction of their datasheet peak as
BF16 (1.0). Never the value fitted on the held-out rows."""

SHARED_PARAMS: int = GEMM_POINTS + 2 + int(Bounds().jitter[1] > Bounds().jitter[0])
"""Parameters shared by every GPU type: the GEMM curve shape (one scale per point), kernel overhead,
memory efficiency, and the sync jitter (``sync_jitter_cv``) only where its range is free (pinned at 0
by default: ``Bounds.jitter``)."""


@dataclass(frozen=True, kw_only=True)
class FoldFit:
    """The profiles of one fold and what was not fitted from its training rows."""

    family: str
    """The held-out family ("" for the in-sample fit on every row)."""
    profiles: dict[str, CalibrationProfile]
    """Profile per stem for this fold."""
    fitted_params: dict[str, int]
    """Per GPU type: the per-type parameters with training evidence (shared ones: ``SHARED_PARAMS``)."""
    notes: tuple[str, ...]
    """Priors and donors used, and fitted values at their bounds."""


def _set_prior(profile: CalibrationProfile, param: str) -> CalibrationProfile:
    field, value = PRIORS[param]
    if field == "expert_efficiency":
        return profile.replace(expert_efficiency=value)
    if field == "expert_call_time":
        return profile.replace(expert_call_time=value)
    return profile.replace(precision_efficiency={**profile.precision_efficiency, field: value})


def at_bounds(profile: CalibrationProfile, bounds: Bounds, tol: float = 2e-3) -> list[str]:
    """Values of ``profile`` within ``tol`` of a bound of ``Bounds``."""
    out = []
    hi = bounds.max_efficiency
    if max(e for _, e in profile.gemm_efficiency) >= hi - tol:
        out.append(f"gemm_efficiency max = {max(e for _, e in profile.gemm_efficiency):.3f} (bound {hi})")
    if max(e for _, e in profile.attention_efficiency) >= hi - tol:
        out.append(f"attention_efficiency max at bound {hi}")
    if profile.link_eff("nic") >= bounds.max_nic_efficiency - tol:
        out.append(f"link nic = {profile.link_eff('nic'):.3f} (bound {bounds.max_nic_efficiency})")
    if profile.link_eff("nvlink") >= hi - tol:
        out.append(f"link nvlink = {profile.link_eff('nvlink'):.3f} (bound {hi})")
    if profile.kernel_overhead >= bounds.max_kernel_overhead - 1e-7:
        out.append(f"kernel_overhead = {profile.kernel_overhead:.2e} s (bound {bounds.max_kernel_overhead:.0e})")
    for name, value, (lo, up) in (("expert_efficiency", profile.expert_efficiency, bounds.expert),
                                  ("fp8", profile.precision_efficiency.get("fp8", 1.0), bounds.fp8),
                                  ("fp4", profile.precision_efficiency.get("fp4", 1.0), bounds.fp4)):
        if value <= lo + tol or value >= up - tol:
            out.append(f"{name} = {value:.3f} (bounds {lo}..{up})")
    if _free(bounds.expert_call) and profile.expert_call_time >= bounds.expert_call[1] - 1e-9:
        out.append(f"expert_call_time = {profile.expert_call_time:.2e} s (bound {bounds.expert_call[1]:.1e})")
    lo, hi = bounds.host_launch
    if profile.host_launch_time > 0 and (profile.host_launch_time <= lo + 1e-9 or profile.host_launch_time >= hi - 1e-9):
        out.append(f"host_launch_time = {profile.host_launch_time:.2e} s (bounds 0 or {lo:.1e}..{hi:.1e})")
    if bounds.jitter[1] > bounds.jitter[0] and profile.sync_jitter_cv >= bounds.jitter[1] - tol:
        out.append(f"sync_jitter_cv = {profile.sync_jitter_cv:.3f} (bound {bounds.jitter[1]})")
    return out


def fit_fold(sens: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], train: np.ndarray, *,
             family: str = "", bounds: Bounds = Bounds(), sweeps: int = 4, pooling: bool = False,
             strength: float | None = None, transfer: bool = True, hold_shared: bool = False) -> FoldFit:
    """Fit on the ``train`` rows of the ``ok`` rows of ``sens``.

    ``transfer`` (donor rule only; default): a GPU type without training rows takes its donor's
    fitted profile scaled by the cited part-to-part ratios of ``fit_transfer``; False: a plain copy
    (the rule until December 2026's eighth stop: 10.57 % out of sample against 10.01 %, docs/VALIDATION.md).
    ``pooling`` False (default): ``_fit_fold_donor``. True: the GPU types partially pooled
    (``fit_pooling``) at ``strength``, chosen by leave-one-family-out inside the training rows
    when None; pooled levels for what no training row moves, priors where no type has evidence.
    Not the default: on the stored sensitivities of 34d4574 it made the first-order held-out
    figure worse (11.50 -> 12.61 %; docs/VALIDATION.md).
    ``hold_shared`` (donor rule only): the shared scales (curve shape, kernel overhead, memory
    efficiency, jitter) held at ``profiles``' values, each GPU type's own fitted: what
    ``clustersim validate --fit-profiles --fit-only`` of every type does."""
    if hold_shared and pooling:
        raise CalibrationError("hold_shared applies to the donor rule; drop pooling")
    if not pooling:
        return _fit_fold_donor(sens, profiles, train, family=family, bounds=bounds, sweeps=sweeps, transfer=transfer,
                               hold_shared=hold_shared)
    ok = sens[sens.status == "ok"]
    pb = first_order_problem(ok, profiles)
    meas, w = measured_times(ok, None), row_weights(ok)
    fam = ok.source_id.fillna("").astype(str).map(family_of).to_numpy()
    notes: list[str] = []
    if strength is None:
        strength, scores = choose_strength(pb, meas, w, fam, train, bounds=bounds, sweeps=sweeps)
        notes.append("pooling strength " + f"{strength:g} (inner held-out families, first-order MAPE: "
                     + ", ".join(f"{k:g}: {v:.2f} %" for k, v in scores.items()) + ")")
    x, pooled = fit_pooled(pb, meas, w, train, strength, bounds=bounds, sweeps=sweeps)
    notes.extend(pooled)
    have = all_evidence(pb, train)
    host_moved = host_evidence(pb, train)
    out: dict[str, CalibrationProfile] = {}
    counts: dict[str, int] = {}
    for i, g in enumerate(pb.groups):
        prof = with_cited_constants(apply_scales(profiles[g], i, x), g)
        for p in PRIORS:
            if not have[p].any():
                prof = _set_prior(prof, p)
                notes.append(f"{g} {p}: no training row of any GPU type moves it, prior {PRIORS[p][1]}")
        counts[g] = int(sum(bool(have[p][i]) for p in PER_GROUP)) + _seconds_fitted(i, host_moved, have, bounds)
        notes.append(_host_note(g, prof, bool(host_moved[i]), "host" in pb.slopes, bounds))
        if not np.any(train & (pb.gi == i)):
            prof = prof.replace(name=f"{g}-pooled", source=f"fold without {family}: no {g} row, pooled levels")
        notes.extend(f"{g} at bound: {b}" for b in at_bounds(prof, bounds))
        out[g] = prof
    notes.append(f"sync_jitter_cv = {next(iter(out.values())).sync_jitter_cv} (shared by every GPU type)")
    for g in sorted(set(profiles) - set(out)):
        out[g] = profiles[g]
        counts[g] = 0
        notes.append(f"{g}: no row at all, its profile as given")
    return FoldFit(family=family, profiles=out, fitted_params=counts, notes=tuple(notes))


def _fit_fold_donor(sens: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], train: np.ndarray, *,
             family: str = "", bounds: Bounds = Bounds(), sweeps: int = 4, transfer: bool = True,
             hold_shared: bool = False) -> FoldFit:
    """The default fold fit: each GPU type on its own rows; priors and donors (``GROUP_DONORS``, with
    ``transfer`` the donor's values times the cited ratios of ``fit_transfer``) for the rest; the GEMM
    level and FP8 factor of a type whose rows do not identify them held at its donor's times the
    cited ratio (``fit_identify.fit_identified``), the fit redone around them."""
    ok = sens[sens.status == "ok"]
    pb = first_order_problem(ok, profiles)
    meas, w = measured_times(ok, None), row_weights(ok)
    x, tied, notes = fit_identified(pb, meas, w, train=train, bounds=bounds, sweeps=sweeps,
                                    hold=shared_held(pb) if hold_shared else None)
    moved = all_evidence(pb, train)
    host_moved = host_evidence(pb, train)
    fitted: dict[str, CalibrationProfile] = {}
    counts: dict[str, int] = {}
    fam = ok.source_id.astype(str).map(family_of).to_numpy()
    fams_of = {g: frozenset(fam[train & (pb.gi == i)]) for i, g in enumerate(pb.groups)}
    for i, g in enumerate(pb.groups):
        if not np.any(train & (pb.gi == i)):
            continue
        prof = with_cited_constants(apply_scales(profiles[g], i, x), g)
        for p in PRIORS:
            if not moved[p][i]:
                prof = _set_prior(prof, p)
                notes.append(f"{g} {p}: no training row moves it, prior {PRIORS[p][1]}")
        counts[g] = (sum(bool(moved[p][i]) and i not in tied.get(p, frozenset()) for p in PER_GROUP)
                     + _seconds_fitted(i, host_moved, moved, bounds))
        notes.append(_host_note(g, prof, bool(host_moved[i]), "host" in pb.slopes, bounds))
        notes.extend(f"{g} at bound: {b}" for b in at_bounds(prof, bounds))
        fitted[g] = prof
    if fitted:
        notes.append(f"sync_jitter_cv = {next(iter(fitted.values())).sync_jitter_cv} (shared by every GPU type)")
    out = dict(fitted)
    for g in sorted(profiles):
        if g in out:
            continue
        candidates = [d for d in GROUP_DONORS.get(g, ()) if d in fitted]
        donor = next((d for d in candidates if len(fams_of[d]) >= DONOR_MIN_FAMILIES),
                     candidates[0] if candidates else None)
        if donor is None:
            raise CalibrationError(f"fold without {family!r}: GPU type {g} has no training row and no fitted donor "
                                   f"(GROUP_DONORS[{g!r}] = {GROUP_DONORS.get(g, ())})")
        prof, ratios = transfer_profile(fitted[donor], donor, g, bounds) if transfer else (fitted[donor], {})
        how = ", ".join(f"{p} x{r:.3f}" for p, r in ratios.items()) or "no cited ratio"
        out[g] = prof.replace(name=f"{g}-from-{donor}", source=f"fold without {family}: no {g} row, {donor} fitted values"
                              + (f", cited ratios ({how})" if transfer else ""))
        counts[g] = 0
        notes.append(f"{g}: no training row, the fitted {donor} profile (rows of {len(fams_of[donor])} "
                     f"families)" + (f" x cited ratios: {how}" if transfer else ""))
    return FoldFit(family=family, profiles=out, fitted_params=counts, notes=tuple(notes))


def _free(lo_hi: tuple[float, float]) -> bool:
    """Whether a per-GPU value in seconds is fitted (its range not pinned at one value): a pinned
    one is not a fitted parameter, whatever its rows' slopes."""
    return lo_hi[1] > lo_hi[0]


def _seconds_fitted(i: int, host_moved: np.ndarray, moved: Mapping[str, np.ndarray], bounds: Bounds) -> int:
    """How many of GPU type ``i``'s values in seconds the fold fits: each one its rows move and its
    bounds leave free (``host_launch_time``, ``expert_call_time``)."""
    return (int(bool(host_moved[i]) and _free(bounds.host_launch))
            + int(bool(moved["ecall"][i]) and _free(bounds.expert_call)))


def all_evidence(pb: Any, train: np.ndarray) -> dict[str, np.ndarray]:
    """``fit_pooling.evidence`` (the per-GPU scales) and ``ecall``: per GPU type, whether a training
    row's step time moves with ``expert_call_time`` (an unfused routed-expert GEMM on its path)."""
    return {**evidence(pb, train), "ecall": _seconds_evidence(pb, train, "ecall", EXPERT_CALL_PROBE)}


def _seconds_evidence(pb: Any, train: np.ndarray, key: str, probe: float) -> np.ndarray:
    """Per GPU type: whether a training row's step time moves when the value in seconds ``key`` is
    raised by ``probe`` (all False for a sensitivity table without the column)."""
    slope = pb.slopes.get(key)
    if slope is None:
        return np.zeros(len(pb.groups), bool)
    moved = np.abs(slope) * probe > HOST_EVIDENCE_REL * pb.t0  # not the round-off of two sums
    return np.array([bool(np.any(moved & train & (pb.gi == i))) for i in range(len(pb.groups))])


HOST_EVIDENCE_REL = 1e-9
"""A row moves ``host_launch_time`` when the probe changes its step time by more than this fraction:
a step the host never binds differs from its base only by floating-point round-off (~1e-14)."""


def host_evidence(pb: Any, train: np.ndarray) -> np.ndarray:
    """Per GPU type: whether a training row's step time moves with ``host_launch_time`` (all False
    for a sensitivity table without the ``host`` column)."""
    return _seconds_evidence(pb, train, "host", HOST_LAUNCH_PROBE)


def _host_note(g: str, prof: CalibrationProfile, moved: bool, column: bool, bounds: Bounds) -> str:
    """Where the fold's ``host_launch_time`` of ``g`` came from."""
    if bounds.host_launch[1] <= 0:
        return f"{g} host_launch_time: pinned at {prof.host_launch_time:g} s (Bounds.host_launch; HOST_LAUNCH_FIT fits it)"
    if not column:
        return f"{g} host_launch_time: the sensitivities have no host column, {prof.host_launch_time:g} s as given"
    if not moved:
        return f"{g} host_launch_time: no training row moves it, {prof.host_launch_time:g} s as given"
    return f"{g} host_launch_time fitted: {prof.host_launch_time * 1e6:.1f} us per launch"


@dataclass(frozen=True, kw_only=True)
class CrossValidation:
    """Everything ``cross_validate_families`` produces."""

    rows: pd.DataFrame
    """Per simulated row: row_id, source_id, family, gpu_type, group, regime, num_gpus, measured_s,
    in_sample_s, held_out_s, first_order_held_out_s, error_in_pct, error_out_pct (signed), predicted_oom
    (the published plan was predicted not to fit and simulated with the memory check lifted)."""
    by_family: pd.DataFrame
    """Per held-out family and "all": rows, in-sample and out-of-sample MAPE (%)."""
    params: pd.DataFrame
    """Per GPU type: fitted per-type parameters in the all-families fit, shared parameters."""
    folds: tuple[FoldFit, ...]
    """The in-sample fit first, then one per family."""
    in_sample_from: str = "simulated"
    """"simulated" at the all-families fit, or "fit_rows.csv" of the --fit-profiles run (same fit)."""


FOLD_KINDS: tuple[str, ...] = ("family", "gpu")
"""What one fold holds out: a publication family (``family``, the headline protocol) or a GPU type
(``gpu``: every row of one profile's GPU type, of every family; the held-out type takes its donor's
fitted profile times the cited ratios, ``GROUP_DONORS`` and ``fit_transfer``: the prediction a user
gets for hardware nobody has fitted)."""


def fold_labels(ok: pd.DataFrame, by: str = "family") -> np.ndarray:
    """Per row of ``ok``, the fold that holds it out: its publication family (``by`` "family") or its
    GPU type's profile stem (``by`` "gpu", the ``group`` column of the sensitivities)."""
    if by == "family":
        return ok.source_id.astype(str).map(family_of).to_numpy()
    if by == "gpu":
        return ok.group.astype(str).to_numpy()
    raise CalibrationError(f"cross-validation by {by!r}: use one of {', '.join(FOLD_KINDS)}")


def cross_validate_families(runs: pd.DataFrame, sens: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], *,
                            bounds: Bounds = Bounds(), sweeps: int = 4, fidelity: Fidelity = DEFAULT_FIDELITY,
                            workers: int = 2, progress: Callable[[int, int], None] | None = None,
                            reuse: tuple[Mapping[str, CalibrationProfile], Mapping[int, float]] | None = None,
                            on_folds: Callable[[pd.DataFrame, Sequence[FoldFit]], None] | None = None,
                            pooling: bool = False, transfer: bool = True, hold_shared: bool = False,
                            by: str = "family", rounds: int = 1,
                            round_progress: Callable[[str, int, int], None] | None = None) -> CrossValidation:
    """Leave-one-family-out: fit without each family, re-simulate its rows at that fit.

    ``sens`` are the sensitivities taken at ``profiles`` (``fit_defaults.sensitivities``).
    ``reuse`` = (profiles, row_id -> seconds) of a ``--fit-profiles`` run: its predictions serve as
    the in-sample figure when its profiles are the all-families fit's (checked), else ignored.
    ``on_folds`` is called once the folds are fitted, before any re-simulation, with the first-order
    held-out table (row_id, source_id, gpu_type, group, measured_s, family, first_order_held_out_s)
    and the fold fits: the fit's own figure in minutes, the simulated one after.
    ``hold_shared``: every fold fits each GPU type's own parameters only (``fit_fold``), as the
    bundled profiles' ``--fit-only`` refit does.
    ``by`` "gpu": leave-one-GPU-type-out instead (``FOLD_KINDS``); the rows then carry the held-out
    type in a ``fold`` column, ``by_family`` is per held-out type, and ``family`` stays the row's
    publication family.
    ``rounds`` > 1: each fold's fit (and the all-families one) is re-linearised ``rounds`` - 1 times,
    each time from sensitivities of that fold's training rows only, simulated at its previous fit
    (``relinearised``): what ``--fit-profiles --fit-rounds`` does for the bundled profiles, so the
    shared scales, free without ``hold_shared``, are fitted inside each fold and not read off a
    linearisation at the all-families profiles. ``round_progress(label, done, total)`` follows
    those passes.
    """
    ok = sens[sens.status == "ok"].reset_index(drop=True)
    fam = fold_labels(ok, by)
    families = sorted(set(fam))
    if len(families) < 2:
        raise CalibrationError(f"cross-validation by {by} needs 2 or more of them, the rows have {families}")
    if rounds < 1:
        raise CalibrationError(f"cross-validation rounds = {rounds}; use 1 or more")
    fit_kw: dict[str, Any] = dict(bounds=bounds, sweeps=sweeps, pooling=pooling, transfer=transfer, hold_shared=hold_shared)

    def again(ff: FoldFit, train_ids: np.ndarray) -> FoldFit:
        return relinearised(ff, train_ids, runs=runs, rounds=rounds, fidelity=fidelity, workers=workers,
                            progress=round_progress, fit_kw=fit_kw)
    full = fit_fold(ok, profiles, np.ones(len(ok), bool), **fit_kw)
    full = again(full, ok.row_id.to_numpy())
    in_sample = reuse[1] if reuse is not None and same_fit(full, reuse[0]) else None
    folds = [full]
    fold_of: dict[str, FoldFit] = {}
    pb = first_order_problem(ok, profiles)
    first_order = np.zeros(len(ok))
    for f in families:
        test = fam == f
        ff = fit_fold(ok, profiles, ~test, family=f, **fit_kw)
        ff = again(ff, ok.row_id.to_numpy()[~test])
        folds.append(ff)
        fold_of[f] = ff
        first_order[test] = _first_order_at(pb, ok, profiles, ff)[test]
    frame = ok[["row_id", "source_id", "gpu_type", "group", "measured"]].rename(columns={"measured": "measured_s"})
    frame = frame.assign(family=fam if by == "family" else fold_labels(ok, "family"), first_order_held_out_s=first_order)
    if by != "family":
        frame = frame.assign(fold=fam)
    if on_folds is not None:
        on_folds(frame, folds)
    sim = simulate_held_out(runs, ok, fam, fold_of, None if in_sample is not None else full, fidelity, workers, progress)
    if in_sample is not None:
        sim["in_sample_s"] = sim.row_id.map(in_sample)
    frame = frame.merge(sim, on="row_id", how="left")
    gpus = runs.set_index(runs.row_id.astype(int)).num_gpus
    frame = frame[frame.held_status == "ok"].reset_index(drop=True)
    frame["num_gpus"] = frame.row_id.map(gpus).astype(int)
    frame["error_in_pct"] = (frame.in_sample_s - frame.measured_s) / frame.measured_s * 100.0
    frame["error_out_pct"] = (frame.held_out_s - frame.measured_s) / frame.measured_s * 100.0
    return CrossValidation(rows=frame, by_family=family_table(frame, "family" if by == "family" else "fold"),
                           params=param_table(full), folds=tuple(folds),
                           in_sample_from="simulated" if in_sample is None else "fit_rows.csv")


def relinearised(ff: FoldFit, train_ids: np.ndarray, *, runs: pd.DataFrame, rounds: int, fidelity: Fidelity,
                 workers: int, progress: Callable[[str, int, int], None] | None, fit_kw: Mapping[str, Any]) -> FoldFit:
    """``ff`` refitted ``rounds`` - 1 more times, each from the sensitivities of its training rows
    (``train_ids``; the held-out rows are never simulated) taken at the previous fit's profiles."""
    if rounds <= 1:
        return ff
    train_runs = runs[runs.row_id.astype(int).isin({int(i) for i in train_ids})]
    label = ff.family or "all families"
    for r in range(2, rounds + 1):
        tell = (lambda d, t, r=r: progress(f"{label}, round {r}", d, t)) if progress is not None else None
        sens = sensitivities(train_runs, ff.profiles, fidelity=fidelity, workers=workers, progress=tell)
        ok = sens[sens.status == "ok"].reset_index(drop=True)
        ff = fit_fold(ok, dict(ff.profiles), np.ones(len(ok), bool), family=ff.family, **fit_kw)
    said = f"round {rounds}: refitted from {len(ok)} training rows simulated at round {rounds - 1}'s fit"
    return replace(ff, notes=(said, *ff.notes))


def same_fit(full: FoldFit, fitted: Mapping[str, CalibrationProfile]) -> bool:
    """Whether ``fitted`` holds the fitted values of ``full`` for every GPU type with training rows."""
    def key(p: CalibrationProfile) -> tuple[object, ...]:
        return (p.gemm_efficiency, p.attention_efficiency, p.link_efficiency, p.memory_efficiency, p.kernel_overhead,
                p.sync_jitter_cv, p.host_launch_time, p.expert_efficiency, p.precision_efficiency,
                p.attention_kernel_efficiency)
    own = [g for g, n in full.fitted_params.items() if n > 0]
    return all(g in fitted and key(full.profiles[g])[:7] == key(fitted[g])[:7] for g in own)


def _first_order_at(pb: Any, ok: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], ff: FoldFit) -> np.ndarray:
    """First-order step times at a fold's profiles (scales = fold value / base value per parameter)."""
    t: np.ndarray = pb.t0.copy()
    for i, g in enumerate(pb.groups):
        rows = pb.gi == i
        base, new = profiles[g], ff.profiles[g]
        for j, ((_, e0), (_, e1)) in enumerate(zip(base.gemm_efficiency, new.gemm_efficiency)):
            t[rows] += pb.slopes.get(f"g{j}", np.zeros_like(t))[rows] * (e0 / e1 - 1.0)
        pairs = {"attn": (max(e for _, e in base.attention_efficiency), max(e for _, e in new.attention_efficiency)),
                 "link": (base.link_eff("nic"), new.link_eff("nic")), "exp": (base.expert_efficiency, new.expert_efficiency),
                 "mem": (base.memory_efficiency, new.memory_efficiency),
                 "fp8": (base.precision_efficiency.get("fp8", 1.0), new.precision_efficiency.get("fp8", 1.0)),
                 "fp4": (base.precision_efficiency.get("fp4", 1.0), new.precision_efficiency.get("fp4", 1.0))}
        for p, (v0, v1) in pairs.items():
            t[rows] += pb.slopes.get(p, np.zeros_like(t))[rows] * (v0 / v1 - 1.0)
        t[rows] += pb.slopes.get("kern", np.zeros_like(t))[rows] * (new.kernel_overhead - base.kernel_overhead)
        t[rows] += pb.slopes.get("jit", np.zeros_like(t))[rows] * (new.sync_jitter_cv - base.sync_jitter_cv) / JITTER_STEP
        t[rows] += pb.slopes.get("host", np.zeros_like(t))[rows] * (new.host_launch_time - base.host_launch_time)
        t[rows] += pb.slopes.get("ecall", np.zeros_like(t))[rows] * (new.expert_call_time - base.expert_call_time)
    return t


def param_table(full: FoldFit, stems: Sequence[str] | None = None) -> pd.DataFrame:
    """Per GPU type: per-type parameters fitted with evidence, shared parameters, total."""
    keys = sorted(stems if stems is not None else full.fitted_params)
    return pd.DataFrame([{"gpu_type": g, "own_params": full.fitted_params.get(g, 0), "shared_params": SHARED_PARAMS,
                          "total": full.fitted_params.get(g, 0) + SHARED_PARAMS} for g in keys])
