"""Fitting the default calibration profiles (``simulator/profiles/*.yaml``) on the published runs.

Owns the reproducible version of the method in docs/VALIDATION.md ("Default profiles"): simulate
every row of ``workloads/data/published_runs.csv`` at the current profiles and with each efficiency
parameter perturbed (``sensitivities``), take the first-order model of the step time in the inverse
efficiencies, T = T0 + sum_k A_k (1/s_k - 1) with A_k = (T_k - T0) / (1/F - 1), and minimise the
weighted MAPE over multiplicative scales s_k within bounds (``fit``); a k-fold held-out check of
that model (``cross_validate``) and atomic YAML writes (``write_profiles``). Per GPU type: a GEMM
scale, attention, link (NVLink and NIC) and expert scales, FP8 and FP4 factors; shared by all GPU
types: the GEMM curve shape, kernel overhead and memory efficiency. numpy only (no scipy): a
deterministic bounded coordinate search on a grid, then on shrinking local steps.
It does not own the row mapping or the statistics (``simulator.validate``) nor the CLI
(``simulator.validate_cli``).
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from simulator.calibration import CalibrationProfile
from simulator.comm import Fidelity
from simulator.errors import CalibrationError
from simulator.validate import MEGATRON_LM_FRAMEWORKS, validate_row
from simulator.validate_rules import SkipRow, attention_kernel, precision_of

PERTURB_FACTOR = 0.85
"""Efficiencies are multiplied by this factor to measure a sensitivity (kernel overhead doubles)."""
GEMM_POINTS = 6
"""Points of the GEMM efficiency curve (1e8 ... 1e13 FLOP per call in the bundled profiles)."""
PARAMS: tuple[str, ...] = tuple(f"g{j}" for j in range(GEMM_POINTS)) + (
    "attn", "link", "mem", "kern", "exp", "fp8", "fp4", "ak")
"""Perturbed parameters: GEMM curve point j, attention curve, NVLink+NIC link efficiency, memory
efficiency, kernel overhead, expert_efficiency, precision_efficiency fp8 and fp4, and
attention_kernel_efficiency flash2 ("ak")."""
PER_GROUP: tuple[str, ...] = ("gemm", "attn", "link", "exp", "fp8", "fp4", "ak")
"""Scales fitted per GPU type; ``curve`` (one per GEMM point), ``kern`` and ``mem`` are shared."""
MEGATRON_WEIGHT = 3.0
"""Weight of the Megatron-LM rows in the fitted MAPE (docs/VALIDATION.md)."""


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """Limits on the fitted profile values (fractions of peak unless stated)."""

    max_efficiency: float = 0.95
    """Upper bound of every GEMM and attention curve point and of NVLink and memory efficiency."""
    max_nic_efficiency: float = 0.98
    """Upper bound of the NIC link efficiency (RDMA reaches ~98 % of line rate)."""
    fp8: tuple[float, float] = (0.6, 1.2)
    """Range of ``precision_efficiency["fp8"]``."""
    fp4: tuple[float, float] = (0.4, 1.2)
    """Range of ``precision_efficiency["fp4"]``."""
    expert: tuple[float, float] = (0.1, 1.0)
    """Range of ``expert_efficiency``."""
    attention_kernel: tuple[float, float] = (0.3, 1.2)
    """Range of ``attention_kernel_efficiency["flash2"]``."""


def profile_key(gpu_type: str, keys: Sequence[str]) -> str | None:
    """The profile stem a GPU type uses, as ``default_profile`` picks it (A100-SXM4 -> a100)."""
    name = gpu_type.lower().split()[0] if gpu_type.strip() else ""
    return next((k for k in sorted(keys) if name.startswith(k)), None)


def perturb(profile: CalibrationProfile, param: str, factor: float = PERTURB_FACTOR) -> CalibrationProfile:
    """``profile`` with one parameter scaled by ``factor`` (kernel overhead doubled)."""
    if param.startswith("g") and param[1:].isdigit():
        j = int(param[1:])
        return profile.replace(gemm_efficiency=[(x, e * factor if i == j else e)
                                                for i, (x, e) in enumerate(profile.gemm_efficiency)])
    link = profile.link_efficiency
    prec = profile.precision_efficiency
    match param:
        case "attn":
            return profile.replace(attention_efficiency=[(x, e * factor) for x, e in profile.attention_efficiency])
        case "link":
            return profile.replace(link_efficiency={**link, "nvlink": link.get("nvlink", 1.0) * factor,
                                                    "nic": link.get("nic", 1.0) * factor})
        case "mem":
            return profile.replace(memory_efficiency=profile.memory_efficiency * factor)
        case "kern":
            return profile.replace(kernel_overhead=profile.kernel_overhead * 2.0)
        case "exp":
            return profile.replace(expert_efficiency=profile.expert_efficiency * factor)
        case "fp8" | "fp4":
            return profile.replace(precision_efficiency={**prec, param: prec.get(param, 1.0) * factor})
        case "ak":
            kern = profile.attention_kernel_efficiency
            return profile.replace(attention_kernel_efficiency={**kern, "flash2": kern.get("flash2", 1.0) * factor})
    raise CalibrationError(f"parameter {param!r} unknown; use one of {list(PARAMS)}")


def _relevant(param: str, row: Mapping[str, Any]) -> bool:
    """False where a perturbation cannot change the row (its sensitivity is zero, not simulated).

    An NVFP4 row runs its GEMMs at fp4 peak x fp4/fp8 with the fp8 factor applied: fp8 cancels.
    """
    try:
        precision, label = precision_of(dict(row), [])
    except SkipRow:
        return True
    moe = str(row.get("arch_type", "")).lower() == "moe" or (pd.notna(row.get("num_experts")) and float(row["num_experts"]) > 1)
    match param:
        case "fp8":
            return precision == "fp8" and label != "nvfp4"
        case "fp4":
            return label == "nvfp4"
        case "exp":
            return moe
        case "ak":
            return attention_kernel(dict(row), []) == "flash2"
    return True


def _row_record(row: Mapping[str, Any], key: str | None, profiles: Mapping[str, CalibrationProfile],
                params: Sequence[str], fidelity: Fidelity, cache: dict) -> dict[str, Any]:
    """Base and perturbed predicted step times of one row (NaN-free: irrelevant ones = base)."""
    rec: dict[str, Any] = {"row_id": int(row["row_id"]), "gpu_type": str(row.get("gpu_type", "")), "group": key,
                           "framework": str(row.get("framework", "") or ""), "source_id": str(row.get("source_id", ""))}
    base = validate_row(row, profile=profiles[key], fidelity=fidelity, cache=cache) if key else None
    if base is None or base["status"] != "ok":
        return {**rec, "status": "skipped", "reason": base["reason"] if base else "no profile for gpu_type"}
    rec.update(status="ok", reason="", measured=base["measured_step_time_s"], base=base["predicted_step_time_s"])
    for p in params:
        if not _relevant(p, row):
            rec[p] = rec["base"]
            continue
        out = validate_row(row, profile=perturb(profiles[key], p), fidelity=fidelity, cache=cache, plan=base["_plan"])
        rec[p] = out["predicted_step_time_s"] if out["status"] == "ok" else rec["base"]
    return rec


def _chunk_records(rows: list[dict[str, Any]], profiles: dict[str, CalibrationProfile],
                   params: tuple[str, ...], fidelity: Fidelity) -> list[dict[str, Any]]:
    """Worker: the records of a chunk of rows (one cluster cache per chunk)."""
    cache: dict = {}
    return [_row_record(r, profile_key(str(r.get("gpu_type", "")), list(profiles)), profiles, params, fidelity, cache)
            for r in rows]


def sensitivities(runs: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], params: Sequence[str] = PARAMS,
                  *, fidelity: Fidelity = "analytic", progress: Callable[[int, int], None] | None = None,
                  workers: int = 1, chunk: int = 8) -> pd.DataFrame:
    """Per row: the base predicted step time and the step time with each parameter perturbed.

    ``profiles`` maps a profile stem (``a100``, ``h100``, ...) to its profile; a row uses the profile
    of its ``gpu_type``. Columns: row_id, gpu_type, group, framework, source_id, status, reason,
    measured, base and one per parameter (seconds). ``workers`` > 1 runs chunks in a process pool.
    """
    rows = runs.to_dict("records")
    chunks = [rows[i:i + chunk] for i in range(0, len(rows), chunk)]
    prof, ps = dict(profiles), tuple(params)
    records: list[dict[str, Any]] = []
    if workers <= 1:
        results = (_chunk_records(c, prof, ps, fidelity) for c in chunks)
        return _collect(results, records, len(rows), progress)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = pool.map(_chunk_records, chunks, *zip(*[(prof, ps, fidelity)] * len(chunks)))
        return _collect(results, records, len(rows), progress)


def _collect(results: Any, records: list[dict[str, Any]], total: int,
             progress: Callable[[int, int], None] | None) -> pd.DataFrame:
    for part in results:
        records.extend(part)
        if progress is not None:
            progress(len(records), total)
    return pd.DataFrame.from_records(records)


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
    """A_k per parameter per row (s): the step time added by 1/s_k - 1 (kern: by s_k - 1)."""
    base: dict[str, np.ndarray]
    """Current profile values per group: gemm (n x points), attn_max, nvlink, nic, exp, fp8, fp4, mem."""


def _problem(sens: pd.DataFrame, profiles: Mapping[str, CalibrationProfile]) -> _Problem:
    ok = sens[sens.status == "ok"] if "status" in sens else sens
    groups = tuple(sorted(ok.group.unique()))
    f = 1.0 / PERTURB_FACTOR - 1.0
    t0 = ok.base.to_numpy(float)
    slopes = {p: (ok[p].to_numpy(float) - t0) / (1.0 if p == "kern" else f) for p in PARAMS if p in ok}
    return _Problem(groups=groups, gi=ok.group.map({g: i for i, g in enumerate(groups)}).to_numpy(int),
                    t0=t0, slopes=slopes, base=_base_values([profiles[g] for g in groups]))


def _base_values(profs: list[CalibrationProfile]) -> dict[str, np.ndarray]:
    if any(len(p.gemm_efficiency) != GEMM_POINTS for p in profs):
        raise CalibrationError(f"gemm_efficiency must have {GEMM_POINTS} points in every profile to fit a shared curve")
    arr = lambda f: np.array([f(p) for p in profs], dtype=float)  # noqa: E731
    return {"gemm": np.array([[e for _, e in p.gemm_efficiency] for p in profs]),
            "attn_max": arr(lambda p: max(e for _, e in p.attention_efficiency)),
            "nvlink": arr(lambda p: p.link_eff("nvlink")), "nic": arr(lambda p: p.link_eff("nic")),
            "exp": arr(lambda p: p.expert_efficiency), "mem": arr(lambda p: p.memory_efficiency),
            "fp8": arr(lambda p: p.precision_efficiency.get("fp8", 1.0)),
            "fp4": arr(lambda p: p.precision_efficiency.get("fp4", 1.0)),
            "ak": arr(lambda p: p.attention_kernel_efficiency.get("flash2", 1.0))}


def _initial(n: int) -> dict[str, np.ndarray]:
    return {**{k: np.ones(n) for k in PER_GROUP}, "curve": np.ones(GEMM_POINTS), "kern": np.ones(1), "mem": np.ones(1)}


def predict(pb: _Problem, x: Mapping[str, np.ndarray]) -> np.ndarray:
    """First-order predicted step time of every row at scales ``x``."""
    g, s, t = pb.gi, pb.slopes, pb.t0.copy()
    zero = np.zeros_like(t)
    for j in range(GEMM_POINTS):
        t += s.get(f"g{j}", zero) * (1.0 / (x["gemm"][g] * x["curve"][j]) - 1.0)
    for p, k in (("attn", "attn"), ("link", "link"), ("exp", "exp"), ("fp8", "fp8"), ("fp4", "fp4"), ("ak", "ak")):
        t += s.get(p, zero) * (1.0 / x[k][g] - 1.0)
    t += s.get("mem", zero) * (1.0 / x["mem"][0] - 1.0) + s.get("kern", zero) * (x["kern"][0] - 1.0)
    return t


def feasible(pb: _Problem, x: Mapping[str, np.ndarray], bounds: Bounds) -> bool:
    """Whether the profiles at scales ``x`` respect ``bounds`` (and the curve is non-decreasing)."""
    b, hi = pb.base, bounds.max_efficiency + 1e-12
    gemm = b["gemm"] * x["gemm"][:, None] * x["curve"][None, :]
    checks = (gemm.max() <= hi, np.all(np.diff(gemm, axis=1) >= -1e-9), np.all(b["attn_max"] * x["attn"] <= hi),
              np.all(b["nvlink"] * x["link"] <= hi), np.all(b["nic"] * x["link"] <= bounds.max_nic_efficiency + 1e-12),
              np.all(b["mem"] * x["mem"][0] <= hi), _within(b["exp"] * x["exp"], bounds.expert),
              _within(b["fp8"] * x["fp8"], bounds.fp8), _within(b["fp4"] * x["fp4"], bounds.fp4),
              _within(b["ak"] * x["ak"], bounds.attention_kernel),
              np.all(b["attn_max"] * x["attn"] * b["ak"] * x["ak"] <= hi))
    return bool(all(checks))


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
    """3 for Megatron-LM rows (``framework`` starts with Megatron-LM/Megatron-Core), else 1."""
    ok = sens[sens.status == "ok"] if "status" in sens else sens
    return np.where(ok.framework.fillna("").str.startswith(MEGATRON_LM_FRAMEWORKS), MEGATRON_WEIGHT, 1.0)


def _candidates(v: float, step: float | None) -> np.ndarray:
    """The coarse grid 0.5 ... 1.6 (step None), else v x (1 + step k), k = -4 ... 4."""
    return np.linspace(0.5, 1.6, 111) if step is None else v * (1.0 + step * np.arange(-4, 5))


def _sweep(pb: _Problem, x: dict[str, np.ndarray], obj: Callable[[dict[str, np.ndarray]], float],
           best: float, step: float | None, bounds: Bounds) -> float:
    """One pass over every coordinate; keeps a candidate only if feasible and strictly better."""
    for name in (*PER_GROUP, "curve", "kern", "mem"):
        for i in range(len(x[name])):
            start = x[name][i]
            for v in _candidates(start, step):
                old = x[name][i]
                x[name][i] = v
                if feasible(pb, x, bounds) and (o := obj(x)) < best - 1e-9:
                    best = o
                else:
                    x[name][i] = old
    return best


def fit_scales(pb: _Problem, measured: np.ndarray, weights: np.ndarray, *, bounds: Bounds = Bounds(),
               sweeps: int = 4, mask: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], float]:
    """Scales minimising the weighted MAPE of the rows in ``mask`` (all by default), and that MAPE."""
    m = np.ones(len(measured), bool) if mask is None else mask
    x = _initial(len(pb.groups))
    for i, smooth in enumerate(SMOOTHING):
        obj = lambda x, s=smooth: weighted_mape(predict(pb, x)[m], measured[m], weights[m], s)  # noqa: E731
        best = obj(x)
        for step in ([None] * sweeps if i == 0 else []) + [0.02, 0.005, 0.001]:
            for _ in range(MAX_LOCAL_SWEEPS):
                before, best = best, _sweep(pb, x, obj, best, step, bounds)
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
        attention_kernel_efficiency={"flash2": _r3(profile.attention_kernel_efficiency.get("flash2", 1.0) * x["ak"][i])},
        memory_efficiency=_r3(profile.memory_efficiency * x["mem"][0]),
        kernel_overhead=float(round(profile.kernel_overhead * x["kern"][0], 9)))


def _measured(sens: pd.DataFrame, measured: pd.Series | np.ndarray | None) -> np.ndarray:
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
    pb = _problem(sens, profiles)
    x, _ = fit_scales(pb, _measured(sens, measured), row_weights(sens), bounds=bounds, sweeps=sweeps)
    return {g: apply_scales(profiles[g], i, x) for i, g in enumerate(pb.groups)}


def first_order_errors(sens: pd.DataFrame, x: Mapping[str, np.ndarray] | None = None, *,
                       profiles: Mapping[str, CalibrationProfile]) -> np.ndarray:
    """Signed percent errors of the first-order model at scales ``x`` (the base when None)."""
    pb = _problem(sens, profiles)
    t = predict(pb, x if x is not None else _initial(len(pb.groups)))
    meas = _measured(sens, None)
    return (t - meas) / meas * 100.0


def cross_validate(sens: pd.DataFrame, folds: int = 2, rng: np.random.Generator | None = None, *,
                   profiles: Mapping[str, CalibrationProfile], bounds: Bounds = Bounds(),
                   sweeps: int = 4) -> pd.DataFrame:
    """Per fold: refit the first-order model without the fold, MAPE on the fitted and held-out rows.

    Rows are assigned to folds by a permutation drawn from ``rng`` (``default_rng(0)`` when None).
    Columns: fold, train_rows, train_mape, test_rows, test_mape, test_mape_before (unweighted %).
    """
    if folds < 2:
        raise CalibrationError(f"cross-validation folds = {folds}; use 2 or more")
    table, _ = _folds(sens, folds, rng if rng is not None else np.random.default_rng(0), profiles, bounds, sweeps)
    return table


def _folds(sens: pd.DataFrame, folds: int, rng: np.random.Generator, profiles: Mapping[str, CalibrationProfile],
           bounds: Bounds, sweeps: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The per-fold table and every row's absolute percent error when held out."""
    pb, meas = _problem(sens, profiles), _measured(sens, None)
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


def write_profiles(profiles: Mapping[str, CalibrationProfile], out_dir: str | os.PathLike[str],
                   *, header: str = "") -> list[Path]:
    """Write ``<stem>.yaml`` per profile atomically (temporary name, then rename), ``header`` as comments."""
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, prof in sorted(profiles.items()):
        text = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
        text += yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False)
        fd, tmp = tempfile.mkstemp(dir=target, prefix=f".{stem}.yaml.")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; profiles are ordinary data files
        os.replace(tmp, target / f"{stem}.yaml")
        written.append(target / f"{stem}.yaml")
    return written


PROFILE_HEADER = (
    "Calibration profile for {gpu} (CalibrationProfile YAML, SI units: efficiencies are fractions\n"
    "of the datasheet peak in topologies/accelerators.py, overheads in seconds).\n"
    "Source: fitted on the published runs bundled in workloads/data/published_runs.csv (sources in\n"
    "workloads/data/SOURCES.md) by `clustersim validate --fit-profiles` (simulator/fit_defaults.py):\n"
    "first-order model of the step time in the inverse efficiencies, Megatron-LM rows weighted 3x,\n"
    "MAPE minimised per GPU type; curve shape, kernel overhead and memory efficiency shared by all\n"
    "GPU types. Method and errors: docs/VALIDATION.md, section \"Default profiles\".")
"""Comment header of a fitted profile (``{gpu}``: the GPU type)."""


COPIES: Mapping[str, str] = {"h200": "h100"}
"""Profiles fitted as a copy of another (no H200 rows; same Hopper SM and NVLink 4 as H100)."""
EXPERT_DONORS: Mapping[str, str] = {"a100": "h100"}
"""GPU types without MoE rows take ``expert_efficiency`` from this one."""


@dataclass(frozen=True, kw_only=True)
class FitOutcome:
    """Everything ``fit_default_profiles`` produces."""

    profiles: dict[str, CalibrationProfile]
    """The fitted profiles by stem (every input stem; copies per ``COPIES``)."""
    report: pd.DataFrame
    """Per GPU type and "all": rows, mape_before, mape_first_order, mape_after, mape_held_out (%)."""
    folds: pd.DataFrame
    """``cross_validate``'s per-fold table of the last round."""
    after: pd.DataFrame
    """Per row of the final check: row_id, group, framework, measured, base (the new prediction)."""
    sensitivities: pd.DataFrame
    """``sensitivities`` of the last round (at the profiles that round started from)."""


def _complete(current: Mapping[str, CalibrationProfile], fitted: Mapping[str, CalibrationProfile],
              sens: pd.DataFrame) -> dict[str, CalibrationProfile]:
    """Merge fitted profiles into ``current``; copies and expert donors applied; sources updated."""
    out = {**current, **fitted}
    for stem, donor in EXPERT_DONORS.items():
        if stem in fitted and donor in out and not (sens.loc[sens.group == stem, "exp"] != sens.loc[sens.group == stem, "base"]).any():
            out[stem] = out[stem].replace(expert_efficiency=out[donor].expert_efficiency)
    for stem, prof in fitted.items():
        rows = sens[(sens.group == stem) & (sens.status == "ok")]
        out[stem] = out[stem].replace(name=f"{stem}-published-runs", source=(
            f"fitted by clustersim validate --fit-profiles on workloads/data/published_runs.csv ({len(rows)} "
            f"{stem.upper()} rows: {', '.join(sorted(rows.source_id.unique()))}); one profile for every row of the GPU type"))
    for stem, donor in COPIES.items():
        if stem in current and donor in fitted:
            out[stem] = out[donor].replace(name=f"{stem}-published-runs", source=(
                f"no {stem.upper()} rows in workloads/data/published_runs.csv: the fitted {donor.upper()} values"))
    return out


def _group_mape(group: pd.Series, err: np.ndarray) -> dict[str, float]:
    a = pd.Series(np.abs(err), index=group.index)
    return {**a.groupby(group).mean().to_dict(), "all": float(a.mean())}


def fit_default_profiles(runs: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], *, rounds: int = 1,
                         folds: int = 2, rng: np.random.Generator | None = None, fidelity: Fidelity = "analytic",
                         workers: int = 2, progress: Callable[[str, int, int], None] | None = None) -> FitOutcome:
    """Rounds of (sensitivities, cross-validation, fit) from ``profiles``, then a full re-simulation."""
    if rounds < 1:
        raise CalibrationError(f"fit rounds = {rounds}; use 1 or more")
    gen = rng if rng is not None else np.random.default_rng(0)
    current = dict(profiles)
    tell = (lambda label: (lambda d, t: progress(label, d, t))) if progress else (lambda label: None)  # noqa: E731
    before = first = held = folds_table = None
    for r in range(rounds):
        sens = sensitivities(runs, current, PARAMS, fidelity=fidelity, workers=workers, progress=tell(f"round {r + 1}"))
        ok = sens[sens.status == "ok"]
        before = before if before is not None else _group_mape(ok.group, first_order_errors(sens, profiles=current))
        folds_table, held_abs = _folds(sens, folds, gen, current, Bounds(), 4)
        pb = _problem(sens, current)
        x, _ = fit_scales(pb, _measured(sens, None), row_weights(sens))
        fitted = {g: apply_scales(current[g], i, x) for i, g in enumerate(pb.groups)}
        first = _group_mape(ok.group, first_order_errors(sens, x, profiles=current))
        held = _group_mape(ok.group, held_abs)
        current = _complete(current, fitted, sens)
    check = sensitivities(runs, current, (), fidelity=fidelity, workers=workers, progress=tell("check"))
    ok = check[check.status == "ok"]
    after = _group_mape(ok.group, (ok.base - ok.measured).to_numpy() / ok.measured.to_numpy() * 100.0)
    keys = sorted(k for k in after if k != "all") + ["all"]
    report = pd.DataFrame([{"group": k, "rows": int((ok.group == k).sum()) if k != "all" else len(ok),
                            "mape_before": before.get(k), "mape_first_order": first.get(k),
                            "mape_after": after.get(k), "mape_held_out": held.get(k)} for k in keys])
    return FitOutcome(profiles=current, report=report, folds=folds_table, after=ok.reset_index(drop=True),
                      sensitivities=sens)
