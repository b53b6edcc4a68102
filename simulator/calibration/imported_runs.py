"""Imported runs: a job's configuration and log -> a scenario and its measured steady-state step.

Owns the folder an imported run lives in (``scenario.yaml`` + ``run.json``, written only after
every check passed), the checks that the configuration, the log and the named cluster agree
(GPU count, global batch, the log's TFLOP/s per GPU against the cluster GPU's peak), the NaN
policy (a log with NaN-loss steps is refused unless they are explicitly dropped), and turning
the torch backend's measured plans (``calibrate measure``) into the same folders, so that one
fit path serves this machine and a user's cluster. It does not parse (``runlogs``, ``jobargs``)
nor fit (``fit_logs``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from clustersim.files import write_atomic, write_json
from clustersim.simulator.calibration.fit import fit_profiles
from clustersim.simulator.calibration.jobargs import read_job
from clustersim.simulator.calibration.jobconfig import JobArgsError, JobConfig
from clustersim.simulator.profile import save_profile
from clustersim.simulator.calibration.ranks import slow_rank
from clustersim.simulator.calibration.runlog_records import RunLog, RunLogError, StepStats
from clustersim.simulator.calibration.runlogs import interruptions, read_log, steady_state
from clustersim.simulator.calibration.torch_backend.check import model_spec, parallel_plan, training_spec
from clustersim.simulator.calibration.torch_backend.measure import load_steps
from clustersim.simulator.calibration.torch_backend.specs import StepRecord
from clustersim.simulator.scenario import Scenario, apply_overrides, scenario_from_dict
from clustersim.topologies.accelerators import normalise_gpu
from clustersim.topologies.errors import TopologyError

RUN_FORMAT = "clustersim-run/1"
"""``format`` of run.json."""


@dataclass(frozen=True, kw_only=True)
class ImportedRun:
    """One run: the scenario it ran and the step times it measured."""

    name: str
    """Folder name of the run."""
    family: str
    """Run family: runs that share it are held out together in cross-validation."""
    scenario: dict[str, Any]
    """The scenario mapping (what scenario.yaml holds)."""
    framework: str
    """Framework the log came from (or torch-backend)."""
    stats: StepStats
    """Steady-state step time."""
    steps: tuple[tuple[int, float, int, tuple[str, ...]], ...]
    """(step, seconds, span, marks) of every record."""
    provenance: dict[str, Any]
    """Sources (job, log), checkpoint/eval intervals, ignored keys, notes."""

    def to_json(self) -> dict[str, Any]:
        """run.json."""
        return {"format": RUN_FORMAT, "name": self.name, "family": self.family, "framework": self.framework,
                "steady": {k: v for k, v in asdict(self.stats).items() if k != "marked"},
                "marked": self.stats.marked, "steps": [list(s) for s in self.steps], **self.provenance}


def resolve_gpus(job: JobConfig, log: RunLog, gpus: int | None) -> int:
    """The GPU count the option, the configuration and the log agree on; every disagreement named."""
    said = {k: v for k, v in (("--gpus", gpus), (f"{job.source} (nodes x GPUs per node)", job.num_gpus),
                              (f"{log.source} ('using world size')", log.world_size)) if v is not None}
    if not said:
        raise JobArgsError("GPU count unknown: neither the job configuration nor the log states it; pass --gpus N")
    if len(set(said.values())) > 1:
        raise JobArgsError("GPU counts disagree: " + ", ".join(f"{k} says {v}" for k, v in said.items())
                           + "; pass the count the job ran on with --gpus")
    n = next(iter(said.values()))
    mp = job.model_parallel
    if n % mp:
        p = job.plan
        raise JobArgsError(f"{n} GPUs are not a multiple of tp({p.get('tp', 1)}) * pp({p.get('pp', 1)}) * "
                           f"cp({p.get('cp', 1)}) = {mp}: the job's parallel degrees do not fit its GPU count")
    return n


def scenario_mapping(job: JobConfig, cluster: Mapping[str, Any], gpus: int, name: str) -> dict[str, Any]:
    """The scenario of a job on ``gpus`` GPUs of ``cluster`` (a cluster mapping without num_gpus)."""
    dp = gpus // job.model_parallel
    training = dict(job.training)
    if "local_batch_size" in training:  # torchtitan: per data-parallel rank
        training["global_batch_size"] = training.pop("local_batch_size") * dp
    return {"name": name, "model": job.model, "training": training,
            "cluster": {**cluster, "num_gpus": gpus}, "plan": {**job.plan, "dp": dp}}


def check_batch(job: JobConfig, log: RunLog, scenario: Mapping[str, Any]) -> None:
    """The log's global batch equals the configuration's."""
    gbs = int(scenario["training"]["global_batch_size"])
    if log.global_batch is not None and log.global_batch != gbs:
        raise JobArgsError(f"global batch size: {job.source} says {gbs}, {log.source} logs {log.global_batch}; "
                           "the arguments are not the ones this log's job ran with")


def check_peak(log: RunLog, sc: Scenario) -> None:
    """The log's own TFLOP/s per GPU cannot exceed the cluster GPU's dense peak at the job's precision."""
    reported = [s.tflops_per_gpu for s in log.steps if s.tflops_per_gpu]
    if not reported:
        return
    acc = sc.cluster.accelerator
    peak = acc.peak(sc.training.precision) / 1e12
    top = max(reported)
    if top > peak:
        raise JobArgsError(f"{log.source} reports {top:.1f} TFLOP/s per GPU, above the {peak:.0f} TFLOP/s "
                           f"{sc.training.precision} peak of {acc.name} ({sc.cluster.name}): the job did not run on "
                           "this cluster's GPUs or at this precision; check --cluster and the job's precision settings")


def _shard_within_node(data: dict[str, Any], sc: Scenario) -> dict[str, Any]:
    """FSDP HYBRID_SHARD shards inside a node: dp_shard = GPUs per node / (tp x cp), as ``validate_rules``."""
    shard = max(sc.cluster.gpus_per_node // (sc.plan.tp * sc.plan.cp), 1)
    return {**data, "plan": {**data["plan"], "dp_shard": shard}}


def check_device(log: RunLog, sc: Scenario) -> None:
    """The GPU the log names (torchtitan's ``CUDA capacity:`` line) is the cluster's, both read by
    ``topologies.accelerators.normalise_gpu`` (the spellings of the published rows)."""
    if log.device_name is None:
        return
    try:
        logged = normalise_gpu(log.device_name)
    except TopologyError:
        raise JobArgsError(f"{log.source}: the log's GPU {log.device_name!r} is not a known part; "
                           "add its spelling to topologies.accelerators.GPU_SPELLINGS") from None
    acc = sc.cluster.accelerator
    if logged != normalise_gpu(acc.name):
        raise JobArgsError(f"{log.source} ran on {log.device_name!r} ({logged}), but --cluster {sc.cluster.name} has "
                           f"{acc.name}: pass the cluster preset of the GPUs the job ran on")


def check_nan(log: RunLog, drop_nan: bool) -> None:
    """A log with NaN-loss steps is refused unless ``drop_nan`` (then they are left out, and recorded)."""
    bad = [s for s in log.steps if "nan" in s.marks]
    if bad and not drop_nan:
        first = bad[0]
        raise RunLogError(f"log {log.source}: {len(bad)} record(s) with NaN loss or NaN iterations, first at step "
                          f"{first.step} (line {first.line}); the run diverged or skipped updates there: cut the log "
                          "before it, or pass --drop-nan to leave those records out of the step statistics")


def import_run(job_path: str | os.PathLike[str], log_path: str | os.PathLike[str], *, cluster: Mapping[str, Any],
               gpus: int | None = None, family: str | None = None, warmup: int | None = None,
               overrides: Sequence[str] = (), drop_nan: bool = False, name: str | None = None) -> tuple[ImportedRun, Scenario]:
    """Read, cross-check and summarise one run; raises before anything is written."""
    job = read_job(Path(job_path))
    run_name = name or Path(log_path).stem
    if job.framework == "torchtitan" and gpus is None and job.num_gpus is None:
        raise JobArgsError(f"GPU count unknown: {job.source} does not state it and torchtitan's log does not print it "
                           "(its tps is per GPU); pass --gpus N")
    log = read_log(Path(log_path), framework=_log_framework(job), tokens_per_gpu_step=_tokens_per_gpu_step(job, gpus))
    n = resolve_gpus(job, log, gpus)
    data = apply_overrides(scenario_mapping(job, cluster, n, run_name), list(overrides))
    sc = scenario_from_dict(data, base_dir=Path(job_path).parent, name=run_name)
    if job.shard_within_node and sc.plan.fsdp == "hybrid" and sc.plan.dp_shard is None:
        data = _shard_within_node(data, sc)
        sc = scenario_from_dict(data, base_dir=Path(job_path).parent, name=run_name)
    check_device(log, sc)
    check_batch(job, log, data)
    check_peak(log, sc)
    check_nan(log, drop_nan)
    stats = steady_state(log, warmup)
    slow = slow_rank(Path(log_path).read_text(errors="replace"), pp=sc.plan.pp, gpus_per_node=sc.cluster.gpus_per_node)
    prov = {"job": job.source, "log": log.source, "num_gpus": n, "checkpoint_interval": job.checkpoint_interval,
            "eval_interval": job.eval_interval, "checkpoint_seconds": list(log.checkpoint_seconds),
            "ignored": list(job.ignored), "notes": list(job.notes + log.notes), "longrun": longrun_inputs(log),
            "slow_rank": None if slow is None else {"rank": slow.rank, "node": slow.node, "slower": slow.slower,
                                                     "node_ranks": list(slow.node_ranks), "text": slow.describe()}}
    run = ImportedRun(name=run_name, family=family or sc.model.name, scenario=data, framework=log.framework,
                      stats=stats, steps=tuple((s.step, s.time_s, s.span, s.marks) for s in log.steps), provenance=prov)
    return run, sc


def longrun_inputs(log: RunLog) -> dict[str, Any] | None:
    """What the log saw of interruptions, in ``clustersim goodput``'s terms (None without timestamps)."""
    seen = interruptions(log)
    if seen is None:
        return None
    return {"interruptions": seen.count, "hours": seen.hours, "mtbf_hours": seen.mtbf_hours,
            "restart_min": None if seen.restart_s is None else seen.restart_s / 60.0, "lost_steps": seen.lost_steps,
            "checkpoint_write_s": sorted(log.checkpoint_seconds)[len(log.checkpoint_seconds) // 2] if log.checkpoint_seconds else None}


@dataclass(frozen=True, kw_only=True)
class MeasuredLongRun:
    """What ``clustersim goodput --run`` takes from an imported run's run.json."""

    source: str
    """Path of the run.json."""
    step_time_s: float
    """The steady-state median step time the log measured."""
    mtbf_hours: float | None
    """Hours per interruption the log saw (None: no interruption in the log)."""
    restart_min: float | None
    """Minutes from the last record before a restart to the first after it (detection included)."""
    hours: float | None
    """Hours the log spans (None without timestamps)."""


def measured_long_run(path: str | os.PathLike[str]) -> MeasuredLongRun:
    """The measured step and interruptions of an imported run (its folder or its run.json)."""
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    if not (folder / "run.json").is_file():
        raise RunLogError(f"--run {p}: no run.json there; pass a folder written by `clustersim import-run`")
    doc, _ = load_run(folder)
    seen = doc.get("longrun") or {}
    return MeasuredLongRun(source=str(folder / "run.json"), step_time_s=float(doc["steady"]["median_s"]),
                           mtbf_hours=seen.get("mtbf_hours"), restart_min=seen.get("restart_min"),
                           hours=seen.get("hours"))


def _log_framework(job: JobConfig) -> str | None:
    """NeMo 2 / Megatron-Bridge YAML jobs print Megatron lines; detection decides between them."""
    return {"torchtitan": "torchtitan", "composer": "composer"}.get(job.framework)


def _tokens_per_gpu_step(job: JobConfig, gpus: int | None) -> float | None:
    """batch x seq_len / GPUs of a torchtitan job (what its tps divides), when the GPU count is known."""
    if job.framework != "torchtitan":
        return None
    n = gpus or job.num_gpus
    if n is None:
        return None
    dp = n // job.model_parallel
    gbs = job.training.get("global_batch_size") or job.training["local_batch_size"] * dp
    return float(gbs * job.training["seq_len"]) / n


def write_run(run: ImportedRun, out_dir: str | os.PathLike[str]) -> Path:
    """scenario.yaml then run.json into ``out_dir`` (each atomic; run.json last marks it complete)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "scenario.yaml", yaml.safe_dump(run.scenario, sort_keys=False))
    write_json(out / "run.json", run.to_json())
    return out


def load_run(folder: str | os.PathLike[str]) -> tuple[dict[str, Any], Path]:
    """(run.json, scenario path) of an imported run folder."""
    p = Path(folder)
    doc = json.loads((p / "run.json").read_text())
    if doc.get("format") != RUN_FORMAT:
        raise RunLogError(f"{p / 'run.json'}: format {doc.get('format')!r}, expected {RUN_FORMAT!r}; re-import the run")
    return doc, p / "scenario.yaml"


def run_folders(root: str | os.PathLike[str]) -> list[Path]:
    """Every imported run under ``root`` (folders holding a run.json), sorted."""
    p = Path(root)
    if not p.is_dir():
        raise RunLogError(f"--runs {p}: not a folder; pass the folder that holds the imported runs")
    return sorted(q.parent for q in p.rglob("run.json"))


# ---------------------------------------------------------------- the torch backend as a source

def plan_family(record: StepRecord) -> str:
    """The family of a backend plan: its parallelism kind (ddp, fsdp, tp, pp, or a mix)."""
    p = record.plan
    kinds = [k for k, on in (("fsdp", p.data_parallel == "fsdp" and p.dp > 1), ("ddp", p.data_parallel == "ddp" and p.dp > 1),
                             ("tp", p.tp > 1), ("pp", p.pp > 1)) if on]
    return "+".join(kinds) or "single"


def torch_run(record: StepRecord, profile_file: str) -> ImportedRun:
    """One measured backend plan as an imported run (its timed steps are the log)."""
    plan = {k: v for k, v in asdict(parallel_plan(record.plan, overlap=record.device != "cpu")).items() if v is not None}
    training = asdict(training_spec(record.model, record.plan))
    scenario: dict[str, Any] = {"name": record.plan.name, "model": asdict(model_spec(record.model)), "training": training,
                "cluster": {"preset": "cpu-loopback", "num_gpus": record.world_size},
                "plan": plan, "calibration": profile_file}
    times = record.step_times
    stats = StepStats(median_s=record.median, p99_s=float(sorted(times)[-1]), mean_s=sum(times) / len(times),
                      records=len(times), warmup_steps=0, marked={})
    prov = {"job": "clustersim calibrate measure", "log": "steps.json", "num_gpus": record.world_size,
            "checkpoint_interval": None, "eval_interval": None, "checkpoint_seconds": [], "ignored": [],
            "notes": ["timed steps of the torch backend (its warm-up steps are untimed); the slowest rank per step",
                      f"profile {profile_file}: fitted on this world size's microbenchmarks only"]}
    return ImportedRun(name=record.plan.name, family=plan_family(record), scenario=scenario, framework="torch-backend",
                       stats=stats, steps=tuple((k + 1, t, 1, ()) for k, t in enumerate(times)), provenance=prov)


def import_measured(folder: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Every plan of a ``calibrate measure`` folder -> one run folder under ``out_dir`` (profiles per world size)."""
    records = load_steps(folder)
    reports = fit_profiles(folder)
    written = []
    for rec in records:
        world = min((w for w in reports if w >= rec.world_size), default=max(reports))
        dest = Path(out_dir) / rec.plan.name
        dest.mkdir(parents=True, exist_ok=True)
        save_profile(reports[world].profile, dest / "profile.yaml")
        written.append(write_run(torch_run(rec, "profile.yaml"), dest))
    return written
