"""Sweep files: a grid over scenario fields, expanded into points with stable ids.

A sweep file (YAML) reads::

    base: scenarios/llama3_8b.yaml      # or an inline scenario mapping; a path is relative
    grid:                               # to the sweep file
      cluster.num_gpus: [64, 128, 256]  # dotted key -> list of values (outer product)
      model: [llama3-8b, llama3-70b]
      cluster.num_gpus,plan.dp: [[64, 8], [128, 16]]   # comma-joined keys vary together (zip)
    plan: fixed                         # or best: search for the best plan at every point
    seed: 0

A point is the base mapping with the overrides applied (a mapping over a mapping merges key by
key; anything else replaces), plus ``plan_mode`` ("fixed"/"best") and ``seed`` at the top level.
Its ``point_id`` is the first 12 hex digits of the sha256 of its canonical JSON, so the same point
has the same id in every run and on every machine.

Owns: the sweep file (``load_sweep`` -> ``SweepSpec``), grid expansion (``expand_points``) and
point ids (``point_id``). Does not own: the parts store and the result tables
(``clustersim.simulator.sweep.sweep_store``) nor running the points (``clustersim.simulator.sweep.sweep``).
It loads no pandas, so it sits behind the room's face.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from clustersim.simulator.scenario import with_override
from clustersim.simulator.sweep.executors import SweepError, Task

PlanMode = Literal["fixed", "best"]
SWEEP_KEYS = ("base", "grid", "plan", "seed", "name")
"""Top-level keys a sweep file may have."""
PATH_KEYS = ("model", "calibration")
"""Scenario keys whose value may be a YAML file path, relative to the scenario file."""


@dataclass(frozen=True, kw_only=True)
class GridAxis:
    """One axis of the grid: one or more dotted keys that take their values together."""

    keys: tuple[str, ...]
    """Dotted paths into the scenario mapping, e.g. ("cluster.num_gpus",)."""
    values: tuple[tuple[object, ...], ...]
    """One tuple per grid step, aligned with ``keys``."""


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """A parsed sweep file. Never mutated; points are built as fresh dicts."""

    base: Mapping[str, object]
    """The scenario mapping every point starts from."""
    axes: tuple[GridAxis, ...]
    """Grid axes; the outer product of their steps, first axis outermost."""
    plan_mode: PlanMode = "fixed"
    """"fixed" simulates the plan in the point; "best" searches for the best plan per point."""
    seed: int | None = None
    """Seed written into every point; None keeps the base scenario's own (or 0)."""
    name: str = "sweep"
    """Label for progress and reports."""


# ---------------------------------------------------------------- sweep file and grid

def load_sweep(source: str | Path | Mapping[str, object]) -> SweepSpec:
    """Parse a sweep YAML file (or an already-loaded mapping) into a SweepSpec."""
    if isinstance(source, Mapping):
        return _spec_from_mapping(source, Path.cwd())
    path = Path(source)
    return _spec_from_mapping(_read_yaml(path, "sweep file"), path.parent)


def _read_yaml(path: Path, what: str) -> Mapping[str, object]:
    """A YAML mapping from a file, or a SweepError naming the file."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SweepError(f"{what} {path}: cannot read ({exc.strerror}); check the path") from exc
    except yaml.YAMLError as exc:
        raise SweepError(f"{what} {path}: malformed YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, Mapping):
        raise SweepError(f"{what} {path}: expected a mapping at the top, got {type(data).__name__}")
    return data


def _spec_from_mapping(data: Mapping[str, object], folder: Path) -> SweepSpec:
    """Validate the top-level keys and build the spec; relative base paths resolve in folder."""
    unknown = sorted(set(data) - set(SWEEP_KEYS))
    if unknown:
        raise SweepError(f"sweep key(s) {unknown}: unknown; valid keys are {list(SWEEP_KEYS)}")
    base = data.get("base", {})
    if isinstance(base, (str, Path)):
        folder = (folder / base).parent
        base = _read_yaml(folder / Path(base).name, "base scenario")
    if not isinstance(base, Mapping):
        raise SweepError(f"base: expected a scenario mapping or a path, got {type(base).__name__}")
    base = _absolute_paths(base, folder)
    plan_mode = data.get("plan", "fixed")
    if plan_mode not in ("fixed", "best"):
        raise SweepError(f"plan: {plan_mode!r} is not valid; use 'fixed' or 'best'")
    seed = data.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise SweepError(f"seed: {seed!r} is not an integer; use e.g. seed: 0")
    return SweepSpec(base=base, axes=_parse_grid(data.get("grid") or {}), plan_mode=plan_mode,
                     seed=seed, name=str(data.get("name", "sweep")))


def _absolute_paths(base: Mapping[str, object], folder: Path) -> dict[str, object]:
    """Copy of a scenario whose relative YAML paths (model, calibration) are made absolute
    from the folder of the file that holds them, so they resolve wherever the point runs."""
    result = dict(base)
    for key in PATH_KEYS:
        value = result.get(key)
        if isinstance(value, str) and value.endswith((".yaml", ".yml")):
            result[key] = str((folder / value).resolve())
    return result


def _parse_grid(grid: object) -> tuple[GridAxis, ...]:
    """Grid mapping -> axes; "a.b,c.d" keys zip their per-step value lists."""
    if not isinstance(grid, Mapping):
        raise SweepError(f"grid: expected a mapping of dotted key -> list, got {type(grid).__name__}")
    return tuple(_parse_axis(str(key), values) for key, values in grid.items())


def _parse_axis(key: str, values: object) -> GridAxis:
    """One grid entry -> GridAxis, checking it is a non-empty list of the right arity."""
    keys = tuple(part.strip() for part in key.split(","))
    if not isinstance(values, list) or not values:
        raise SweepError(f"grid.{key}: expected a non-empty list of values, got {values!r}")
    if len(keys) == 1:
        return GridAxis(keys=keys, values=tuple((value,) for value in values))
    for step in values:
        if not isinstance(step, list) or len(step) != len(keys):
            raise SweepError(f"grid.{key}: each step must list {len(keys)} values (one per key), "
                             f"got {step!r}")
    return GridAxis(keys=keys, values=tuple(tuple(step) for step in values))


def point_id(point: Mapping[str, object]) -> str:
    """Stable 12-hex-digit id: sha256 of the point's canonical JSON."""
    canonical = json.dumps(point, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def expand_points(spec: SweepSpec) -> list[Task]:
    """Every (point_id, point) of the grid in grid order, each distinct point once."""
    start: dict[str, object] = dict(spec.base)
    start["plan_mode"] = spec.plan_mode
    start["seed"] = spec.seed if spec.seed is not None else spec.base.get("seed", 0)
    tasks: dict[str, Mapping[str, object]] = {}
    for steps in itertools.product(*(axis.values for axis in spec.axes)):
        point = start
        for axis, step in zip(spec.axes, steps):
            for key, value in zip(axis.keys, step):
                point = with_override(point, key, value)
        tasks.setdefault(point_id(point), point)
    return list(tasks.items())


def _grid_keys(spec: SweepSpec) -> list[str]:
    """Every dotted key the grid sets, in grid order."""
    return [key for axis in spec.axes for key in axis.keys]
