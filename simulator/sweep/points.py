"""One point of a sweep: a scenario mapping in, one flat result row out (never an exception).

Owns ``evaluate_point``, the picklable function that local process pools and Dask workers run:
it builds the scenario, simulates its plan (``plan_mode: fixed``) or searches for the best plan
(``plan_mode: best``), and returns ``Result.to_row()`` plus ``status``/``error``/``series``/
``plan_label``. A point that fails validation or does not fit is a row with status ``error``.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.scenario import scenario_from_dict
from clustersim.simulator.search.search import search


def evaluate_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """Simulate (or search) one point; the row of docs/ARCHITECTURE.md's sweep columns."""
    data = dict(point)
    mode = str(data.pop("plan_mode", "fixed"))
    series = data.pop("series", None)
    try:
        sc = scenario_from_dict(data)
        if mode == "best":
            ranked = search(sc.model, sc.training, sc.cluster, top=1, shortlist=3, profile=sc.profile).ranked
            if not ranked or ranked[0].result is None:
                raise ValueError(f"no plan fits {sc.model.name} on {sc.cluster.num_gpus} GPUs")
            result = ranked[0].result
        else:
            result = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile,
                              mode=sc.mode, seed=sc.seed)  # type: ignore[arg-type]
    except ValueError as exc:
        return {"status": "error", "error": str(exc).splitlines()[0], "series": series or mode,
                "num_gpus": _gpus(point), "model": _name(point.get("model")), "cluster": _name(point.get("cluster"))}
    row = result.to_row()
    row.update(status="ok", error="", series=series or mode, plan_label=ParallelPlan(**result.plan).describe())
    return row


def _name(spec: Any) -> Any:
    """The preset or model name of a scenario entry (a name or a mapping)."""
    if isinstance(spec, Mapping):
        return spec.get("preset", spec.get("name"))
    return spec


def _gpus(point: Mapping[str, Any]) -> Any:
    cluster = point.get("cluster")
    return cluster.get("num_gpus") if isinstance(cluster, Mapping) else None
