"""One point of a sweep: a scenario mapping in, one flat result row out (never an exception).

Owns ``evaluate_point``, the picklable function that local process pools and Dask workers run:
it builds the scenario, simulates its plan (``plan_mode: fixed``) or searches for the best plan
(``plan_mode: best``), and returns ``Result.to_row()`` plus the energy columns
(``ENERGY_COLUMNS``) and ``status``/``error``/``series``/``plan_label``. A point that fails validation or does not fit is a row with status ``error``.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustersim.simulator.step import Result, energy_row, simulate_step as simulate
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.scenario import scenario_from_dict
from clustersim.simulator.search import SearchReport, search_plans as search
from clustersim.topologies import Cluster

ENERGY_COLUMNS: tuple[str, ...] = ("energy_j_per_token", "kwh_per_million_tokens", "mean_gpu_power_w",
                                   "gpu_hours_per_million_tokens")
"""The energy columns of an ok row (``step.energy.energy_row``)."""


def evaluate_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """Simulate (or search) one point; the row of docs/ARCHITECTURE.md's sweep columns."""
    data = dict(point)
    mode = str(data.pop("plan_mode", "fixed"))
    series = data.pop("series", None)
    try:
        sc = scenario_from_dict(data)
        if mode == "best":
            result = best_result(sc)
        else:
            result = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile,
                              mode=sc.mode, seed=sc.seed)
    except ValueError as exc:
        return {"status": "error", "error": str(exc).splitlines()[0], "series": series or mode,
                "num_gpus": _gpus(point), "model": _name(point.get("model")), "cluster": _name(point.get("cluster")),
                "plan_label": _plan_label(point.get("plan")) if mode != "best" else "searched: no plan fits"}
    return result_row(result, series or mode, sc.cluster)


def best_result(sc: Any) -> Result:
    """The engine's best plan of a scenario (branch and bound over every valid plan)."""
    return best_search(sc, top=1).ranked[0].result  # type: ignore[return-value]  # best_search engine-prices its top plan


def best_search(sc: Any, top: int = 1) -> SearchReport:
    """``search`` of a scenario; an error when no plan fits."""
    rep = search(sc.model, sc.training, sc.cluster, top=top, profile=sc.profile)
    if not rep.ranked or rep.ranked[0].result is None:
        raise ValueError(f"no plan fits {sc.model.name} on {sc.cluster.num_gpus} GPUs")
    return rep


def result_row(result: Result, series: str, cluster: Cluster) -> dict[str, Any]:
    """The flat row of a simulated point, with its energy per token on ``cluster`` (``step.energy``:
    the cluster's power preset, PUE 1)."""
    row = result.to_row()
    energy = energy_row(result, cluster)
    row.update({k: energy[k] for k in ENERGY_COLUMNS})
    row.update(status="ok", error="", series=series, plan_label=ParallelPlan(**result.plan).describe())
    return row


def _plan_label(plan: Any) -> str:
    """The plan of a failed point, as written in the point (it may not even build)."""
    if not isinstance(plan, Mapping):
        return "-"
    try:
        return ParallelPlan(**plan).describe()
    except (TypeError, ValueError):
        return " ".join(f"{k}={v}" for k, v in plan.items())


def _name(spec: Any) -> Any:
    """The preset or model name of a scenario entry (a name or a mapping)."""
    if isinstance(spec, Mapping):
        return spec.get("preset", spec.get("name"))
    return spec


def _gpus(point: Mapping[str, Any]) -> Any:
    cluster = point.get("cluster")
    return cluster.get("num_gpus") if isinstance(cluster, Mapping) else None
