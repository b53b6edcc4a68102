"""Scenarios: the YAML a user writes (presets by name or inline specs) and ``--set`` overrides.

Owns parsing and validation of a scenario file into typed values (model, training, cluster,
plan, optional calibration profile, mode, seed); every error names the file, the field and the
fix. A scenario mapping looks like::

    model: llama3-70b            # a preset name, or a mapping of ModelSpec fields
    training: {seq_len: 8192, global_batch_size: 1024, precision: bf16}
    cluster: {preset: dgx-h100, num_gpus: 1024}   # plus unit-suffixed overrides
    plan: {tp: 8, pp: 4, dp: 32, micro_batch: 1, schedule: 1f1b}
    calibration: profile.yaml    # optional
    mode: symmetric              # or full
    seed: 0

It does not simulate anything.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from clustersim.simulator.calibration.profile import CalibrationProfile, load_profile, machine_cluster
from clustersim.simulator.errors import ScenarioError
from clustersim.simulator.plan.plan import ParallelPlan, plan_from_mapping
from clustersim.topologies import Cluster, load_cluster
from clustersim.workloads import ModelSpec, TrainingSpec, get_model, load_model

TOP_KEYS = ("name", "model", "training", "cluster", "plan", "calibration", "mode", "seed")


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs."""

    name: str
    model: ModelSpec
    training: TrainingSpec
    cluster: Cluster
    plan: ParallelPlan
    profile: CalibrationProfile | None
    mode: str
    seed: int


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from ``path``; missing, malformed or non-mapping files are ScenarioErrors."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"scenario file {p} does not exist; pass the path of a YAML file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ScenarioError(f"{p} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{p} must be a YAML mapping with keys {list(TOP_KEYS)}")
    return data


def apply_overrides(data: Mapping[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with ``a.b=value`` overrides applied (values parsed as YAML scalars)."""
    out = copy.deepcopy(dict(data))
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ScenarioError(f"--set {item!r} must look like plan.tp=4")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {"preset": node[part]} if isinstance(node.get(part), str) else {}
            node = node[part]
        node[parts[-1]] = yaml.safe_load(raw)
    return out


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override and validate a scenario file."""
    data = apply_overrides(read_yaml(path), overrides or [])
    return scenario_from_dict(data, base_dir=Path(path).parent, name=Path(path).stem)


def scenario_from_dict(data: Mapping[str, Any], base_dir: Path | None = None, name: str = "scenario") -> Scenario:
    """Build a scenario from a mapping (what a YAML file holds)."""
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise ScenarioError(f"unknown top-level key(s) {unknown}; valid keys: {list(TOP_KEYS)}")
    for key in ("model", "training", "cluster", "plan"):
        if key not in data:
            raise ScenarioError(f"scenario lacks '{key}'; add it (see README 'Scenario format')")
    mode = str(data.get("mode", "symmetric"))
    if mode not in ("symmetric", "full"):
        raise ScenarioError(f"mode = {mode!r}; use symmetric or full")
    profile = _profile(data.get("calibration"), base_dir)
    return Scenario(
        name=str(data.get("name", name)),
        model=_model(data["model"], base_dir),
        training=_training(data["training"]),
        cluster=_cluster(data["cluster"], profile),
        plan=_plan(data["plan"]),
        profile=profile,
        mode=mode,
        seed=int(data.get("seed", 0)),
    )


def _model(spec: Any, base_dir: Path | None) -> ModelSpec:
    if isinstance(spec, str):
        candidate = (base_dir or Path(".")) / spec
        return load_model(candidate) if candidate.suffix in (".yaml", ".yml") else get_model(spec)
    if isinstance(spec, dict):
        if "preset" in spec:
            base = get_model(str(spec["preset"]))
            extra = {k: v for k, v in spec.items() if k != "preset"}
            valid = {f.name for f in fields(ModelSpec)}
            bad = sorted(set(extra) - valid)
            if bad:
                raise ScenarioError(f"model: unknown field(s) {bad}; valid: {sorted(valid)}")
            return ModelSpec(**{**{f.name: getattr(base, f.name) for f in fields(ModelSpec)}, **extra})
        return load_model(spec)
    raise ScenarioError("model must be a preset name or a mapping of model fields")


def _training(spec: Any) -> TrainingSpec:
    if not isinstance(spec, dict):
        raise ScenarioError("training must be a mapping like {seq_len: 4096, global_batch_size: 512}")
    valid = {f.name for f in fields(TrainingSpec)}
    bad = sorted(set(spec) - valid)
    if bad:
        raise ScenarioError(f"training: unknown field(s) {bad}; valid: {sorted(valid)}")
    try:
        return TrainingSpec(**spec)
    except TypeError as exc:
        raise ScenarioError(f"training: {exc}") from None


def _cluster(spec: Any, profile: CalibrationProfile | None) -> Cluster:
    """The cluster; "this machine" (cpu-loopback) takes its figures from a fitted profile."""
    if not isinstance(spec, dict):
        raise ScenarioError("cluster must be a mapping like {preset: dgx-h100, num_gpus: 64}")
    cluster = load_cluster(spec)
    if cluster.name == "cpu-loopback" and profile is not None and profile.machine:
        return machine_cluster(profile, cluster.num_gpus)
    return cluster


def _plan(spec: Any) -> ParallelPlan:
    if not isinstance(spec, dict):
        raise ScenarioError("plan must be a mapping like {tp: 8, pp: 2, dp: 4}")
    return plan_from_mapping(spec)


def _profile(spec: Any, base_dir: Path | None) -> CalibrationProfile | None:
    if spec is None:
        return None
    if isinstance(spec, dict):
        return load_profile(spec)
    path = Path(spec)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    return load_profile(path)
