"""Plan search returns the engine's best plan: a small space priced exhaustively by the engine.

Every valid plan of a 4-layer Llama 2 7B on 8 H100 is simulated; ``search`` (branch and bound)
and ``plan: best`` of a sweep point must return the plan with the least engine step time (and
$/token, peak memory and facility joules per token), and the optimistic bound of ``search.bound`` must never exceed the
engine's step time (nor static memory the engine's peak memory) on any plan.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from clustersim.simulator.profile import default_profile
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.search.energy_bound import EnergyBound
from clustersim.simulator.search.candidates import candidate_plans, plan_is_valid
from clustersim.simulator.search.objectives import price_per_token
from clustersim.simulator.search.search import search
from clustersim.simulator.step.energy import energy_per_token, step_energy, token_costs
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.sweep.points import evaluate_point
from clustersim.topologies import get_cluster
from clustersim.topologies.power import FacilitySpec
from clustersim.workloads import TrainingSpec, get_model

MODEL = dataclasses.replace(get_model("llama2-7b"), num_layers=4)
TRAINING = TrainingSpec(seq_len=2048, global_batch_size=16)
PRICE = 2.5


@pytest.fixture(scope="module")
def space() -> dict:
    cluster = dataclasses.replace(get_cluster("dgx-h100", 8), cost_per_gpu_hour=PRICE)
    prof = default_profile(cluster.accelerator.name)
    bound = StepBound(MODEL, TRAINING, cluster, prof)
    rows, energies = [], {}
    for plan in candidate_plans(MODEL, TRAINING, cluster):
        if not plan_is_valid(MODEL, TRAINING, cluster, plan):
            continue
        try:
            r = simulate(MODEL, TRAINING, cluster, plan, profile=prof)
        except ClusterSimError:
            continue
        rows.append((plan, r.step_time, r.peak_memory, bound.step_time(plan), bound.static_memory(plan)))
        energies[plan] = energy_per_token(r, cluster)
    return {"cluster": cluster, "rows": rows, "energy": energies}


def test_the_space_is_not_trivial(space: dict) -> None:
    times = [t for _, t, *_ in space["rows"]]
    assert len(times) > 100 and max(times) > 1.5 * min(times)


def test_bound_never_exceeds_the_engine(space: dict) -> None:
    for plan, step, mem, bound, mem_bound in space["rows"]:
        assert bound <= step, plan.describe()
        assert mem_bound <= mem, plan.describe()
    # and it is a useful bound: within 10 % of the engine on the fastest plans
    fastest = sorted(space["rows"], key=lambda r: r[1])[:10]
    assert all(b > 0.9 * t for _, t, _, b, _ in fastest)


def test_search_returns_the_engine_best_time_and_cost(space: dict) -> None:
    best = min(t for _, t, *_ in space["rows"])
    for objective in ("time", "cost"):
        rep = search(MODEL, TRAINING, space["cluster"], top=3, objective=objective)
        assert rep.best is not None and math.isclose(rep.best.result.step_time, best, rel_tol=1e-12)
        assert rep.engine_calls < len(space["rows"]) / 2  # the bound prunes most of the space
        assert rep.pruned + len(rep.ranked) <= rep.valid


def test_search_memory_objective_returns_the_least_memory(space: dict) -> None:
    least = min(m for _, _, m, *_ in space["rows"])
    rep = search(MODEL, TRAINING, space["cluster"], top=3, objective="memory")
    assert math.isclose(rep.best.result.peak_memory, least, rel_tol=1e-12)
    fastest_least = min(t for _, t, m, *_ in space["rows"] if math.isclose(m, least, rel_tol=1e-12))
    assert math.isclose(rep.best.result.step_time, fastest_least, rel_tol=1e-12)


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b)) and a != b


def test_pareto_front_is_non_dominated_in_time_memory_and_energy(space: dict) -> None:
    """The front over (step time, peak memory, J/token): no member dominated by a priced plan,
    every priced plan off the front dominated by a member."""
    rep = search(MODEL, TRAINING, space["cluster"], top=3)
    front = [(r.result.step_time, r.result.peak_memory, r.energy) for r in rep.pareto]
    assert front and front[0][0] == rep.best.result.step_time
    priced = [(r.result.step_time, r.result.peak_memory, space["energy"][r.plan]) for r in rep.ranked]
    assert all(math.isclose(e, space["energy"][r.plan], rel_tol=1e-12) for r, (*_, e) in zip(rep.pareto, front))
    for v in front:
        assert not any(_dominates(o, v) for o in front + priced)
    for v in priced:
        assert v in front or any(_dominates(f, v) for f in front)


def test_search_energy_objective_returns_the_least_energy_per_token(space: dict) -> None:
    """Branch and bound on J/token: the bound (``EnergyBound``) never exceeds any plan's energy, and the search returns the exhaustive minimum while pruning."""
    eb = EnergyBound(MODEL, TRAINING, space["cluster"], default_profile(space["cluster"].accelerator.name))
    tight = []
    for plan, _, _, bound, _ in space["rows"]:
        assert eb.per_token(plan, bound) <= space["energy"][plan], plan.describe()
        tight.append(eb.per_token(plan, bound) / space["energy"][plan])
    assert max(tight) > 0.9  # and a useful bound: within 10 % of the engine somewhere
    least = min(space["energy"].values())
    rep = search(MODEL, TRAINING, space["cluster"], top=3, objective="energy")
    assert rep.best is not None and math.isclose(rep.best.energy, least, rel_tol=1e-12)
    assert [r.energy for r in rep.ranked] == sorted(r.energy for r in rep.ranked)
    assert rep.engine_calls < len(space["rows"])


def test_plan_best_point_is_the_engine_best(space: dict) -> None:
    best = min(t for _, t, *_ in space["rows"])
    point = {"model": {"preset": "llama2-7b", "num_layers": 4},
             "training": {"seq_len": 2048, "global_batch_size": 16},
             "cluster": {"preset": "dgx-h100", "num_gpus": 8}, "plan": {"tp": 8},
             "plan_mode": "best"}
    row = evaluate_point(point)
    assert row["status"] == "ok", row
    assert math.isclose(row["step_time_s"], best, rel_tol=1e-12)


def test_cost_objective_without_a_price_is_refused() -> None:
    with pytest.raises(ValueError, match="cost_per_gpu_hour"):
        search(MODEL, TRAINING, get_cluster("dgx-h100", 8), objective="cost")


OWNER = FacilitySpec(pue=1.3, price_per_kwh=0.5, capex_per_gpu=25_000.0, life_years=4.0, price_per_gpu_hour=0.0)
"""An owner's prices (issue 20 item 3): electricity per kWh at a PUE and capital amortised over a life."""


def test_owner_price_is_the_money_of_a_step_per_token() -> None:
    """``TokenPrice`` (what the search ranks) prices a step as ``step.energy.token_costs`` does:
    facility kWh x $/kWh + GPU-hours x capital per GPU-hour, per token."""
    cluster = get_cluster("dgx-h100", 8)
    r = simulate(MODEL, TRAINING, cluster, next(p for p in candidate_plans(MODEL, TRAINING, cluster)
                                                if plan_is_valid(MODEL, TRAINING, cluster, p) and p.tp == 8))
    price = price_per_token(cluster, TRAINING, OWNER)
    costs = token_costs(step_energy(r, cluster, facility=OWNER), OWNER)
    assert price.basis == "owner" and price.per_joule > 0 and price.per_second > 0
    assert math.isclose(price.of(r.step_time, energy_per_token(r, cluster)), costs.per_token("money"), rel_tol=1e-9)


def test_owner_cost_objective_returns_the_least_cost_per_token(space: dict) -> None:
    """Branch and bound on the owner's $/token (time and energy both priced): the bound never
    exceeds any plan's cost, and the search returns the exhaustive minimum while pruning."""
    price = price_per_token(space["cluster"], TRAINING, OWNER)
    eb = EnergyBound(MODEL, TRAINING, space["cluster"], default_profile(space["cluster"].accelerator.name))
    cost = {plan: price.of(step, space["energy"][plan]) for plan, step, *_ in space["rows"]}
    for plan, _, _, bound, _ in space["rows"]:
        assert price.of(bound, eb.per_token(plan, bound)) <= cost[plan] * (1 + 1e-12), plan.describe()
    rep = search(MODEL, TRAINING, space["cluster"], top=3, objective="cost", facility=OWNER)
    assert rep.best is not None and rep.best.result is not None
    assert math.isclose(price.of(rep.best.result.step_time, rep.best.energy), min(cost.values()), rel_tol=1e-12)
    assert rep.engine_calls < len(space["rows"])
