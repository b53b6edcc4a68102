"""The first-order model of the step time in the profile efficiencies, and its bounded fit.

Owns the model built from the sensitivities of the perturbed parameters (``fit_params.PARAMS``),
T = T0 + sum_k A_k (1/s_k - 1) with A_k = (T_k - T0) / (1/F - 1), and the search for
multiplicative scales s_k that minimise the weighted MAPE within ``fit_params.Bounds`` (``fit``,
``fit_scales``); its k-fold held-out check (``cross_validate``) and applying the scales to a
profile (``apply_scales``). Per GPU type: a GEMM scale, attention, link (NVLink and NIC) and
expert scales, FP8 and FP4 factors (the flash2 attention factor is the cited constant
``fit_params.FLASH2_FACTOR``, not fitted); rows weighted equally per publication family
(``row_weights``);
shared by all GPU types: the GEMM curve shape, kernel overhead, memory efficiency and the sync
jitter (``sync_jitter_cv``, within ``Bounds.jitter``). numpy only
(no scipy): a deterministic bounded coordinate search on a grid, then on shrinking local steps.
The parameters, their probes, bounds and cited constants are ``fit_params``. It simulates nothing
(``clustersim.simulator.calibration.fit_defaults``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from clustersim.simulator.calibration.fit_params import (
    EXPERT_CALL_PROBE, GEMM_POINTS, HOST_LAUNCH_PROBE, JITTER_STEP, KERNEL_OVERHEAD_PROBE, PARAMS, PERTURB_FACTOR, PER_GROUP,
    PER_GROUP_SECONDS, Bounds, jitter_start, jitter_value,
)
from clustersim.simulator.calibration.validate import family_of
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.profile import SYNC_JITTER_MAX, CalibrationProfile


# ---------------------------------------------------------------- first-order model and fit
@dataclass(frozen=True, kw_only=True)
class _Problem:
    """The first-order model of the simulated rows, as arrays."""

    groups: tuple[str, ...]
    """Profile stems with rows, sorted; ``gi`` indexes them."""
    gi: np.ndarray
    """Group index per row."""
    t0: np.ndarray
    """Base predicted step time per row (s)."""
    slopes: dict[str, np.ndarray]
    """A_k per parameter per row (s): the step time added by 1/s_k - 1 (kern, host, ecall: seconds of
    step per second of per-op overhead, per-launch host cost or per routed-expert GEMM call)."""
    base: dict[str, np.ndarray]
    """Current profile values per group: gemm (n x points), attn_max, nvlink, nic, exp, fp8, fp4, mem, kern, host, ecall."""


def first_order_problem(sens: pd.DataFrame, profiles: Mapping[str, CalibrationProfile]) -> _Problem:
    """The first-order model of the ``ok`` rows of ``sens``, taken at ``profiles``."""
    ok = sens[sens.status == "ok"] if "status" in sens else sens
    groups = tuple(sorted(ok.group.unique()))
    f = 1.0 / PERTURB_FACTOR - 1.0
    t0 = ok.base.to_numpy(float)
    probe = {"kern": KERNEL_OVERHEAD_PROBE, "jit": 1.0, "host": HOST_LAUNCH_PROBE, "ecall": EXPERT_CALL_PROBE}
    slopes = {p: (ok[p].to_numpy(float) - t0) / probe.get(p, f) for p in PARAMS if p in ok}
    return _Problem(groups=groups, gi=ok.group.map({g: i for i, g in enumerate(groups)}).to_numpy(int),
                    t0=t0, slopes=slopes, base=_base_values([profiles[g] for g in groups]))


def _base_values(profs: list[CalibrationProfile]) -> dict[str, np.ndarray]:
    if any(len(p.gemm_efficiency) != GEMM_POINTS for p in profs):
        raise CalibrationError(f"gemm_efficiency must have {GEMM_POINTS} points in every profile to fit a shared curve")

    def arr(f: Callable[[CalibrationProfile], float]) -> np.ndarray:
        return np.array([f(p) for p in profs], dtype=float)

    return {"gemm": np.array([[e for _, e in p.gemm_efficiency] for p in profs]),
            "attn_max": arr(lambda p: max(e for _, e in p.attention_efficiency)),
            "nvlink": arr(lambda p: p.link_eff("nvlink")), "nic": arr(lambda p: p.link_eff("nic")),
            "exp": arr(lambda p: p.expert_efficiency), "mem": arr(lambda p: p.memory_efficiency),
            "fp8": arr(lambda p: p.precision_efficiency.get("fp8", 1.0)),
            "fp4": arr(lambda p: p.precision_efficiency.get("fp4", 1.0)),
            "ak": arr(lambda p: p.attention_kernel_efficiency.get("flash2", 1.0)),
            "kern": arr(lambda p: p.kernel_overhead),
            "jit": arr(lambda p: p.sync_jitter_cv), "host": arr(lambda p: p.host_launch_time),
            "ecall": arr(lambda p: p.expert_call_time)}


def _initial(pb: _Problem, bounds: Bounds = Bounds()) -> dict[str, np.ndarray]:
    """Scales 1 and the kernel overhead (a shared value in seconds, not a scale) at its base, the
    mean of the groups' (one value in every bundled profile); ``host_launch_time`` (seconds) at each group's base;
    the jitter coordinate at the base ``sync_jitter_cv`` moved into ``bounds.jitter`` (``jitter_start``)."""
    n = len(pb.groups)
    return {**{k: np.ones(n) for k in PER_GROUP}, "curve": np.ones(GEMM_POINTS), "host": pb.base["host"].copy(),
            "ecall": pb.base["ecall"].copy(),
            "kern": np.array([float(np.mean(pb.base["kern"]))]), "mem": np.ones(1),
            "jit": np.array([jitter_start(float(np.mean(pb.base["jit"])), bounds.jitter)])}


SHARED_SCALES: tuple[str, ...] = ("curve", "kern", "mem", "jit")
"""The scales every GPU type shares: the GEMM curve's shape, the kernel overhead, the memory
efficiency and the jitter."""


def shared_held(pb: _Problem) -> dict[str, dict[int, float]]:
    """``fit_scales(frozen=)`` holding the shared scales (``SHARED_SCALES``) at their starting values,
    i.e. the starting profiles': a fit of each GPU type's own parameters only."""
    x0 = _initial(pb)
    return {name: {i: float(v) for i, v in enumerate(x0[name])} for name in SHARED_SCALES}


def predict(pb: _Problem, x: Mapping[str, np.ndarray]) -> np.ndarray:
    """First-order predicted step time of every row at scales ``x``."""
    g, s, t = pb.gi, pb.slopes, pb.t0.copy()
    zero = np.zeros_like(t)
    for j in range(GEMM_POINTS):
        t += s.get(f"g{j}", zero) * (1.0 / (x["gemm"][g] * x["curve"][j]) - 1.0)
    for p, k in (("attn", "attn"), ("link", "link"), ("exp", "exp"), ("fp8", "fp8"), ("fp4", "fp4")):
        t += s.get(p, zero) * (1.0 / x[k][g] - 1.0)
    t += s.get("mem", zero) * (1.0 / x["mem"][0] - 1.0) + s.get("kern", zero) * (x["kern"][0] - pb.base["kern"][g])
    t += s.get("jit", zero) * (x.get("jit", np.ones(1))[0] - 1.0)
    if "host" in x:
        t += s.get("host", zero) * (x["host"][g] - pb.base["host"][g])
    if "ecall" in x:
        t += s.get("ecall", zero) * (x["ecall"][g] - pb.base["ecall"][g])
    return t



def feasible(pb: _Problem, x: Mapping[str, np.ndarray], bounds: Bounds) -> bool:
    """Whether the profiles at scales ``x`` respect ``bounds`` (and the curve is non-decreasing)."""
    b, hi = pb.base, bounds.max_efficiency + 1e-12
    gemm = b["gemm"] * x["gemm"][:, None] * x["curve"][None, :]
    checks = (gemm.max() <= hi, np.all(np.diff(gemm, axis=1) >= -1e-9), np.all(b["attn_max"] * x["attn"] <= hi),
              np.all(b["nvlink"] * x["link"] <= hi), np.all(b["nic"] * x["link"] <= bounds.max_nic_efficiency + 1e-12),
              np.all(b["mem"] * x["mem"][0] <= hi), _within(b["exp"] * x["exp"], bounds.expert),
              _within(b["fp8"] * x["fp8"], bounds.fp8), _within(b["fp4"] * x["fp4"], bounds.fp4),
              np.all(b["attn_max"] * x["attn"] * b["ak"] <= hi),
              _within(b["jit"] + JITTER_STEP * (x.get("jit", np.ones(1))[0] - 1.0), bounds.jitter),
              -1e-15 <= x["kern"][0] <= bounds.max_kernel_overhead + 1e-15,
              host_launch_feasible(x.get("host", np.zeros(1)), bounds),
              _within(x.get("ecall", np.zeros(1)), bounds.expert_call))
    return bool(all(checks))


def host_launch_feasible(host: np.ndarray, bounds: Bounds) -> bool:
    """Every ``host_launch_time`` 0 or inside ``bounds.host_launch``."""
    lo, hi = bounds.host_launch
    return bool(np.all((np.abs(host) <= 1e-15) | ((host >= lo - 1e-15) & (host <= hi + 1e-15))))


def _within(v: np.ndarray, lo_hi: tuple[float, float]) -> bool:
    return bool(np.all(v >= lo_hi[0] - 1e-12) and np.all(v <= lo_hi[1] + 1e-12))


def weighted_mape(pred: np.ndarray, measured: np.ndarray, weights: np.ndarray, smooth: float = 0.0) -> float:
    """sum(w |pred - measured| / measured) / sum(w), in percent.

    ``smooth`` > 0 replaces |r| by sqrt(r^2 + smooth^2) - smooth (pseudo-Huber): the search runs on
    it first so that single-coordinate moves do not stall on the kinks of the absolute value.
    """
    r = np.abs(pred - measured) / measured
    if smooth > 0:
        r = np.sqrt(r * r + smooth * smooth) - smooth
    return float(np.sum(weights * r) / np.sum(weights) * 100.0)


def row_weights(sens: pd.DataFrame) -> np.ndarray:
    """Equal total weight per publication family (``validate.family_of`` of ``source_id``), and
    inside a family equal weight per scenario (the ``scenario`` column of the sensitivities,
    ``repeatability.scenario_key``: what the simulator received for the row).

    Megatron-Bridge re-publishes one recipe in up to seven releases; those rows are one scenario
    measured several times, not several pieces of evidence, so they share one scenario's weight
    instead of outvoting the recipes published once. Each family's weight is split evenly over its
    distinct scenarios and each scenario's evenly over its rows; no family (216 MosaicML rows, 12
    SC'21 rows) outvotes another, and the weights average 1 per row. Without a ``scenario`` column
    (a table written before December's twenty-third stop) every row is its own scenario: 1/n of
    its family each, the weights of before.
    """
    ok = sens[sens.status == "ok"] if "status" in sens else sens
    fam = ok.source_id.fillna("").astype(str).map(family_of)
    own = pd.Series([f"row {i}" for i in range(len(ok))], index=ok.index)  # a row without a key: its own scenario
    scen = ok.scenario.astype(str).where(ok.scenario.notna(), own) if "scenario" in ok else own
    key = fam + "\x1f" + scen
    unit = 1.0 / key.groupby(key).transform("size")  # each scenario of a family weighs 1
    per_family = unit / unit.groupby(fam).transform("sum")  # each family weighs 1
    return (per_family * len(fam) / max(1, fam.nunique())).to_numpy(float)


def _candidates(v: float, step: float | None, name: str = "") -> np.ndarray:
    """The coarse grid 0.5 ... 1.6 (step None), else v x (1 + step k), k = -4 ... 4; for ``jit``
    (an offset, not a scale) the coarse grid spans cv0 - JITTER_STEP ... cv0 + 2 JITTER_STEP and the
    local steps move it by step x JITTER_STEP x k."""
    if name == "jit":
        return np.linspace(0.0, 3.0, 151) if step is None else v + step * np.arange(-4, 5)
    return np.linspace(0.5, 1.6, 111) if step is None else v * (1.0 + step * np.arange(-4, 5))


def _kernel_candidates(v: float, step: float | None, bounds: Bounds) -> np.ndarray:
    """Kernel overhead (s): the grid 0 ... max in 0.5 us steps (step None), else v + step x max x k,
    k = -4 ... 4 (additive: the value may be zero)."""
    top = bounds.max_kernel_overhead
    if step is None:
        return np.linspace(0.0, top, int(round(top / 0.5e-6)) + 1)
    grid: np.ndarray = np.clip(v + step * top * np.arange(-4, 5), 0.0, top)
    return grid


def _host_candidates(v: float, step: float | None, bounds: Bounds) -> np.ndarray:
    """Host launch time (s): 0 and the cited range (``_seconds_candidates``; infeasible moves are
    rejected by ``feasible``)."""
    grid = _seconds_candidates(v, step, bounds.host_launch)
    return np.concatenate([[0.0], grid]) if step is None else grid


def _seconds_candidates(v: float, step: float | None, lo_hi: tuple[float, float]) -> np.ndarray:
    """A per-GPU-type value in seconds inside ``lo_hi`` (``host_launch_time``, ``expert_call_time``):
    the range in 0.5 us steps (step None), else v + step x top x k, k = -4 ... 4, clipped into the range."""
    lo, hi = lo_hi
    if step is None:
        return np.linspace(lo, hi, int(round((hi - lo) / 0.5e-6)) + 1)
    grid: np.ndarray = np.clip(v + step * hi * np.arange(-4, 5), lo, hi)
    return grid


def _sweep(pb: _Problem, x: dict[str, np.ndarray], obj: Callable[[dict[str, np.ndarray]], float],
           best: float, step: float | None, bounds: Bounds, frozen: Mapping[str, Mapping[int, float]]) -> float:
    """One pass over every coordinate but the ``frozen`` ones; keeps a candidate only if feasible
    and strictly better."""
    for name in (*PER_GROUP, *[k for k in PER_GROUP_SECONDS if k in x], "curve", "kern", "mem", "jit"):
        for i in range(len(x[name])):
            if i in frozen.get(name, {}):
                continue
            start = x[name][i]
            cands = (_kernel_candidates(start, step, bounds) if name == "kern" else
                     _host_candidates(start, step, bounds) if name == "host" else
                     _seconds_candidates(start, step, bounds.expert_call) if name == "ecall" else
                     _candidates(start, step, name))
            for v in cands:
                old = x[name][i]
                x[name][i] = v
                if feasible(pb, x, bounds) and (o := obj(x)) < best - 1e-9:
                    best = o
                else:
                    x[name][i] = old
    return best


def fit_scales(pb: _Problem, measured: np.ndarray, weights: np.ndarray, *, bounds: Bounds = Bounds(),
               sweeps: int = 4, mask: np.ndarray | None = None,
               penalty: Callable[[Mapping[str, np.ndarray]], float] | None = None,
               frozen: Mapping[str, Mapping[int, float]] | None = None) -> tuple[dict[str, np.ndarray], float]:
    """Scales minimising the weighted MAPE of the rows in ``mask`` (all by default) plus
    ``penalty(scales)`` (in MAPE percent points; none by default), and that objective.
    ``frozen``: scale name -> {group index: value} held at that value (not searched)."""
    m = np.ones(len(measured), bool) if mask is None else mask
    hold = frozen or {}
    x = _initial(pb, bounds)
    for name, values in hold.items():
        for i, v in values.items():
            x[name][i] = v
    if not feasible(pb, x, bounds):
        raise CalibrationError("fit: the starting profiles (scales 1, sync_jitter_cv moved into Bounds.jitter) violate "
                               f"the fit's bounds {bounds}; no move of the search could be accepted. Fix: start "
                               "from profiles inside the bounds, or widen the bounds")
    for i, smooth in enumerate(SMOOTHING):
        def obj(x: Mapping[str, np.ndarray], s: float = smooth) -> float:
            extra = penalty(x) if penalty is not None else 0.0
            return weighted_mape(predict(pb, x)[m], measured[m], weights[m], s) + extra

        best = obj(x)
        for step in ([None] * sweeps if i == 0 else []) + [0.02, 0.005, 0.001]:
            for _ in range(MAX_LOCAL_SWEEPS):
                before, best = best, _sweep(pb, x, obj, best, step, bounds, hold)
                if step is None or best > before - 1e-7:
                    break
    return x, best


SMOOTHING: tuple[float, ...] = (0.05, 0.01, 0.002, 0.0)
"""Pseudo-Huber widths of the search stages (relative error), ending on the exact MAPE."""
MAX_LOCAL_SWEEPS = 8
"""Passes per local step size while they still improve the objective."""


def _r3(v: float) -> float:
    return float(round(float(v), 3))


def apply_scales(profile: CalibrationProfile, i: int, x: Mapping[str, np.ndarray]) -> CalibrationProfile:
    """``profile`` (group ``i``) with the fitted scales applied, values rounded to 3 digits."""
    curve = [(a, _r3(e * x["gemm"][i] * x["curve"][j])) for j, (a, e) in enumerate(profile.gemm_efficiency)]
    link = profile.link_efficiency
    prec = profile.precision_efficiency
    return profile.replace(
        gemm_efficiency=curve,
        attention_efficiency=[(a, _r3(e * x["attn"][i])) for a, e in profile.attention_efficiency],
        link_efficiency={**link, "nvlink": _r3(link.get("nvlink", 1.0) * x["link"][i]),
                         "nic": _r3(link.get("nic", 1.0) * x["link"][i])},
        expert_efficiency=_r3(profile.expert_efficiency * x["exp"][i]),
        precision_efficiency={"fp8": _r3(prec.get("fp8", 1.0) * x["fp8"][i]),
                              "fp4": _r3(prec.get("fp4", 1.0) * x["fp4"][i])},
        memory_efficiency=_r3(profile.memory_efficiency * x["mem"][0]),
        kernel_overhead=float(round(x["kern"][0], 9)),
        host_launch_time=float(round(x["host"][i], 9)) if "host" in x else profile.host_launch_time,
        expert_call_time=float(round(x["ecall"][i], 9)) if "ecall" in x else profile.expert_call_time,
        sync_jitter_cv=float(round(min(max(jitter_value(profile.sync_jitter_cv, x.get("jit", np.ones(1))[0]), 0.0),
                                       SYNC_JITTER_MAX), 4)))


def measured_times(sens: pd.DataFrame, measured: pd.Series | np.ndarray | None) -> np.ndarray:
    """Measured seconds of the ``ok`` rows: ``measured`` when given, else the column of ``sens``."""
    ok = sens[sens.status == "ok"] if "status" in sens else sens
    if measured is None:
        return ok.measured.to_numpy(float)
    return np.asarray(measured.loc[ok.index] if isinstance(measured, pd.Series) else measured, dtype=float)


def fit(sens: pd.DataFrame, measured: pd.Series | np.ndarray | None = None, *,
        profiles: Mapping[str, CalibrationProfile], bounds: Bounds = Bounds(),
        sweeps: int = 4) -> dict[str, CalibrationProfile]:
    """Profiles (one per GPU type with simulated rows) minimising the first-order weighted MAPE.

    ``measured`` defaults to the ``measured`` column of ``sens``; ``profiles`` are the ones the
    sensitivities were taken at. Groups without rows are not returned.
    """
    pb = first_order_problem(sens, profiles)
    x, _ = fit_scales(pb, measured_times(sens, measured), row_weights(sens), bounds=bounds, sweeps=sweeps)
    return {g: apply_scales(profiles[g], i, x) for i, g in enumerate(pb.groups)}


def first_order_errors(sens: pd.DataFrame, x: Mapping[str, np.ndarray] | None = None, *,
                       profiles: Mapping[str, CalibrationProfile]) -> np.ndarray:
    """Signed percent errors of the first-order model at scales ``x`` (the base when None)."""
    pb = first_order_problem(sens, profiles)
    t = predict(pb, x if x is not None else _initial(pb))
    meas = measured_times(sens, None)
    errors: np.ndarray = (t - meas) / meas * 100.0
    return errors


def cross_validate(sens: pd.DataFrame, folds: int = 2, rng: np.random.Generator | None = None, *,
                   profiles: Mapping[str, CalibrationProfile], bounds: Bounds = Bounds(),
                   sweeps: int = 4) -> pd.DataFrame:
    """Per fold: refit the first-order model without the fold, MAPE on the fitted and held-out rows.

    Rows are assigned to folds by a permutation drawn from ``rng`` (``default_rng(0)`` when None).
    Columns: fold, train_rows, train_mape, test_rows, test_mape, test_mape_before (unweighted %).
    """
    if folds < 2:
        raise CalibrationError(f"cross-validation folds = {folds}; use 2 or more")
    table, _ = held_out_folds(sens, folds, rng if rng is not None else np.random.default_rng(0), profiles, bounds, sweeps)
    return table


def held_out_folds(sens: pd.DataFrame, folds: int, rng: np.random.Generator, profiles: Mapping[str, CalibrationProfile],
                   bounds: Bounds, sweeps: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The per-fold table and every row's absolute percent error when held out."""
    pb, meas = first_order_problem(sens, profiles), measured_times(sens, None)
    w = row_weights(sens)
    fold_of = rng.permutation(len(meas)) % folds
    held_out = np.zeros(len(meas))
    before = np.abs(pb.t0 - meas) / meas * 100.0
    out = []
    for k in range(folds):
        test = fold_of == k
        x, _ = fit_scales(pb, meas, w, bounds=bounds, sweeps=sweeps, mask=~test)
        err = np.abs(predict(pb, x) - meas) / meas * 100.0
        held_out[test] = err[test]
        out.append({"fold": k, "train_rows": int((~test).sum()), "train_mape": float(err[~test].mean()),
                    "test_rows": int(test.sum()), "test_mape": float(err[test].mean()),
                    "test_mape_before": float(before[test].mean())})
    return pd.DataFrame(out), held_out
