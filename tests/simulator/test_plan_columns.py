"""The search's plan grid as numpy columns against the scalar path, plan by plan.

``candidate_columns`` must enumerate exactly ``candidate_plans`` (same plans, same order);
``columns_valid`` must accept exactly what ``check_plan`` accepts, over search grids and over a
product of good and bad values of every column (each of ``check_plan``'s rules that a column can
break rejects some of them); ``column_bounds`` must give ``grid_bounds``' figures bit for bit; and
the search's bound order (plans built only as it is walked) must be ``sorted`` by (bound, label).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from clustersim.simulator.errors import PlanError
from clustersim.simulator.plan import FSDPS, RECOMPUTES, SCHEDULES, ParallelPlan, check_plan, columns_valid, plan_columns
from clustersim.simulator.profile import default_profile
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.search.grid import column_bounds, grid_bounds
from clustersim.simulator.search.candidates import candidate_columns, candidate_plans, plan_is_valid, valid_columns
from clustersim.simulator.search.branch_bound import _bound_order
from clustersim.topologies import Cluster, get_cluster
from clustersim.workloads import ModelSpec, TrainingSpec, get_model

GRIDS = [  # (model, layers kept (None: all), GPUs, global batch, seq)
    ("llama3-70b", None, 1024, 1024, 8192),
    ("llama3-70b", None, 1024, 128, 8192),
    ("mixtral-8x7b", None, 256, 512, 4096),
    ("deepseek-v3", 8, 64, 64, 4096),
    ("nemotron-3-nano", None, 32, 32, 4096),
    ("gpt-oss-120b", 12, 32, 32, 4096),
]
IDS = [f"{g[0]}-{g[2]}-{g[3]}" for g in GRIDS]


def _scenario(name: str, layers: int | None, gpus: int, gbs: int, seq: int) -> tuple[ModelSpec, TrainingSpec, Cluster]:
    m = get_model(name)
    m = m if layers is None else dataclasses.replace(m, num_layers=layers)
    return m, TrainingSpec(seq_len=seq, global_batch_size=gbs), get_cluster("dgx-h100", gpus)


@pytest.mark.parametrize(("name", "layers", "gpus", "gbs", "seq"), GRIDS, ids=IDS)
def test_columns_enumerate_and_check_the_scalar_plans(name: str, layers: int | None, gpus: int, gbs: int, seq: int) -> None:
    model, training, cluster = _scenario(name, layers, gpus, gbs, seq)
    plans = list(candidate_plans(model, training, cluster))
    columns = candidate_columns(model, training, cluster)
    assert len(plans) > 1000 and columns.plans() == plans
    valid = [plan_is_valid(model, training, cluster, p) for p in plans]
    assert 0 < sum(valid) < len(plans)  # the checks prune something and keep something
    assert columns_valid(model, training, cluster, columns).tolist() == valid
    kept, count = valid_columns(model, training, cluster)
    assert count == len(plans) and kept.plans() == [p for p, ok in zip(plans, valid) if ok]


def _odd_model() -> ModelSpec:
    """4 layers, 24 heads, 6 KV heads (tp 4: neither divides the other), an odd FFN (tp 2 does not divide it)."""
    return dataclasses.replace(get_model("llama3-8b"), num_layers=4, num_heads=24, num_kv_heads=6, hidden_size=3072,
                               ffn_hidden_size=8201)


PRODUCT = [  # every column over good and bad values, on 16 GPUs, 4 layers, GBS 24, seq 4,098
    [0, 1, 2, 4, 16],  # tp
    [1, 2],  # pp
    [1, 2, 4, 8],  # dp
    [1, 2],  # cp
    [1, 3, 16],  # ep
    [1, 2, 3],  # vpp
    [1, 5],  # micro_batch
    [0],  # sp (no rule reads it)
    range(len(SCHEDULES)),
    [0],  # recompute (no rule reads it without offloading or recompute modules)
    [0, 1, 4],  # zero
    range(len(FSDPS)),
]
COMMON = ["must be a positive integer", "!= cluster GPUs", "> num_layers", "needs plan.schedule = interleaved",
          "interleaved needs plan.vpp", "dualpipe needs an even pp", "not a multiple of dp", "multiple of pp",
          "dualpipe needs an even number", "seq_len", "already shards like ZeRO-3", "must be 0, 1, 2 or 3"]
RULES = {  # the rules that reject some plan of the product first (check_plan stops at the first)
    "odd": COMMON + ["does not divide num_heads", "num_kv_heads", "does not divide ffn_hidden_size", "has no experts"],
    "mixtral-8x7b": COMMON + ["does not divide num_experts", "must divide"],
}


@pytest.mark.parametrize("name", list(RULES))
def test_columns_check_every_rule_as_check_plan(name: str) -> None:
    model = _odd_model() if name == "odd" else dataclasses.replace(get_model(name), num_layers=4, num_experts=16)
    training, cluster = TrainingSpec(seq_len=4098, global_batch_size=24), get_cluster("dgx-h100", 16)
    columns = plan_columns(list(itertools.product(*PRODUCT)))
    reasons: list[str] = []
    for plan in columns.plans():
        try:
            check_plan(model, training, cluster, plan)
            reasons.append("")
        except PlanError as exc:
            reasons.append(str(exc))
    assert columns_valid(model, training, cluster, columns).tolist() == [not r for r in reasons]
    assert 10 <= sum(not r for r in reasons) < len(reasons) // 10
    seen = {rule for rule in RULES[name] if any(rule in r for r in reasons)}
    assert seen == set(RULES[name])  # every rule a column can break was the first to reject some plan


@pytest.mark.parametrize(("name", "layers", "gpus", "gbs", "seq"), GRIDS, ids=IDS)
def test_column_bounds_are_grid_bounds_bit_for_bit(name: str, layers: int | None, gpus: int, gbs: int, seq: int) -> None:
    model, training, cluster = _scenario(name, layers, gpus, gbs, seq)
    prof = default_profile(cluster.accelerator.name)
    columns, _ = valid_columns(model, training, cluster)
    got = column_bounds(StepBound(model, training, cluster, prof), columns)
    want = grid_bounds(StepBound(model, training, cluster, prof), columns.plans())
    assert np.all(got.step_time > 0) and np.all(got.static_memory > 0)
    assert np.array_equal(got.step_time, want.step_time) and np.array_equal(got.static_memory, want.static_memory)
    assert got.scalar == want.scalar == (len(columns) if name == "gpt-oss-120b" else 0)


@pytest.mark.parametrize("digits", [None, 1])
def test_bound_order_is_sorted_by_bound_then_label(digits: int | None) -> None:
    """Rounded bounds make long runs of ties, which the labels must order as ``sorted`` does."""
    model, training, cluster = _scenario("llama3-70b", None, 1024, 1024, 8192)
    prof = default_profile(cluster.accelerator.name)
    columns, _ = valid_columns(model, training, cluster)
    score = column_bounds(StepBound(model, training, cluster, prof), columns).step_time
    score = score if digits is None else np.round(score, digits)
    plans = columns.plans()
    by_plan = dict(zip(plans, score.tolist()))
    want = sorted(plans, key=lambda p: (by_plan[p], p.describe()))
    bounds: dict[ParallelPlan, float] = {}
    walk = _bound_order(columns, score, bounds)
    first = list(itertools.islice(walk, 10))
    assert first == want[:10] and len(bounds) < len(plans) // 10  # built as the walk reaches them
    assert first + list(walk) == want and bounds == by_plan
    assert digits is None or len(set(score.tolist())) < len(plans) // 10
