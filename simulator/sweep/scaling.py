"""The scaling study behind the scaling-efficiency report: best plan per scale vs naive DP.

Owns the two series the report compares: ``best`` (the engine's best plan at every GPU count,
proven by ``search``'s branch and bound, with the rest of that search's Pareto front as ``pareto``
rows) and ``naive_dp`` (the smallest plan that fits at the first GPU count, scaled by adding
data-parallel replicas only: the shortcut users must be shown to be wrong). Rows are the sweep
rows of ``evaluate_point``; it renders nothing.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, Mapping

from clustersim.simulator.search import Estimator, candidate_plans, plan_is_valid
from clustersim.simulator.profile import default_profile
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.sweep.points import best_search, evaluate_point, result_row
from clustersim.simulator.scenario import scenario_from_dict


def naive_plan(base: Mapping[str, Any], gpus: int) -> ParallelPlan | None:
    """The smallest model-parallel footprint (tp*pp*cp) that fits on ``gpus``, fastest among those."""
    sc = scenario_from_dict(_with_gpus(base, gpus))
    est = Estimator(sc.model, sc.training, sc.cluster, sc.profile or default_profile(sc.cluster.accelerator.name))
    best: tuple[int, float, str, ParallelPlan] | None = None
    for plan in candidate_plans(sc.model, sc.training, sc.cluster):
        if plan.schedule != "1f1b" or plan.zero != 1 or not plan_is_valid(sc.model, sc.training, sc.cluster, plan):
            continue
        e = est.estimate(plan)
        if not e.fits:
            continue
        key = (plan.tp * plan.pp * plan.cp, e.step_time, plan.describe(), plan)
        best = key if best is None or key[:3] < best[:3] else best
    return best[3] if best else None


def _with_gpus(base: Mapping[str, Any], gpus: int) -> dict[str, Any]:
    data = copy.deepcopy(dict(base))
    cluster = data["cluster"] if isinstance(data["cluster"], dict) else {"preset": data["cluster"]}
    data["cluster"] = {**cluster, "num_gpus": gpus}
    return data


def scaling_points(base: Mapping[str, Any], gpu_counts: Iterable[int]) -> list[dict[str, Any]]:
    """Sweep points: ``best`` at every count, and the naive DP replicas of the first count's plan."""
    counts = sorted(set(gpu_counts))
    points = [{**_with_gpus(base, n), "plan_mode": "best", "series": "best"} for n in counts]
    plan0 = naive_plan(base, counts[0])
    if plan0 is None:
        return points
    mp = plan0.tp * plan0.pp * plan0.cp
    fixed = {k: getattr(plan0, k) for k in ("tp", "pp", "cp", "micro_batch", "schedule", "recompute", "zero", "sp")}
    for n in counts:
        if n % mp == 0:
            points.append({**_with_gpus(base, n), "plan": {**fixed, "dp": n // mp}, "plan_mode": "fixed", "series": "naive_dp"})
    return points


def scaling_rows(base: Mapping[str, Any], gpu_counts: Iterable[int],
                 progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate every scaling point in order: the best plan of each scale with the rest of its
    search's Pareto front (series ``pareto``), and the naive DP points."""
    points = scaling_points(base, gpu_counts)
    rows: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        rows += _best_and_front(point) if point.get("plan_mode") == "best" else [evaluate_point(point)]
        if progress:
            progress(i + 1, len(points))
    return rows


def _best_and_front(point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``best`` row of a scale and one ``pareto`` row per other plan of its search's front."""
    data = {k: v for k, v in point.items() if k not in ("plan_mode", "series")}
    try:
        sc = scenario_from_dict(data)
        rep = best_search(sc)
    except ValueError:
        return [evaluate_point(point)]  # the same error row as a sweep's
    rows = [result_row(rep.ranked[0].result, "best", sc.cluster)]  # type: ignore[arg-type]  # best_search engine-prices its top plan: result is set
    rows += [result_row(r.result, "pareto", sc.cluster) for r in rep.pareto
             if r.result is not None and r.plan != rep.ranked[0].plan]
    return rows
