"""Fitting the default calibration profiles (``simulator/calibration/profiles/*.yaml``) on the published runs.

Owns the reproducible version of the method in docs/VALIDATION.md ("Default profiles"): simulate
every row of ``workloads/data/published_runs.csv`` at the current profiles and with each efficiency
parameter perturbed (``perturb``, ``sensitivities``), fit the first-order model on them
(``clustersim.simulator.calibration.fit_first_order``) for a number of rounds, re-simulate every row at the result
(``fit_default_profiles``) and write the profiles atomically (``write_profiles``).
It does not own the row mapping or the statistics (``clustersim.simulator.calibration.validate``), the first-order model
and its search (``clustersim.simulator.calibration.fit_first_order``) nor the CLI (``clustersim.simulator.cli.validate``).
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from clustersim.files import write_atomic
from clustersim.simulator.profile import SYNC_JITTER_MAX, CalibrationProfile
from clustersim.simulator.network import DEFAULT_FIDELITY, Fidelity
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.calibration.fit_first_order import (
    _initial, _Problem, apply_scales, first_order_errors, first_order_problem, held_out_folds, measured_times,
    row_weights, shared_held,
)
from clustersim.simulator.calibration.fit_params import (
    EXPERT_CALL_PROBE, HOST_LAUNCH_PROBE, JITTER_STEP, KERNEL_OVERHEAD_PROBE, PARAMS, PER_GROUP, PER_GROUP_SECONDS, PERTURB_FACTOR,
    Bounds, with_cited_constants,
)
from clustersim.simulator.calibration.fit_identify import fit_identified
from clustersim.simulator.calibration.fit_transfer import transfer_profile
from clustersim.simulator.calibration.validate import SYSTEM_OF_PART, ClusterKey, validate_row
from clustersim.topologies import Cluster
from clustersim.topologies.accelerators import normalise_gpu
from clustersim.simulator.calibration.validate_plan import attention_kernel
from clustersim.simulator.calibration.validate_rules import SkipRow, precision_of

def profile_key(gpu_type: str, keys: Sequence[str]) -> str | None:
    """The profile stem a GPU type uses (``validate.SYSTEM_OF_PART``: A100-SXM4 -> a100, H800 -> h100)."""
    try:
        stem = SYSTEM_OF_PART[normalise_gpu(gpu_type)][1]
    except (ValueError, KeyError):
        return None
    return stem if stem in keys else None


def perturb(profile: CalibrationProfile, param: str, factor: float = PERTURB_FACTOR) -> CalibrationProfile:
    """``profile`` with one parameter scaled by ``factor`` (kernel overhead: ``KERNEL_OVERHEAD_PROBE`` seconds added;
    host launch time: ``HOST_LAUNCH_PROBE`` seconds added; expert call time: ``EXPERT_CALL_PROBE`` seconds added)."""
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
            return profile.replace(kernel_overhead=profile.kernel_overhead + KERNEL_OVERHEAD_PROBE)
        case "exp":
            return profile.replace(expert_efficiency=profile.expert_efficiency * factor)
        case "fp8" | "fp4":
            return profile.replace(precision_efficiency={**prec, param: prec.get(param, 1.0) * factor})
        case "host":
            return profile.replace(host_launch_time=profile.host_launch_time + HOST_LAUNCH_PROBE)
        case "ecall":
            return profile.replace(expert_call_time=profile.expert_call_time + EXPERT_CALL_PROBE)
        case "jit":
            return profile.replace(sync_jitter_cv=min(profile.sync_jitter_cv + JITTER_STEP, SYNC_JITTER_MAX))
        case "ak":
            kern = profile.attention_kernel_efficiency
            return profile.replace(attention_kernel_efficiency={**kern, "flash2": kern.get("flash2", 1.0) * factor})
    raise CalibrationError(f"parameter {param!r} unknown; use one of {list(PARAMS)}")


def _num(row: Mapping[str, Any], key: str) -> float:
    """A numeric column of ``row``; 1 where it is missing (an unpublished degree is inferred >= 1)."""
    v = row.get(key)
    return float(v) if v is not None and pd.notna(v) else 1.0


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
        case "exp" | "ecall":
            return moe
        case "ak":
            return attention_kernel(dict(row), []) == "flash2"
        case "jit":  # no wait for a slowest rank without data (or context) parallelism: dp x cp = 1
            return _num(row, "num_gpus") > _num(row, "tp") * _num(row, "pp")
    return True


def _row_record(row: Mapping[str, Any], key: str | None, profiles: Mapping[str, CalibrationProfile],
                params: Sequence[str], fidelity: Fidelity, cache: dict[ClusterKey, Cluster]) -> dict[str, Any]:
    """Base and perturbed predicted step times of one row (NaN-free: irrelevant ones = base)."""
    rec: dict[str, Any] = {"row_id": int(row["row_id"]), "gpu_type": str(row.get("gpu_type", "")), "group": key,
                           "framework": str(row.get("framework", "") or ""), "source_id": str(row.get("source_id", ""))}
    if not key:
        return {**rec, "status": "skipped", "reason": "no profile for gpu_type"}
    base = validate_row(row, profile=profiles[key], fidelity=fidelity, cache=cache)
    if base["status"] != "ok":
        return {**rec, "status": "skipped", "reason": base["reason"]}
    rec.update(status="ok", reason="", measured=base["measured_step_time_s"], base=base["predicted_step_time_s"],
               scenario=base["scenario"])
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
    cache: dict[ClusterKey, Cluster] = {}
    return [_row_record(r, profile_key(str(r.get("gpu_type", "")), list(profiles)), profiles, params, fidelity, cache)
            for r in rows]


def sensitivities(runs: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], params: Sequence[str] = PARAMS,
                  *, fidelity: Fidelity = DEFAULT_FIDELITY, progress: Callable[[int, int], None] | None = None,
                  workers: int = 1, chunk: int = 8) -> pd.DataFrame:
    """Per row: the base predicted step time and the step time with each parameter perturbed.

    ``profiles`` maps a profile stem (``a100``, ``h100``, ...) to its profile; a row uses the profile
    of its ``gpu_type``. Columns: row_id, gpu_type, group, framework, source_id, status, reason,
    measured, base, scenario (``repeatability.scenario_key``, for ``fit_first_order.row_weights``)
    and one per parameter (seconds). ``workers`` > 1 runs chunks in a process pool.
    """
    rows = [{str(k): v for k, v in row.items()} for row in runs.to_dict("records")]
    chunks = [rows[i:i + chunk] for i in range(0, len(rows), chunk)]
    return map_chunks(_chunk_records, chunks, (dict(profiles), tuple(params), fidelity), workers=workers,
                      total=len(rows), progress=progress)


def map_chunks(worker: Callable[..., list[dict[str, Any]]], chunks: Sequence[Any], args: tuple[Any, ...], *,
               workers: int, total: int, progress: Callable[[int, int], None] | None) -> pd.DataFrame:
    """``worker(chunk, *args)`` for each chunk, in a process pool when ``workers`` > 1, its records in one
    frame in chunk order; ``progress(records so far, total)`` after each chunk."""
    if workers <= 1:
        return _collect((worker(c, *args) for c in chunks), total, progress)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return _collect(pool.map(worker, chunks, *zip(*[args] * len(chunks))), total, progress)


def _collect(results: Iterable[list[dict[str, Any]]], total: int,
             progress: Callable[[int, int], None] | None) -> pd.DataFrame:
    records: list[dict[str, Any]] = []
    for part in results:
        records.extend(part)
        if progress is not None:
            progress(len(records), total)
    return pd.DataFrame.from_records(records)


def write_profiles(profiles: Mapping[str, CalibrationProfile], out_dir: str | os.PathLike[str],
                   *, header: str = "") -> list[Path]:
    """Write ``<stem>.yaml`` per profile atomically (temporary name, then rename), ``header`` as comments."""
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, prof in sorted(profiles.items()):
        text = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
        text += yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False)
        written.append(write_atomic(target / f"{stem}.yaml", text))
    return written


PROFILE_HEADER = (
    "Calibration profile for {gpu} (CalibrationProfile YAML, SI units: efficiencies are fractions\n"
    "of the datasheet peak in topologies/accelerators.py, overheads in seconds).\n"
    "Source: fitted on the published runs bundled in workloads/data/published_runs.csv (sources in\n"
    "workloads/data/SOURCES.md) by `clustersim validate --fit-profiles` (simulator/calibration/fit_defaults.py):\n"
    "first-order model of the step time in the inverse efficiencies, equal weight per publication family,\n"
    "MAPE minimised per GPU type; curve shape, kernel overhead and memory efficiency shared by all\n"
    "GPU types. Method and errors: docs/VALIDATION.md, section \"Default profiles\".")
"""Comment header of a fitted profile (``{gpu}``: the GPU type)."""


COPIES: Mapping[str, str] = {"h200": "h100"}
"""Profiles taken from another's fit (no H200 rows; same Hopper die and NVLink 4 as H100): its values
times the cited part-to-part ratios (``fit_transfer.transfer_profile``, the rule of a fold's GPU type
without rows; H200 against H100: the FP8 matmul level, x1.036)."""
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
              sens: pd.DataFrame, only: Sequence[str] | None = None,
              fidelity: Fidelity = DEFAULT_FIDELITY) -> dict[str, CalibrationProfile]:
    """Merge fitted profiles into ``current``; copies and expert donors applied; sources updated
    (naming the collective model the rows were simulated with)."""
    held = "" if only is None else (
        f"; only {', '.join(s.upper() for s in sorted(only))} refitted (--fit-only), the other GPU types and the "
        "shared curve shape, kernel overhead and memory efficiency held at the starting profiles")
    out = {**current, **fitted}
    for stem, donor in EXPERT_DONORS.items():
        if stem in fitted and donor in out and not (sens.loc[sens.group == stem, "exp"] != sens.loc[sens.group == stem, "base"]).any():
            out[stem] = out[stem].replace(expert_efficiency=out[donor].expert_efficiency,
                                          expert_call_time=out[donor].expert_call_time)
    for stem, prof in fitted.items():
        out[stem] = with_cited_constants(out[stem], stem)
        rows = sens[(sens.group == stem) & (sens.status == "ok")]
        out[stem] = out[stem].replace(name=f"{stem}-published-runs", source=(
            f"fitted by clustersim validate --fit-profiles on workloads/data/published_runs.csv ({len(rows)} "
            f"{stem.upper()} rows: {', '.join(sorted(rows.source_id.unique()))}); one profile for every row of the GPU type; "
            f"step times from the {fidelity} collective model" + held))
    for stem, donor in COPIES.items():
        if stem in current and donor in fitted:
            prof, ratios = transfer_profile(out[donor], donor, stem)
            how = ", ".join(f"{p} x{r:.3f}" for p, r in ratios.items() if round(r, 3) != 1.0) or "none"
            out[stem] = prof.replace(name=f"{stem}-published-runs", source=(
                f"no {stem.upper()} rows in workloads/data/published_runs.csv: the fitted {donor.upper()} values "
                f"times the cited {stem.upper()}/{donor.upper()} ratios of fit_transfer ({how})"))
    return out


def _group_mape(group: pd.Series, err: np.ndarray) -> dict[str, float]:
    a = pd.Series(np.abs(err), index=group.index)
    return {**{str(k): v for k, v in a.groupby(group).mean().items()}, "all": float(a.mean())}


def held_fixed(pb: _Problem, only: Sequence[str]) -> dict[str, dict[int, float]]:
    """The scales ``fit_scales(frozen=)`` holds so that only the GPU types in ``only`` move: every
    other type's own scales and the shared ones (curve shape, kernel overhead, memory, jitter) at
    their starting values, i.e. the starting profiles."""
    x0 = _initial(pb)
    keep = [i for i, g in enumerate(pb.groups) if g not in only]
    names = (*PER_GROUP, *[k for k in PER_GROUP_SECONDS if k in x0])
    hold = {name: {i: float(x0[name][i]) for i in keep} for name in names}
    return {**hold, **shared_held(pb)}


def fit_default_profiles(runs: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], *, rounds: int = 1,
                         folds: int = 2, rng: np.random.Generator | None = None, fidelity: Fidelity = DEFAULT_FIDELITY,
                         workers: int = 2, progress: Callable[[str, int, int], None] | None = None,
                         only: Sequence[str] | None = None) -> FitOutcome:
    """Rounds of (sensitivities, cross-validation, fit) from ``profiles``, then a full re-simulation.

    ``only``: refit just these profile stems; every other profile and the shared curve shape,
    kernel overhead and memory efficiency stay as given (``held_fixed``)."""
    if rounds < 1:
        raise CalibrationError(f"fit rounds = {rounds}; use 1 or more")
    if only is not None:
        unknown = sorted(set(only) - set(profiles))
        if unknown or not only:
            raise CalibrationError(f"fit only {', '.join(unknown) or '(none)'}: not a profile stem; use some of "
                                   f"{', '.join(sorted(profiles))}")
        used = {profile_key(str(g), list(profiles)) for g in runs.gpu_type}
        empty = [s for s in only if s not in used]
        if empty:
            raise CalibrationError(f"fit only {', '.join(empty)}: no row of the runs uses that profile, so nothing "
                                   "would be fitted; name GPU types the runs have (H200 is H100's fit times cited "
                                   "ratios: refit h100)")
    gen = rng if rng is not None else np.random.default_rng(0)
    current = dict(profiles)
    tell = (lambda label: (lambda d, t: progress(label, d, t))) if progress else (lambda label: None)  # noqa: E731
    before = first = held = folds_table = None
    for r in range(rounds):
        sens = sensitivities(runs, current, PARAMS, fidelity=fidelity, workers=workers, progress=tell(f"round {r + 1}"))
        ok = sens[sens.status == "ok"]
        before = before if before is not None else _group_mape(ok.group, first_order_errors(sens, profiles=current))
        folds_table, held_abs = held_out_folds(sens, folds, gen, current, Bounds(), 4)
        pb = first_order_problem(sens, current)
        # a GEMM level or FP8 factor no row of a type identifies is its donor's x the cited ratio
        x, _, _ = fit_identified(pb, measured_times(sens, None), row_weights(sens),
                                 hold=held_fixed(pb, only) if only is not None else None)
        fitted = {g: apply_scales(current[g], i, x) for i, g in enumerate(pb.groups) if only is None or g in only}
        first = _group_mape(ok.group, first_order_errors(sens, x, profiles=current))
        held = _group_mape(ok.group, held_abs)
        current = _complete(current, fitted, sens, only, fidelity)
    if before is None or first is None or held is None or folds_table is None:  # set by every round
        raise CalibrationError(f"fit rounds = {rounds}; use 1 or more")
    check = sensitivities(runs, current, (), fidelity=fidelity, workers=workers, progress=tell("check"))
    ok = check[check.status == "ok"]
    after = _group_mape(ok.group, (ok.base - ok.measured).to_numpy() / ok.measured.to_numpy() * 100.0)
    keys = sorted(k for k in after if k != "all") + ["all"]
    report = pd.DataFrame([{"group": k, "rows": int((ok.group == k).sum()) if k != "all" else len(ok),
                            "mape_before": before.get(k), "mape_first_order": first.get(k),
                            "mape_after": after.get(k), "mape_held_out": held.get(k)} for k in keys])
    return FitOutcome(profiles=current, report=report, folds=folds_table, after=ok.reset_index(drop=True),
                      sensitivities=sens)
