"""Fidelity: re-predict published training runs and measure the error.

Owns the mapping of one row of ``workloads/data/published_runs.csv`` (or any CSV with exactly its
columns) to a scenario (model, training, cluster, plan), the documented inference rules for
missing fields (docs/VALIDATION.md lists them; each applied rule is recorded in the output row's
``inferred`` column), the measured step time of a row, running every row and the error summary.
A row that no rule can complete is skipped with its reason, never guessed silently.
It does not fit the profiles (they are data in ``simulator/profiles``) nor print (``validate_cli``).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from clustersim.units import GBIT
from clustersim.simulator.step import Result, simulate_step as simulate
from clustersim.simulator.profile import PROFILE_OF_PART, CalibrationProfile, default_profile
from clustersim.simulator.network import DEFAULT_FIDELITY, Fidelity
from clustersim.simulator.errors import OutOfMemoryError, ScenarioError
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.calibration.repeatability import repeatability_floor, scenario_key
from clustersim.simulator.calibration.spellings import UnknownSpelling, nic_gbps_per_gpu
from clustersim.simulator.calibration.validate_plan import (
    attention_kernel, batch_consistent, optimizer_state_bytes, plan_for_row, tuning_candidates,
)
from clustersim.simulator.calibration.validate_rules import SkipRow, measured_step_time, model_for_row, precision_of, text, num
from clustersim.topologies import Cluster, get_cluster
from clustersim.topologies.accelerators import get_accelerator, normalise_gpu, stated_power_limit
from clustersim.topologies.power import with_power_limit
from clustersim.workloads import ModelSpec, TrainingSpec
from clustersim.workloads.presets import DATA_DIR

DATA_PATH = DATA_DIR / "published_runs.csv"
COLLECTED_PATH = DATA_DIR / "published_runs_dgxc.csv"
"""Published runs this project transcribed from sources outside the given table (row_id 1001 on;
the columns of published_runs.csv plus ``etp``, the printed expert tensor-parallel degree), each
with its source and locator: workloads/data/SOURCES.md. Not (yet) in the default data set: pass
it as ``runs`` (``clustersim validate workloads/data/published_runs_dgxc.csv``); docs/VALIDATION.md
"December's twelfth stop" says why."""
ClusterKey = tuple[str, str, int, tuple[tuple[str, str], ...]]
"""A cluster cache key: (system, gpu, GPU count, the sorted overrides as (name, repr))."""
"""The bundled data set (sources: workloads/data/SOURCES.md)."""

OUTPUT_COLUMNS: tuple[str, ...] = (
    "row_id", "source_id", "framework", "gpu_type", "model", "num_gpus", "status", "reason",
    "predicted_step_time_s", "measured_step_time_s", "error_pct", "predicted_mfu", "measured_from",
    "inferred", "plan", "scenario", "wall_s",
)
"""Columns of the validation output (one row per input row)."""



@dataclass(frozen=True, kw_only=True)
class RowScenario:
    """Everything needed to re-predict one published row."""

    row_id: int
    """The row's ``row_id``."""
    model: ModelSpec
    """Architecture (preset named by ``model``, overridden by the row's shape columns)."""
    training: TrainingSpec
    """Sequence length, global batch (sequences) and GEMM precision."""
    cluster: Cluster
    """The system of ``gpu_type`` with ``num_gpus`` devices and the row's NIC speed."""
    plan: ParallelPlan
    """The parallel plan from the row's degrees and settings."""
    measured_step_time: float
    """Seconds per optimizer step as published (or derived, see ``measured_from``)."""
    measured_from: str
    """Which column the measured step time comes from."""
    inferred: tuple[str, ...]
    """The inference rules applied to this row, in words."""
    candidates: tuple[ParallelPlan, ...] = ()
    """Plans over the knobs the row does not publish (micro-batch, VPP); empty when it publishes them."""


def load_runs(path: str | Path | None = None) -> pd.DataFrame:
    """The published runs CSV (the given table by default)."""
    where = Path(path) if path is not None else DATA_PATH
    if not where.exists():
        raise ScenarioError(f"runs file {where} does not exist; pass a CSV with the columns of published_runs.csv")
    try:
        runs = pd.read_csv(where)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"runs file {where} is not a readable CSV ({str(exc).splitlines()[0]}); "
                            "pass a CSV with the columns of published_runs.csv") from None
    missing = sorted(set(pd.read_csv(DATA_PATH, nrows=0).columns) - set(runs.columns))
    if missing:
        raise ScenarioError(f"runs file {where} lacks column(s) {missing}; use the columns of published_runs.csv")
    return runs


NODE_GPUS: Mapping[str, int] = {"gb200-nvl72": 4, "gb300-nvl72": 4}
"""GPUs per node of a system preset when the row prints none (NVL72 compute trays hold 4; DGX 8)."""


def _nic_bandwidth(row: Mapping[str, Any], system: str, notes: list[str]) -> dict[str, float]:
    """Scale-out bandwidth per GPU from ``inter_node_interconnect`` (``spellings.nic_gbps_per_gpu``)."""
    inter = text(row, "inter_node_interconnect")
    if not inter:
        return {}
    per_node = int(num(row, "gpus_per_node") or NODE_GPUS.get(system, 8))
    try:
        gbps, how = nic_gbps_per_gpu(inter, per_node)
    except UnknownSpelling as exc:
        raise SkipRow(str(exc)) from None
    if "per node" in how:
        notes.append(f"NIC: {how}")
    return {"nic_bandwidth": gbps * GBIT}


def _accelerator_overrides(row: Mapping[str, Any], precision_label: str,
                           profile: CalibrationProfile | None) -> dict[str, Any]:
    """A100 40GB rows pick the 40 GB part; NVFP4 rows run their FP8-eligible GEMMs at the FP4 peak.

    TrainingSpec has no fp4 precision, so an NVFP4 row is an fp8 run on a device whose fp8 key holds
    the FP4 dense peak times precision_efficiency["fp4"] / precision_efficiency["fp8"] of the profile.
    """
    part = part_of_row(row)
    base = get_accelerator(part) if part not in ("a100", "h100", "h200", "b200", "b300", "gb200", "gb300") else None
    if (limit := stated_power_limit(text(row, "gpu_type"))) is not None:  # cube-law clock, topologies.power
        try:
            base = with_power_limit(base or get_accelerator(part), limit)
        except ValueError as exc:
            raise SkipRow(f"gpu_type {text(row, 'gpu_type')!r}: {str(exc).splitlines()[0]}") from None
    if precision_label == "nvfp4":
        base = base or get_accelerator(part)
        eff = (profile or default_profile(base.name)).precision_efficiency
        peaks = dict(base.peak_flops)
        peaks["fp8"] = peaks.get("fp4", peaks["fp8"]) * eff.get("fp4", 1.0) / eff.get("fp8", 1.0)
        base = replace(base, peak_flops=peaks)
    return {"accelerator": base} if base is not None else {}


_SYSTEMS: Mapping[str, str] = {
    "a100": "dgx-a100", "a100_40gb": "dgx-a100", "a800": "dgx-a100", "h100": "dgx-h100", "h800": "dgx-h100",
    "h20": "dgx-h100", "h200": "dgx-h200", "b200": "dgx-b200", "b300": "dgx-b300", "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72"}

SYSTEM_OF_PART: Mapping[str, tuple[str, str]] = {k: (system, PROFILE_OF_PART[k]) for k, system in _SYSTEMS.items()}
"""Accelerator key (``normalise_gpu``) -> (cluster preset of 8-GPU NVSwitch boards or NVL72 racks
built with that part, profile stem: ``profile.PROFILE_OF_PART``, the table ``simulate`` reads too).
H800/A800/H20 are HGX boards of the same generation as H100/A100 (their own datasheet figures, the
same die's fitted efficiencies). Parts without a system preset here (PCIe and NVL cards, GH200
nodes, AMD Instinct) are skipped naming the part."""


def part_of_row(row: Mapping[str, Any]) -> str:
    """The accelerator key of ``gpu_type`` (``gpu_mem_gb = 40`` on an A100 picks the 40 GB part)."""
    gpu = text(row, "gpu_type")
    try:
        key = normalise_gpu(gpu)
    except ValueError as exc:
        raise SkipRow(f"gpu_type {gpu!r}: {str(exc).splitlines()[0]}") from None
    mem = num(row, "gpu_mem_gb")
    if key == "a100" and mem is not None and round(mem) == 40:
        return "a100_40gb"
    if key not in SYSTEM_OF_PART:
        raise SkipRow(f"gpu_type {gpu!r} ({key}): no system preset for this part (SYSTEM_OF_PART)")
    return key


def cluster_for_row(row: Mapping[str, Any], precision_label: str, notes: list[str],
                    cache: dict[ClusterKey, Cluster] | None = None,
                    profile: CalibrationProfile | None = None) -> Cluster:
    """The preset of ``gpu_type`` with ``num_gpus`` GPUs and the row's NIC speed."""
    gpu = text(row, "gpu_type")
    n = int(num(row, "num_gpus") or 0)
    if not gpu or n <= 0:
        raise SkipRow("gpu_type or num_gpus missing")
    system = SYSTEM_OF_PART[part_of_row(row)][0]
    overrides = {**_nic_bandwidth(row, system, notes), **_accelerator_overrides(row, precision_label, profile)}
    key = (system, gpu.lower(), n, tuple(sorted((k, repr(v)) for k, v in overrides.items())))
    if cache is not None and key in cache:
        return cache[key]
    try:
        cluster = get_cluster(system, n, **overrides)
    except ValueError as exc:
        raise SkipRow(f"cluster: {str(exc).splitlines()[0]}") from None
    if cache is not None:
        cache[key] = cluster
    return cluster


def scenario_for_row(row: Mapping[str, Any], cache: dict[ClusterKey, Cluster] | None = None,
                     profile: CalibrationProfile | None = None) -> RowScenario:
    """Map one published row to a scenario; raises ``SkipRow`` with the reason when it cannot."""
    notes: list[str] = []
    row = batch_consistent(row, notes)
    measured, measured_from = measured_step_time(row, notes)
    model = model_for_row(row, notes)
    precision, label = precision_of(row, notes)
    seq = int(num(row, "seq_len") or 0)
    gbs = int(num(row, "global_batch_seqs") or 0)
    if seq <= 0 or gbs <= 0:
        raise SkipRow("seq_len or global_batch_seqs missing")
    training = TrainingSpec(seq_len=seq, global_batch_size=gbs, precision=precision,
                            attention_kernel=attention_kernel(row, notes))
    cluster = cluster_for_row(row, label, notes, cache, profile)
    plan = plan_for_row(row, model, training, cluster, notes)
    state = optimizer_state_bytes(row, model, plan, notes)
    if state is not None:
        training = replace(training, optimizer_state_dtype_bytes=state, master_param_dtype_bytes=state)
    candidates = tuning_candidates(row, model, training, plan)
    return RowScenario(row_id=int(row["row_id"]), model=model, training=training, cluster=cluster, plan=plan,
                       measured_step_time=measured, measured_from=measured_from, inferred=tuple(notes),
                       candidates=tuple(candidates) if len(candidates) > 1 else ())


def _base_record(row: Mapping[str, Any]) -> dict[str, Any]:
    rec: dict[str, Any] = dict.fromkeys(OUTPUT_COLUMNS, None)
    rec.update(row_id=int(row["row_id"]), source_id=text(row, "source_id"), framework=text(row, "framework"),
               gpu_type=text(row, "gpu_type"),
               model=text(row, "model"), num_gpus=int(num(row, "num_gpus") or 0), status="skipped", reason="")
    return rec


def _simulate_published(sc: RowScenario, profile: CalibrationProfile | None,
                        fidelity: Fidelity) -> tuple[Result, tuple[str, ...]]:
    """Simulate; a published run did fit in memory, so a predicted overflow is noted, not fatal.

    On ``OutOfMemoryError`` the row is simulated again with the capacity check lifted (the step
    time does not depend on the capacity) and the overflow is recorded in ``inferred``.
    """
    try:
        return simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=profile, fidelity=fidelity), ()
    except OutOfMemoryError as exc:
        roomy = replace(sc.cluster.accelerator, hbm_capacity=1e18)
        res = simulate(sc.model, sc.training, replace(sc.cluster, accelerator=roomy), sc.plan,
                       profile=profile, fidelity=fidelity)
        return res, (f"memory check lifted (the run fit; predicted: {str(exc).splitlines()[0][:90]})",)


def _tuned(sc: RowScenario, profile: CalibrationProfile | None,
           fidelity: Fidelity) -> tuple[RowScenario, Result, tuple[str, ...]]:
    """The fastest candidate that fits in memory (the base plan, memory check lifted, if none fits)."""
    best: tuple[float, ParallelPlan, Result] | None = None
    for plan in sc.candidates:
        try:
            res = simulate(sc.model, sc.training, sc.cluster, plan, profile=profile, fidelity=fidelity)
        except OutOfMemoryError:
            continue
        if best is None or res.step_time < best[0]:
            best = (res.step_time, plan, res)
    if best is None:
        res, note = _simulate_published(sc, profile, fidelity)
        return sc, res, note + (f"micro_batch/vpp not published and no candidate fits: "
                                f"micro_batch = {sc.plan.micro_batch}, vpp = {sc.plan.vpp}",)
    _, plan, res = best
    note = (f"micro_batch = {plan.micro_batch}, vpp = {plan.vpp}: not published; the fastest of "
            f"{len(sc.candidates)} candidates that fits (a benchmark is tuned for throughput)",)
    return replace(sc, plan=plan), res, note


def validate_row(row: Mapping[str, Any], *, profile: CalibrationProfile | None = None,
                 fidelity: Fidelity = DEFAULT_FIDELITY, cache: dict[ClusterKey, Cluster] | None = None,
                 plan: ParallelPlan | None = None) -> dict[str, Any]:
    """One output record: the prediction and its signed error, or the reason the row was skipped.

    ``plan`` replaces the row's inferred plan (no tuning): the profile fit keeps the plan tuned at
    its base profile while it perturbs the profile. The record's ``_plan`` is the plan simulated.
    """
    rec = _base_record(row)
    start = time.perf_counter()
    try:
        if profile is None:  # the profile of the part's generation (H800 -> h100), as the fit groups rows
            profile = default_profile(SYSTEM_OF_PART[part_of_row(row)][1])
        sc = scenario_for_row(row, cache, profile)
        if plan is not None:
            sc = replace(sc, plan=plan, candidates=())
        sc, res, note = _tuned(sc, profile, fidelity) if sc.candidates else (sc, *_simulate_published(sc, profile, fidelity))
    except SkipRow as exc:
        rec["reason"] = str(exc)
        return rec
    except ValueError as exc:  # plan rules, out of memory: the simulator's own one-line message
        rec["reason"] = f"simulator rejected the inferred scenario: {str(exc).splitlines()[0]}"
        return rec
    err = (res.step_time - sc.measured_step_time) / sc.measured_step_time * 100.0
    # MFU against the datasheet peak of the run's GEMM precision (FP4 for NVFP4 rows)
    peak = sc.cluster.accelerator.peak("fp4" if "nvfp4" in text(row, "precision").lower()
                                                        else sc.training.precision)
    rec.update(status="ok", predicted_step_time_s=res.step_time, measured_step_time_s=sc.measured_step_time,
               error_pct=err, predicted_mfu=res.model_flops / (res.step_time * res.num_gpus * peak), measured_from=sc.measured_from,
               inferred="; ".join(sc.inferred + note), plan=sc.plan.describe(),
               scenario=scenario_key(sc.model, sc.training, sc.cluster, sc.plan), wall_s=time.perf_counter() - start,
               _plan=sc.plan)
    return rec


def validate_runs(runs: pd.DataFrame, *, profile: CalibrationProfile | None = None,
                  fidelity: Fidelity = DEFAULT_FIDELITY,
                  progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Validate every row of ``runs``; one output row per input row, in input order."""
    cache: dict[ClusterKey, Cluster] = {}
    records = []
    rows = [{str(k): v for k, v in row.items()} for row in runs.to_dict("records")]
    for i, row in enumerate(rows):
        records.append(validate_row(row, profile=profile, fidelity=fidelity, cache=cache))
        if progress is not None:
            progress(i + 1, len(rows))
    return pd.DataFrame.from_records(records, columns=list(OUTPUT_COLUMNS))


def error_stats(errors: pd.Series) -> dict[str, float]:
    """MAPE, median and worst absolute error (percent) and the mean signed error."""
    a = errors.abs()
    if a.empty:
        return {"rows": 0, "mape": math.nan, "median_abs": math.nan, "worst_abs": math.nan, "bias": math.nan}
    return {"rows": int(a.size), "mape": float(a.mean()), "median_abs": float(a.median()),
            "worst_abs": float(a.max()), "bias": float(errors.mean())}


def summarise(results: pd.DataFrame) -> dict[str, Any]:
    """Counts, the overall error, the error by source and by GPU type, and the repeatability floor
    (``repeatability.repeatability_floor``: what rows measured more than once leave to any model)."""
    ok = results[results.status == "ok"]
    by = {}
    for key in ("source_id", "gpu_type"):
        by[key] = pd.DataFrame([{key: k, **error_stats(g.error_pct)} for k, g in ok.groupby(key)])
    skipped = results[results.status != "ok"]
    return {"simulated": int(len(ok)), "skipped": int(len(skipped)), "overall": error_stats(ok.error_pct),
            "by_source": by["source_id"], "by_gpu": by["gpu_type"],
            "skip_reasons": skipped.reason.map(reason_group).value_counts(),
            "floor": repeatability_floor(results) if "scenario" in results.columns else None}


def reason_group(reason: str) -> str:
    """A skip reason with its numbers written as '#' so that rows skipped for one cause count
    together, except inside quotes: a quoted value ('LLAMA4 maverick 400b') is the fact named."""
    parts = re.split(r"('[^']*')", reason)
    return "".join(p if p.startswith("'") else re.sub(r"\d[\d.,]*", "#", p) for p in parts)


MEGATRON_LM_FRAMEWORKS: tuple[str, ...] = ("Megatron-LM", "Megatron-Core")
"""``framework`` prefixes of the runs made with Megatron-LM itself (README tables, SC'21 PTD-P);
the DeepSpeed ZeRO-3 rows of SC'21 Table 2 and the NeMo/Megatron-Bridge recipes are not among them."""


FAMILIES: tuple[tuple[str, str], ...] = (
    ("megatron-bridge-", "megatron-bridge"),
    ("mosaicml-", "mosaicml"),
    ("sc21-", "sc21"),
    ("megatron-readme-", "megatron-lm-readme"),
    ("nemo-perf-", "nemo"),
    ("dgxc-", "dgxc-benchmarking"),
)
"""(``source_id`` prefix, publication family). A family is one publisher's series of one
benchmark: every Megatron-Bridge release re-publishes the same recipes (25.09 ... 26.08), the
Megatron-LM README tables (2021-01, 2021-04, 2024) are one README, the NeMo performance pages
(24.07, long-sequence) one site, the DGX Cloud Benchmarking recipe READMEs (Grok-1, DeepSeek-V3)
one repository. Cross-validation holds out a whole family at a time. A
``source_id`` matching no prefix is its own family."""


def family_of(source_id: str) -> str:
    """The publication family of ``source_id`` (``FAMILIES``; else the id itself)."""
    sid = source_id.strip().lower()
    return next((fam for prefix, fam in FAMILIES if sid.startswith(prefix)), sid)


def megatron_lm_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows run with Megatron-LM (``framework`` starts with Megatron-LM or Megatron-Core)."""
    return frame[frame.framework.fillna("").str.startswith(MEGATRON_LM_FRAMEWORKS)]


def stratified_subset(runs: pd.DataFrame, others: int, rng: np.random.Generator) -> pd.DataFrame:
    """Every Megatron-LM row plus ``others`` rows drawn round-robin over (source_id, gpu_type) strata."""
    meg = megatron_lm_rows(runs)
    rest = runs.drop(meg.index)
    strata = [list(rng.permutation(np.asarray(idx))) for idx in rest.groupby(["source_id", "gpu_type"]).groups.values()]
    chosen: list[int] = []
    while len(chosen) < min(others, len(rest)):
        for stratum in strata:
            if stratum and len(chosen) < others:
                chosen.append(int(stratum.pop()))
    return pd.concat([meg, rest.loc[chosen]]).sort_values("row_id")
