"""Energy over the simulated timeline (simulator/longrun/energy.py): conservation, closed forms,
power caps, monotonicity in price, PUE and grid intensity, and runs with failures."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from clustersim.simulator.cli.goodput import register
from clustersim.simulator.longrun.checkpoint import CheckpointSpec
from clustersim.simulator.longrun.energy import price_run
from clustersim.simulator.step.energy import (activity, energy_per_token, energy_row, step_energy, token_costs,
                                              unit_power, units_of)
from clustersim.simulator.longrun.failures import FailureSpec
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.engine import Interval
from clustersim.simulator.step.result import Result
from clustersim.simulator.scenario import scenario_from_dict
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.sweep.points import evaluate_point
from clustersim.topologies import Cluster, get_cluster
from clustersim.topologies.power import FacilitySpec, PowerSpec, power_spec, with_power_limit
from clustersim.units import GBIT
from clustersim.workloads import TrainingSpec, get_model

MODEL = get_model("llama2-7b")
POWER = PowerSpec(max_w=700.0, idle_w=70.0, node_max_w_per_gpu=500.0, node_load=0.5,
                  levels={"dense": 1.0, "memory": 0.6, "comm": 0.4, "wait": 0.2})


def _run(cluster: Cluster, plan: ParallelPlan, batch: int = 16) -> Result:
    return simulate(MODEL, TrainingSpec(seq_len=4096, global_batch_size=batch), cluster, plan)


def _kernel_watts(result: Result, stage: int, power: PowerSpec, limit: float | None) -> float:
    """Watts of a compute interval of ``stage``: its element-wise share at the memory level, its
    launch overhead at the waiting level, the rest dense, each clipped at the cap."""
    parts = result.stage_compute_breakdowns[stage]
    total = sum(parts.values())
    mem, over = parts["elementwise"] / total, parts["overhead"] / total
    w = {a: min(power.idle_w + power.levels[a] * (power.max_w - power.idle_w), limit or np.inf) for a in power.levels}
    return (1 - mem - over) * w["dense"] + mem * w["memory"] + over * w["wait"]


def _brute_force_joules(result: Result, power: PowerSpec, limit: float | None, samples: int = 20000) -> float:
    """GPU joules by sampling the timeline: at each instant, the highest power of the active intervals."""
    units = units_of(result.intervals)
    dt = result.step_time / samples
    times = (np.arange(samples) + 0.5) * dt
    total = 0.0
    for (_, stage), ivs in units.items():
        watts = np.full(samples, min(power.watts(power.levels["wait"]), limit or np.inf))
        for iv in ivs:
            on = (times >= iv.start) & (times < iv.end)
            act = activity(iv.stream, iv.category)
            w = (_kernel_watts(result, stage, power, limit) if act == "dense"
                 else min(power.watts(power.levels[act]), limit or np.inf))
            watts[on] = np.maximum(watts[on], w)
        total += float(watts.sum() * dt)
    return total * result.num_gpus / len(units)


@pytest.mark.parametrize("limit", [None, 400.0])
def test_step_energy_is_the_integral_of_the_power_model(limit: float | None) -> None:
    """Conservation: the event-sweep integral equals a sampled integral of the same power model
    (a slow NIC so that DP reductions and p2p transfers overlap the compute stream's waits)."""
    cluster = get_cluster("dgx-h100", 16, nic_bandwidth=25 * GBIT)
    if limit is not None:
        cluster = replace(cluster, accelerator=with_power_limit(cluster.accelerator, limit))
    result = _run(cluster, ParallelPlan(tp=2, pp=2, dp=4, micro_batch=1))
    energy = step_energy(result, cluster, POWER)
    assert energy.gpu_j == pytest.approx(_brute_force_joules(result, POWER, limit), rel=2e-3)
    assert sum(energy.by_activity_j.values()) == pytest.approx(energy.gpu_j, rel=1e-12)
    assert energy.node_j == pytest.approx(16 * 250.0 * result.step_time)


def test_unit_power_closed_form_on_a_hand_made_timeline() -> None:
    """compute [0,1], exposed TP [1,1.5], DP comm [0.5,2] overlapping, nothing after 2 s of 2.5 s."""
    ivs = [Interval(0, 0, "compute", "compute", 0.0, 1.0, "F0"), Interval(0, 0, "compute", "exposed_tp", 1.0, 1.5, "F0"),
           Interval(0, 0, "dp", "dp_comm", 0.5, 2.0, "bucket")]
    p = {a: POWER.watts(POWER.levels[a]) for a in ("dense", "comm", "wait")}
    segs = unit_power(ivs, 2.5, POWER)
    assert sum((b - a) * w for a, b, w in segs) == pytest.approx(1.0 * p["dense"] + 1.0 * p["comm"] + 0.5 * p["wait"])
    assert segs[0][0] == 0.0 and segs[-1][1] == 2.5
    assert all(a1 == b0 for (_, b0, _), (a1, _, _) in zip(segs, segs[1:]))  # contiguous, no gap or overlap


def _comm_bound_and_fast() -> tuple[Cluster, Result, Result]:
    """TP 16 across two nodes over a slow NIC (communication-bound) vs TP 8 inside a node + DP 2."""
    cluster = get_cluster("dgx-h100", 16, nic_bandwidth=25 * GBIT)
    slow = _run(cluster, ParallelPlan(tp=16, dp=1, micro_batch=1))
    fast = _run(cluster, ParallelPlan(tp=8, dp=2, micro_batch=1))
    return cluster, slow, fast


def test_comm_bound_step_closed_form_and_against_compute_bound() -> None:
    cluster, slow, fast = _comm_bound_and_fast()
    assert slow.breakdown["exposed_tp"] > slow.breakdown["compute"]  # it is communication-bound
    e = step_energy(slow, cluster, POWER)
    # one unit, compute stream only (dp = 1): E = N * sum over causes of seconds * P(activity of the cause)
    # a compute second draws its stage's kernel mix (element-wise at memory, launch overhead at wait)
    w = {a: POWER.watts(POWER.levels[a]) for a in ("dense", "memory", "comm", "wait")}
    b = slow.breakdown
    closed = 16 * (b["compute"] * _kernel_watts(slow, 0, POWER, None) + b["optimizer"] * w["memory"]
                   + b["exposed_tp"] * w["comm"]
                   + (b["bubble"] + b["exposed_pp"] + b["other"]) * w["wait"])
    assert e.gpu_j == pytest.approx(closed, rel=1e-9)
    assert e.gpu_j < 16 * POWER.max_w * slow.step_time  # less than the same time fully compute-bound


def test_slower_plan_costs_more_per_token_when_idle_power_dominates() -> None:
    cluster, slow, fast = _comm_bound_and_fast()
    assert fast.step_time < slow.step_time and fast.tokens_per_step == slow.tokens_per_step
    idle_heavy = replace(POWER, idle_w=630.0, node_load=1.0)
    assert energy_per_token(slow, cluster, idle_heavy) > energy_per_token(fast, cluster, idle_heavy)
    # closed form: with levels (and node power) constant, energy per token ~ step time
    flat = replace(POWER, idle_w=700.0)
    ratio = energy_per_token(slow, cluster, flat) / energy_per_token(fast, cluster, flat)
    assert ratio == pytest.approx(slow.step_time / fast.step_time, rel=1e-9)


def test_lower_power_cap_never_makes_a_compute_bound_step_faster() -> None:
    base = get_cluster("dgx-h100", 8)
    times, energies = [], []
    for limit in (None, 650.0, 500.0, 350.0, 200.0, 100.0):
        cluster = replace(base, accelerator=with_power_limit(base.accelerator, limit))
        result = _run(cluster, ParallelPlan(tp=1, dp=8, micro_batch=1, zero=1), batch=8)
        times.append(result.step_time)
        energies.append(step_energy(result, cluster).gpu_j)
        if limit is not None:  # the board never draws above its cap
            assert energies[-1] <= limit * 8 * result.step_time * (1 + 1e-12)
    assert all(b > a for a, b in zip(times, times[1:]))  # strictly slower as the cap falls (compute-bound)
    assert energies[-1] < energies[0]  # cube law: energy per step falls as the clock drops


_CACHE: dict[str, tuple[Cluster, Result]] = {}


def _cached() -> tuple[Cluster, Result]:
    if "r" not in _CACHE:
        cluster = get_cluster("dgx-h100", 8)
        _CACHE["r"] = (cluster, _run(cluster, ParallelPlan(tp=8, dp=1, micro_batch=1), batch=8))
    return _CACHE["r"]


@settings(max_examples=30, deadline=None)
@given(pue=st.floats(1.0, 2.0), dpue=st.floats(0.01, 1.0), price=st.floats(0.0, 1.0), dprice=st.floats(0.001, 1.0),
       grid=st.floats(0.0, 1.0), dgrid=st.floats(0.001, 1.0))
def test_costs_increase_with_price_pue_and_grid_intensity(pue: float, dpue: float, price: float, dprice: float,
                                                         grid: float, dgrid: float) -> None:
    cluster, result = _cached()

    def per_token(f: FacilitySpec) -> tuple[float, float, float]:
        c = token_costs(step_energy(result, cluster, facility=f), f)
        return c.per_token("energy_kwh"), c.per_token("money"), c.per_token("kg_co2")

    base = FacilitySpec(pue=pue, price_per_kwh=price, grid_kg_per_kwh=grid, capex_per_gpu=20000.0)
    e0, m0, g0 = per_token(base)
    e1, m1, g1 = per_token(replace(base, pue=pue + dpue))
    assert e1 > e0 and m1 >= m0 and g1 >= g0
    assert per_token(replace(base, price_per_kwh=price + dprice))[1] > m0
    assert per_token(replace(base, grid_kg_per_kwh=grid + dgrid))[2] > g0
    rented = replace(base, price_per_gpu_hour=2.0)
    assert per_token(replace(rented, price_per_gpu_hour=2.0 + dprice))[1] > per_token(rented)[1]


def test_run_without_failures_costs_the_step_per_token_and_failures_add_to_it() -> None:
    cluster, result = _cached()
    checkpoint = CheckpointSpec(write_bandwidth_per_node=200 * GBIT, storage_bandwidth=1e4 * GBIT)
    step = step_energy(result, cluster)
    _, calm = price_run(result, cluster, 1e9, checkpoint, FailureSpec(), np.random.default_rng(0), days=1.0,
                        repetitions=4)
    # the day's history ends inside a step: at most one step's time of the day is not useful
    assert calm.energy_kwh.mean == pytest.approx(1e9 * step.j_per_token / 3.6e6, rel=result.step_time / 86400.0)
    longrun, rough = price_run(result, cluster, 1e9, checkpoint, FailureSpec(mtbf_gpu=2 * 3600.0, restart_time=600.0),
                               np.random.default_rng(0), days=1.0, repetitions=20)
    assert longrun.goodput_mean < 0.95
    assert rough.energy_kwh.mean > calm.energy_kwh.mean and rough.gpu_hours.mean > calm.gpu_hours.mean
    assert rough.energy_kwh.ci95[0] <= rough.energy_kwh.mean <= rough.energy_kwh.ci95[1]
    assert rough.gpu_energy_kwh.mean < rough.energy_kwh.mean  # nodes draw on top of the boards


def test_step_energy_needs_intervals() -> None:
    cluster, result = _cached()
    with pytest.raises(ValueError, match="intervals"):
        step_energy(replace(result, intervals=()), cluster)


def test_preset_power_matches_the_accelerator_tdp() -> None:
    cluster, result = _cached()
    spec = power_spec(cluster.accelerator)
    assert spec.max_w == cluster.accelerator.tdp_watts
    assert 0 < step_energy(result, cluster).mean_gpu_w <= spec.max_w



# --- the commands ---------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama3_70b_h100.yaml"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_cli_simulate_prints_and_writes_energy(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = _cli("simulate", str(EXAMPLE), "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "energy per token" in p.stdout and "mean power per GPU" in p.stdout and "dense/mem/comm/wait" in p.stdout
    doc = json.loads(out.read_text())
    energy = doc["energy"]
    assert energy["step_energy_j"] == pytest.approx(energy["energy_per_token_j"] * doc["tokens_per_step"])
    assert energy["kwh_per_million_tokens"] == pytest.approx(energy["energy_per_token_j"] / 3.6)
    bad = _cli("simulate", str(EXAMPLE), "--set", "cluster.power_limit_w=5000")
    assert bad.returncode == 2 and "power_limit_w" in bad.stderr and "Traceback" not in bad.stderr


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.callback()(lambda: None)
    register(app)
    return app


def test_cli_goodput_reports_run_energy_and_cost_with_intervals(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    args = ["goodput", str(EXAMPLE), "--days", "2", "--repetitions", "6", "--mtbf-hours", "6", "--tokens", "1e11",
            "--pue", "1.2", "--price-per-kwh", "0.1", "--capex-per-gpu", "30000", "--grid-g-per-kwh", "400",
            "--json", str(out)]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    assert "energy kWh [95% CI]" in result.output and "t CO2eq" in result.output
    doc = json.loads(out.read_text())["energy"]
    low, high = doc["energy_kwh"]["ci95"]
    assert low <= doc["energy_kwh"]["mean"] <= high and doc["tokens"] == 1e11
    # owner pricing: kWh x price + GPU-hours x capex / (4 years x 8,760 h), history by history, so on the means
    want = doc["energy_kwh"]["mean"] * 0.1 + doc["gpu_hours"]["mean"] * 30000 / (4 * 8760)
    assert doc["money"]["mean"] == pytest.approx(want, rel=1e-9)
    assert doc["kg_co2"]["mean"] == pytest.approx(doc["energy_kwh"]["mean"] * 0.4, rel=1e-9)
    bad = CliRunner().invoke(_app(), ["goodput", str(EXAMPLE), "--pue", "0.5"])
    assert bad.exit_code == 2 and "pue" in bad.output
    bad = CliRunner().invoke(_app(), ["goodput", str(EXAMPLE), "--days", "1", "--repetitions", "2", "--tokens", "0"])
    assert bad.exit_code == 2 and "tokens" in bad.output


def test_energy_row_prices_tokens_like_the_result_row() -> None:
    """Two formulas for $ per million tokens (Result.to_row and the energy row) agree at a rental price."""
    cluster, result = _cached()
    priced = replace(cluster, cost_per_gpu_hour=3.5)
    row = energy_row(replace(result, labels={**result.labels, "cost_per_gpu_hour": 3.5}), priced)
    assert row["cost_per_million_tokens"] == pytest.approx(
        replace(result, labels={**result.labels, "cost_per_gpu_hour": 3.5}).to_row()["cost_per_million_tokens"])
    assert row["kwh_per_million_tokens"] == pytest.approx(row["energy_j_per_token"] / 3.6)
    assert row["gpu_hours_per_million_tokens"] == pytest.approx(8 * result.step_time / 3600 / result.tokens_per_step * 1e6)


def test_symmetric_and_full_mode_give_the_same_step_energy() -> None:
    """One representative pipeline stands for every replica: full mode (every unit) agrees."""
    cluster = get_cluster("dgx-h100", 16)
    plan = ParallelPlan(tp=2, pp=2, dp=4, micro_batch=1)
    training = TrainingSpec(seq_len=4096, global_batch_size=16)
    sym = simulate(MODEL, training, cluster, plan)
    full = simulate(MODEL, training, cluster, plan, mode="full")
    assert len(units_of(full.intervals)) == 4 * len(units_of(sym.intervals))
    assert step_energy(full, cluster).gpu_j == pytest.approx(step_energy(sym, cluster).gpu_j, rel=1e-6)


def test_memory_bound_kernels_draw_the_memory_level_in_closed_form() -> None:
    """One unit, compute stream only (tp 8, dp 1): against all-dense compute, the step saves
    N x compute seconds x (element-wise share x (P_dense - P_memory) + overhead share x (P_dense - P_wait))."""
    cluster, result = _cached()
    parts = result.stage_compute_breakdowns[0]
    total = sum(parts.values())
    assert parts["elementwise"] > 0 and total > 0
    w = {a: POWER.watts(POWER.levels[a]) for a in ("dense", "memory", "wait")}
    saved = 8 * result.breakdown["compute"] * (parts["elementwise"] / total * (w["dense"] - w["memory"])
                                               + parts["overhead"] / total * (w["dense"] - w["wait"]))
    mixed = step_energy(result, cluster, POWER)
    dense = step_energy(replace(result, stage_compute_breakdowns=()), cluster, POWER)
    assert dense.gpu_j - mixed.gpu_j == pytest.approx(saved, rel=1e-9)
    assert mixed.by_activity_j["memory"] > dense.by_activity_j["memory"]  # element-wise kernels book as memory
    same = replace(POWER, levels={**POWER.levels, "memory": 1.0, "wait": 1.0})  # every kernel at the dense level
    assert step_energy(result, cluster, same).gpu_j == pytest.approx(step_energy(replace(result, stage_compute_breakdowns=()),
                                                                                 cluster, same).gpu_j, rel=1e-12)


def test_sweep_rows_carry_each_clusters_energy_per_token() -> None:
    """A sweep point's row has the energy columns of its own cluster's power model: the same figures
    as step_energy on that cluster, mean board power between idle and TDP, B200 and H100 apart."""
    rows = {}
    for preset in ("dgx-h100", "dgx-b200"):
        point = {"model": {"preset": "llama2-7b", "num_layers": 4}, "training": {"seq_len": 2048, "global_batch_size": 16},
                 "cluster": {"preset": preset, "num_gpus": 8}, "plan": {"tp": 2, "dp": 4}}
        row = evaluate_point(point)
        assert row["status"] == "ok", row
        cluster = get_cluster(preset, 8)
        power = power_spec(cluster.accelerator)
        assert power.idle_w <= row["mean_gpu_power_w"] <= power.max_w
        sc = scenario_from_dict(point)
        direct = step_energy(simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile), sc.cluster)
        assert row["energy_j_per_token"] == pytest.approx(direct.j_per_token, rel=1e-12)
        assert row["kwh_per_million_tokens"] == pytest.approx(row["energy_j_per_token"] / 3.6, rel=1e-12)
        rows[preset] = row
    assert rows["dgx-b200"]["mean_gpu_power_w"] > rows["dgx-h100"]["mean_gpu_power_w"]  # 1,000 W vs 700 W parts
