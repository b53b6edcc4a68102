"""Scenarios: the YAML a user writes (presets by name or inline specs) and its overrides.

Owns the scenario schema (pydantic models of the plan, training, model overrides, cluster and
the long-run options: a type and a range for every field), parsing and validating a scenario
file into typed values (model, training, cluster, plan, optional calibration profile, mode,
seed), and the one override implementation that ``--set`` and sweeps share (``with_override``).
Every error names the file or section, the field, the value and the valid range. A scenario
mapping looks like::

    model: llama3-70b            # a preset name, or a mapping of ModelSpec fields
    training: {seq_len: 8192, global_batch_size: 1024, precision: bf16}
    cluster: {preset: dgx-h100, num_gpus: 1024}   # plus unit-suffixed overrides
    plan: {tp: 8, pp: 4, dp: 32, micro_batch: 1, schedule: 1f1b}
    calibration: profile.yaml    # optional
    mode: symmetric              # or full
    seed: 0

The models check types and ranges field by field (integers are never bools, floats or strings;
flags are booleans; physical values finite and positive; counts bounded); the rules that tie
fields together (degrees dividing the model, the world size, memory) stay with the plan checks
and the partition. ``scenario_json_schema()`` is what ``clustersim schema`` prints. It does not
simulate anything.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from clustersim.simulator.bounds import check_gpus, check_scenario_step
from clustersim.simulator.profile import CalibrationProfile, load_profile, machine_cluster
from clustersim.simulator.errors import ScenarioError
from clustersim.simulator.plan import BUCKET_RANGE, ParallelPlan, plan_from_mapping
from clustersim.topologies import Cluster, load_cluster
from clustersim.topologies import config as cluster_keys
from clustersim.workloads import ModelSpec, TrainingSpec, get_model, load_model
from clustersim.workloads import model as model_fields
from clustersim.workloads import training as training_fields

ScenarioMode = Literal["symmetric", "full"]
"""How the engine runs the scenario (``simulate``'s ``mode``)."""
TOP_KEYS = ("name", "model", "training", "cluster", "plan", "calibration", "mode", "seed")
MAX_GPUS = cluster_keys.MAX_GPUS
MAX_LAYERS = model_fields.SIZE_LIMITS["num_layers"]
MAX_SEED = 2**63 - 1

Bounds = tuple[float, float, bool]
"""(low, high, low is open): the closed range [low, high], or (low, high] when the flag is set."""

PLAN_BOUNDS: Mapping[str, Bounds] = {
    **{axis: (1, MAX_GPUS, False) for axis in ("tp", "pp", "dp", "cp", "ep", "etp", "dp_shard")},
    "vpp": (1, MAX_LAYERS, False), "micro_batch": (1, training_fields.MAX_GLOBAL_BATCH, False),
    "recompute_layers": (0, MAX_LAYERS, False), "cpu_offloading_num_layers": (0, MAX_LAYERS, False),
    "zero": (0, 3, False), "grad_dtype_bytes": (2, 4, False), "zero_hpz_partition_size": (1, MAX_GPUS, False),
    "bucket_size": (*BUCKET_RANGE, False), "first_bucket_size": (0.0, BUCKET_RANGE[1], False),
    "tp_comm_overlap": (0.0, 1.0, False),
    "ep_comm_overlap": (0.0, 1.0, False), "expert_imbalance": (1.0, 1024.0, False),
}
TRAINING_BOUNDS: Mapping[str, Bounds] = {
    "seq_len": (1, training_fields.MAX_SEQ_LEN, False),
    "global_batch_size": (1, training_fields.MAX_GLOBAL_BATCH, False),
}
MODEL_BOUNDS: Mapping[str, Bounds] = {
    name: (0, model_fields.SIZE_LIMITS.get(name, model_fields.MAX_SIZE), False)
    for name, kind, _ in model_fields.field_kinds() if kind is int
}
HINTS: dict[str, dict[str, str]] = {}
"""Section -> field -> what the field must be (filled as the models are built); error text."""


class Spec(BaseModel):
    """Base of the scenario models: unknown keys and loose types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _optional(hint: object) -> tuple[object, bool]:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and type(None) in typing.get_args(hint):
        return args[0], True
    return hint, False


def _typed(hint: object, bounds: Bounds | None) -> tuple[object, str]:
    """The pydantic annotation of one dataclass field and the hint an error shows."""
    base, optional = _optional(hint)
    lo, hi, open_low = bounds if bounds else (None, None, False)
    limits: dict[str, Any] = {"gt" if open_low else "ge": lo, "le": hi} if bounds else {}
    out: Any  # a pydantic annotation (a type, Annotated[...], Optional[...]): a runtime value
    if base is int:
        out, text = Annotated[int, Field(**limits)], f"an integer in {lo:,}..{hi:,}" if bounds else "an integer"
    elif base is float:
        out = Annotated[float, Field(allow_inf_nan=False, **limits)]
        text = f"a finite number in {'(' if open_low else '['}{lo:g}, {hi:g}]" if bounds else "a finite number"
    elif base is bool:
        out, text = bool, "true or false"
    elif typing.get_origin(base) is Literal:
        out, text = base, "one of " + ", ".join(str(a) for a in typing.get_args(base))
    elif typing.get_origin(base) is tuple and typing.get_args(base)[0] is str:
        out, text = Annotated[list[str], Field(strict=False)], "a list of names"
    elif typing.get_origin(base) is tuple:
        out = Annotated[list[Annotated[int, Field(ge=1)]], Field(strict=False)]
        text = "a list of integers >= 1"
    else:
        out, text = base, "a string"
    if optional:
        return Optional[out], text + " (or null)"
    return out, text


def _from_dataclass(name: str, cls: type, bounds: Mapping[str, Bounds], *, all_optional: bool,
                    extra: Mapping[str, tuple[object, Any]] | None = None) -> type[Spec]:
    """A pydantic model with the fields of dataclass ``cls``, typed and bounded."""
    hints, section = typing.get_type_hints(cls), HINTS.setdefault(name, {})
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        annotation, section[f.name] = _typed(hints[f.name], bounds.get(f.name))
        if all_optional or f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            default: Any = None if all_optional else ...
            annotation = Optional[annotation] if all_optional else annotation
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = list(f.default) if isinstance(f.default, tuple) else f.default
        fields[f.name] = (annotation, default)
    for key, (annotation, default) in (extra or {}).items():
        fields[key] = (annotation, default)
    return create_model(name, __base__=Spec, **fields)


PlanSpec = _from_dataclass("plan", ParallelPlan, PLAN_BOUNDS, all_optional=False)
"""The ``plan`` section: every ParallelPlan field, its type and range."""
TrainingSpecModel = _from_dataclass("training", TrainingSpec, TRAINING_BOUNDS, all_optional=False)
"""The ``training`` section."""
ModelOverrides = _from_dataclass("model", ModelSpec, MODEL_BOUNDS, all_optional=True,
                                 extra={"preset": (Optional[str], None)})
"""The ``model`` section as a mapping: a preset plus overrides, or every ModelSpec field."""
HINTS["model"]["preset"] = "a model preset name (clustersim presets)"


def _cluster_model() -> type[Spec]:
    """The ``cluster`` section from the key tables of ``topologies.config`` (one source)."""
    section = HINTS.setdefault("cluster", {})
    fields: dict[str, Any] = {"preset": (str, ...), "num_gpus": (Annotated[int, Field(ge=1, le=MAX_GPUS)], ...)}
    section.update(preset="a cluster preset name (clustersim presets)", num_gpus=f"an integer in 1..{MAX_GPUS:,}")
    for key in cluster_keys.UNIT_KEYS:
        fields[key] = (Optional[Annotated[float, Field(gt=0, le=cluster_keys.MAX_BANDWIDTH_GBPS, allow_inf_nan=False)]], None)
        section[key] = f"a finite number in (0, {cluster_keys.MAX_BANDWIDTH_GBPS:g}]"
    for key, most in cluster_keys.COUNT_KEYS.items():
        fields[key] = (Optional[Annotated[int, Field(ge=1, le=most)]], None)
        section[key] = f"an integer in 1..{most:,}"
    for key, (low, high) in cluster_keys.RATIO_KEYS.items():
        fields[key] = (Optional[Annotated[float, Field(ge=low, le=high, allow_inf_nan=False)]], None)
        section[key] = f"a finite number in [{low:g}, {high:g}]"
    for key in cluster_keys.FLAG_KEYS:
        fields[key], section[key] = (Optional[bool], None), "true or false"
    for key in cluster_keys.NAME_KEYS:
        fields[key], section[key] = (Optional[str], None), "a string"
    fields["dims"] = (Optional[Annotated[list[Annotated[int, Field(ge=1)]], Field(strict=False)]], None)
    section["dims"] = "a list of integers >= 1"
    fields["power_limit_w"] = (Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]], None)
    section["power_limit_w"] = "watts per accelerator, above its idle power and at most its TDP (topologies.power)"
    return create_model("cluster", __base__=Spec, **fields)


ClusterSpecModel = _cluster_model()
"""The ``cluster`` section: a preset, a GPU count and unit-suffixed overrides."""


class ScenarioSpec(Spec):
    """A whole scenario file (what ``clustersim schema`` prints as JSON Schema)."""

    name: Optional[str] = None
    model: str | ModelOverrides  # type: ignore[valid-type]  # a create_model class: mypy sees a variable, not a type
    training: TrainingSpecModel  # type: ignore[valid-type]  # a create_model class: mypy sees a variable, not a type
    cluster: ClusterSpecModel  # type: ignore[valid-type]  # a create_model class: mypy sees a variable, not a type
    plan: PlanSpec  # type: ignore[valid-type]  # a create_model class: mypy sees a variable, not a type
    calibration: Optional[str | dict[str, Any]] = None
    mode: ScenarioMode = "symmetric"
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0


class LongRunOptions(Spec):
    """The options of a long run (``clustersim goodput``): days, failure rates, recovery times.

    MTBFs are in hours (None: not given), times in minutes unless named ``_hours``, bandwidths
    in Gbit/s. The work they imply (failure draws) is bounded separately (``bounds``).
    """

    days: Annotated[float, Field(gt=0, le=3650, allow_inf_nan=False)] = 30.0
    mtbf_hours: Optional[Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]] = None
    mtbf_gpu_hours: Optional[Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]] = None
    mtbf_node_hours: Optional[Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]] = None
    mtbf_link_hours: Optional[Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]] = None
    distribution: Literal["exponential", "weibull"] = "exponential"
    weibull_shape: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = 1.0
    storage_gbps: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)] = 16000.0
    node_write_gbps: Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)] = 200.0
    detection_min: Annotated[float, Field(ge=0, le=1e5, allow_inf_nan=False)] = 2.0
    restart_min: Annotated[float, Field(ge=0, le=1e5, allow_inf_nan=False)] = 10.0
    reschedule_min: Annotated[float, Field(ge=0, le=1e5, allow_inf_nan=False)] = 5.0
    spare_nodes: Annotated[int, Field(ge=0, le=MAX_GPUS)] = 0
    repair_hours: Annotated[float, Field(ge=0, le=1e5, allow_inf_nan=False)] = 0.0
    repetitions: Annotated[int, Field(ge=1, le=100_000)] = 100


HINTS["goodput"] = {
    "days": "a number of days in (0, 3650]", "distribution": "one of exponential, weibull",
    **{k: "a number of hours in (0, 1e9]" if k == "mtbf_hours" else "a number of hours in (0, 1e12]"
       for k in ("mtbf_hours", "mtbf_gpu_hours", "mtbf_node_hours", "mtbf_link_hours")},
    "weibull_shape": "a number in (0, 100]", "storage_gbps": "Gbit/s in (0, 1e9]", "node_write_gbps": "Gbit/s in (0, 1e7]",
    **{k: "minutes in [0, 1e5]" for k in ("detection_min", "restart_min", "reschedule_min")},
    "spare_nodes": f"an integer in 0..{MAX_GPUS:,}", "repair_hours": "hours in [0, 1e5]",
    "repetitions": "an integer in 1..100,000",
}


def validate_options(spec: type[Spec], options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Command-line options checked by a Spec model; errors name the option (``--days``)."""
    try:
        return validate_section(spec, options, where)
    except ScenarioError as exc:
        text = str(exc).removeprefix(f"[{exc.stage}] ").removeprefix(f"{where}.")
        key = text.split(" ", 1)[0]
        raise ScenarioError(f"--{key.replace('_', '-')} {text.split(' ', 1)[1]}") from None


HINTS["scenario"] = {"name": "a string", "mode": "one of symmetric, full", "seed": f"an integer in 0..{MAX_SEED}",
                     "calibration": "a profile path or mapping"}


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (draft 2020-12, as pydantic writes it), each plan, training
    and model field described by its dataclass docstring (``attribute_docs``), for editors to show."""
    schema = ScenarioSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "clustersim scenario"
    for section, cls in (("plan", ParallelPlan), ("training", TrainingSpec), ("model", ModelSpec)):
        docs = attribute_docs(cls)
        for name, prop in schema["$defs"][section]["properties"].items():
            if name in docs:
                prop["description"] = docs[name]
    return schema


def attribute_docs(cls: type) -> dict[str, str]:
    """Field -> the docstring under it in the dataclass ``cls``'s source (the attribute-docstring
    convention every ParallelPlan, TrainingSpec and ModelSpec field follows)."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    out: dict[str, str] = {}
    stmts = body.body if isinstance(body, ast.ClassDef) else []
    for field_, doc in zip(stmts, stmts[1:]):
        if (isinstance(field_, ast.AnnAssign) and isinstance(field_.target, ast.Name) and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            out[field_.target.id] = inspect.cleandoc(doc.value.value)
    return out


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs."""

    name: str
    model: ModelSpec
    training: TrainingSpec
    cluster: Cluster
    plan: ParallelPlan
    profile: CalibrationProfile | None
    mode: ScenarioMode
    seed: int


def _shown(value: Any) -> str:
    """A value as the user wrote it (YAML-ish: null, true, .nan)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(value)


def validate_section(spec: type[Spec], data: Any, where: str) -> dict[str, Any]:
    """The fields of ``data`` that ``spec`` accepts, as plain values; else one ScenarioError
    naming ``where.field``, the value and what it must be (the first problem only)."""
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where} = {_shown(data)}: must be a mapping of fields, e.g. {_EXAMPLES[where]}")
    unknown = sorted(str(k) for k in set(data) - set(spec.model_fields))
    if unknown:
        raise ScenarioError(f"{where}: unknown field(s) {unknown}; valid fields: {sorted(spec.model_fields)}")
    try:
        return spec.model_validate(dict(data)).model_dump(exclude_unset=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == "missing":
            raise ScenarioError(f"{where}: {key} is missing; add it ({HINTS[where].get(key, 'required')})") from None
        value = data.get(key, error.get("input"))
        hint = HINTS[where].get(key, "valid")
        verb = "use" if hint.startswith("one of") else "must be"
        label = key if where == "scenario" else f"{where}.{key}"
        raise ScenarioError(f"{label} = {_shown(value)}: {verb} {hint}") from None


_EXAMPLES = {"plan": "{tp: 8, pp: 2, dp: 4}", "training": "{seq_len: 4096, global_batch_size: 512}",
             "cluster": "{preset: dgx-h100, num_gpus: 64}", "model": "{preset: llama3-8b, num_layers: 16}"}


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from ``path``; missing, malformed or non-mapping files are ScenarioErrors."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"scenario file {p} does not exist; pass the path of a YAML file")
    try:
        data = yaml.safe_load(p.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ScenarioError(f"{p} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{p} must be a YAML mapping with keys {list(TOP_KEYS)}")
    return data


# ---------------------------------------------------------------- overrides (--set and sweeps)

def with_override(mapping: Mapping[str, Any], dotted_key: str, value: Any, _above: str = "") -> dict[str, Any]:
    """A copy of ``mapping`` with ``value`` at ``dotted_key``; never mutates its input.

    A mapping over a mapping merges key by key; anything else replaces. A preset name under a
    dotted key becomes ``{preset: name}`` (``model.num_layers=2`` over ``model: llama3-8b``).
    This is the one override rule: ``--set`` and sweep grids both use it.
    """
    head, _, rest = dotted_key.partition(".")
    if not head or (rest == "" and dotted_key.endswith(".")):
        raise ScenarioError(f"override key {dotted_key!r} has an empty part; write e.g. plan.tp")
    result = dict(mapping)
    current = mapping.get(head)
    if rest:
        inner = {"preset": current} if isinstance(current, str) else current
        if inner is not None and not isinstance(inner, Mapping):
            raise ScenarioError(f"override {_above}{dotted_key}: {_above}{head} = {_shown(current)} is not a "
                                f"mapping, so it has no field {rest.split('.')[0]!r}; set {_above}{head} itself")
        result[head] = with_override(inner or {}, rest, value, f"{_above}{head}.")
    elif isinstance(current, Mapping) and isinstance(value, Mapping):
        result[head] = _deep_merge(current, value)
    else:
        result[head] = value
    return result


def _deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: base with update's keys merged in, recursively where both sides are mappings."""
    result = dict(base)
    for key, value in update.items():
        current = result.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            result[key] = _deep_merge(current, value)
        else:
            result[key] = value
    return result


def parse_override(item: str) -> tuple[str, Any]:
    """``"plan.tp=4"`` -> ``("plan.tp", 4)``: the value is a YAML scalar or flow collection."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ScenarioError(f"--set {item!r} must look like plan.tp=4 (a dotted field, '=', a value)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ScenarioError(f"--set {key}={raw}: the value is not valid YAML; quote strings, write lists as [1, 2]") from None
    return key.strip(), value


def apply_overrides(data: Mapping[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with ``--set`` items (``a.b=value``) applied by ``with_override``."""
    out = dict(data)
    for item in overrides:
        key, value = parse_override(item)
        out = with_override(out, key, value)
    return out


# ---------------------------------------------------------------- building a scenario

def load_scenario(path: str | Path, overrides: list[str] | None = None, *, force: bool = False) -> Scenario:
    """Read, override and validate a scenario file (``force`` lifts the work limits)."""
    data = apply_overrides(read_yaml(path), overrides or [])
    return scenario_from_dict(data, base_dir=Path(path).parent, name=Path(path).stem, force=force)


def scenario_from_dict(data: Mapping[str, Any], base_dir: Path | None = None, name: str = "scenario", *,
                       force: bool = False) -> Scenario:
    """Build a scenario from a mapping (what a YAML file holds), checking every field."""
    if not isinstance(data, Mapping):
        raise ScenarioError(f"a scenario must be a mapping with keys {list(TOP_KEYS)}")
    unknown = sorted(str(k) for k in set(data) - set(TOP_KEYS))
    if unknown:
        raise ScenarioError(f"unknown top-level key(s) {unknown}; valid keys: {list(TOP_KEYS)}")
    for key in ("model", "training", "cluster", "plan"):
        if key not in data:
            raise ScenarioError(f"scenario lacks '{key}'; add it (see README 'Scenario format')")
    top = _top_fields(data)
    profile = _profile(data.get("calibration"), base_dir)
    model = _model(data["model"], base_dir)
    training = TrainingSpec(**validate_section(TrainingSpecModel, data["training"], "training"))
    plan = plan_from_mapping(validate_section(PlanSpec, data["plan"], "plan"))
    mode: ScenarioMode = "full" if top.get("mode") == "full" else "symmetric"  # _TopSpec checked it
    check_scenario_step(model, training, plan, mode, force)
    cluster = _cluster(data["cluster"], profile, force)
    return Scenario(name=str(top.get("name") or name), model=model, training=training, cluster=cluster,
                    plan=plan, profile=profile, mode=mode, seed=int(top.get("seed", 0)))


_TOP_FIELDS: dict[str, Any] = {k: (ScenarioSpec.model_fields[k].annotation, ScenarioSpec.model_fields[k])
                                for k in ("name", "mode", "seed")}
_TopSpec = create_model("scenario", __base__=Spec, **_TOP_FIELDS)
"""The top-level scalars of a scenario (name, mode, seed), as ScenarioSpec declares them."""


def _top_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """name, mode and seed, checked by the ScenarioSpec fields."""
    return validate_section(_TopSpec, {k: data[k] for k in ("name", "mode", "seed") if k in data}, "scenario")


def _model(spec: Any, base_dir: Path | None) -> ModelSpec:
    if isinstance(spec, str):
        candidate = (base_dir or Path(".")) / spec
        return load_model(candidate) if candidate.suffix in (".yaml", ".yml") else get_model(spec)
    return load_model(validate_section(ModelOverrides, spec, "model"))


def _cluster(spec: Any, profile: CalibrationProfile | None, force: bool) -> Cluster:
    """The cluster; "this machine" (cpu-loopback) takes its figures from a fitted profile."""
    fields = validate_section(ClusterSpecModel, spec, "cluster")
    check_gpus(fields["num_gpus"], force)
    cluster = load_cluster(fields)
    if cluster.name == "cpu-loopback" and profile is not None and profile.machine:
        return machine_cluster(profile, cluster.num_gpus)
    return cluster


def _profile(spec: Any, base_dir: Path | None) -> CalibrationProfile | None:
    if spec is None:
        return None
    if isinstance(spec, dict):
        return load_profile(spec)
    if not isinstance(spec, str):
        raise ScenarioError(f"calibration = {_shown(spec)}: must be a profile YAML path or a mapping")
    path = Path(spec)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    return load_profile(path)
