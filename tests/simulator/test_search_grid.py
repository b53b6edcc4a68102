"""The analytical tier in array form (``search.grid``) against the scalar bound, and the parallel
engine re-check against the serial one.

``grid_bounds`` must give ``StepBound.step_time`` and ``StepBound.static_memory`` of every plan of
a search space to 1e-12 relative: dense, MoE (dense first layers), hybrid (Mamba pattern) and a
sliding-window model (which the grid hands to the scalar bound), with plans the search does not
enumerate mixed in (ZeRO-2/3, hybrid sharding, explicit layer splits, partial full recompute, TP
overlap). ``search(workers=2)`` must return what ``search(workers=1)`` returns, field by field.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from clustersim.simulator.profile import default_profile
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.plan.schedules import lanes, program_ends
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.search.grid import grid_bounds
from clustersim.simulator.search.candidates import candidate_plans, plan_is_valid
from clustersim.simulator.search.search import SearchReport, search
from clustersim.topologies import get_cluster
from clustersim.workloads import ModelSpec, TrainingSpec, get_model

GRIDS = [  # (model, layers kept (None: all), GPUs, global batch, seq)
    ("llama3-70b", None, 1024, 128, 8192),
    ("mixtral-8x7b", None, 64, 64, 4096),
    ("deepseek-v3", 8, 64, 64, 4096),
    ("nemotron-3-nano", None, 32, 32, 4096),
    ("gpt-oss-120b", 12, 32, 32, 4096),
]


def _model(name: str, layers: int | None) -> ModelSpec:
    m = get_model(name)
    return m if layers is None else dataclasses.replace(m, num_layers=layers)


def _variants(plans: list[ParallelPlan], num_layers: int) -> list[ParallelPlan]:
    """Plans the search does not enumerate, derived from every 7th candidate."""
    out = []
    for p in plans[::7]:
        out.append(dataclasses.replace(p, zero=2 if p.fsdp == "none" else 0))
        out.append(dataclasses.replace(p, zero=3, fsdp="none") if p.fsdp == "none" else
                   dataclasses.replace(p, fsdp="hybrid", dp_shard=max(1, p.dp // 2)))
        out.append(dataclasses.replace(p, recompute="full", recompute_layers=1))
        out.append(dataclasses.replace(p, tp_comm_overlap=0.5, grad_dtype_bytes=2))
        chunks = p.pp * p.vpp
        if p.schedule != "dualpipe" and chunks > 1 and num_layers // chunks >= 2:  # one layer moved to the end
            split = [num_layers // chunks] * chunks
            split[-1] += num_layers - sum(split) + 1
            split[0] -= 1
            out.append(dataclasses.replace(p, layer_split=tuple(split)))
    return out


@pytest.mark.parametrize(("name", "layers", "gpus", "gbs", "seq"), GRIDS, ids=[g[0] for g in GRIDS])
def test_grid_bounds_equal_the_scalar_bound(name: str, layers: int | None, gpus: int, gbs: int, seq: int) -> None:
    model, training = _model(name, layers), TrainingSpec(seq_len=seq, global_batch_size=gbs)
    cluster = get_cluster("dgx-h100", gpus)
    prof = default_profile(cluster.accelerator.name)
    plans = [p for p in candidate_plans(model, training, cluster) if plan_is_valid(model, training, cluster, p)]
    plans += [p for p in _variants(plans, model.num_layers) if plan_is_valid(model, training, cluster, p)]
    assert len(plans) > 100
    grid = grid_bounds(StepBound(model, training, cluster, prof), plans)
    sb = StepBound(model, training, cluster, prof)
    step = np.array([sb.step_time(p) for p in plans])
    memory = np.array([sb.static_memory(p) for p in plans])
    assert np.all(step > 0) and np.all(memory > 0)
    np.testing.assert_allclose(grid.step_time, step, rtol=1e-12, atol=0)
    np.testing.assert_allclose(grid.static_memory, memory, rtol=1e-12, atol=0)
    partial = sum(p.recompute_layers is not None for p in plans)
    expected = len(plans) if name == "gpt-oss-120b" else partial  # sliding windows: the scalar bound for all
    assert grid.scalar == expected


def test_grid_bounds_follow_the_layer_split() -> None:
    """An explicit split moves layers between stages: the grid must see it (not the even split)."""
    model, training = get_model("llama3-8b"), TrainingSpec(seq_len=4096, global_batch_size=64)
    cluster = get_cluster("dgx-h100", 32)
    sb = StepBound(model, training, cluster, default_profile(cluster.accelerator.name))
    even = ParallelPlan(tp=8, pp=4, dp=1, micro_batch=1, sp=True)
    skew = dataclasses.replace(even, layer_split=(2, 10, 10, 10))
    grid = grid_bounds(sb, [even, skew])
    assert grid.step_time[1] > grid.step_time[0] * 1.1  # the busiest stage holds 10 layers, not 8
    np.testing.assert_allclose(grid.step_time, [sb.step_time(even), sb.step_time(skew)], rtol=1e-12)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"])
def test_program_ends_are_the_programs_first_and_last_pass(schedule: str) -> None:
    for pp in range(1, 9):
        for m in range(1, 24):
            if schedule == "dualpipe" and (pp % 2 or m < 2 * pp or m % 2):
                continue
            for vpp in (2, 3, 4) if schedule == "interleaved" else (1,):
                for stage in range(pp):
                    program = lanes(schedule, stage, pp, m, vpp)[0]
                    assert program_ends(schedule, stage, pp, m, vpp) == (program[0], program[-1])


def _fields(rep: SearchReport) -> tuple[object, ...]:
    ranked = tuple((r.plan, r.result.step_time if r.result else None, r.memory, r.energy, r.bound, r.error)
                   for r in rep.ranked)
    return (ranked, tuple(r.plan for r in rep.pareto), rep.candidates, rep.valid, rep.fitting,
            rep.engine_calls, rep.memory_rejected, rep.pruned)


@pytest.mark.parametrize("objective", ["time", "energy"])
def test_parallel_engine_recheck_returns_the_serial_report(objective: str) -> None:
    model, training = dataclasses.replace(get_model("llama2-7b"), num_layers=4), TrainingSpec(seq_len=2048, global_batch_size=16)
    cluster = get_cluster("dgx-h100", 8)
    serial = search(model, training, cluster, top=20, objective=objective)  # type: ignore[arg-type]
    parallel = search(model, training, cluster, top=20, objective=objective, workers=3)  # type: ignore[arg-type]
    assert serial.engine_calls >= 3  # the pool had work in more than one batch
    assert parallel.workers == 3 and serial.workers == 1
    assert 0 < serial.tier_cpu_seconds and serial.plans_per_cpu_second == serial.valid / serial.tier_cpu_seconds
    assert _fields(parallel) == _fields(serial)


def test_workers_must_be_positive() -> None:
    model, training = dataclasses.replace(get_model("llama2-7b"), num_layers=4), TrainingSpec(seq_len=2048, global_batch_size=16)
    with pytest.raises(ValueError, match="workers = 0"):
        search(model, training, get_cluster("dgx-h100", 8), workers=0)
