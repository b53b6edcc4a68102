"""``expert_call_time`` (issue 13, item 1): a fixed time per routed-expert GEMM call of the unfused
grouped path, so many small experts pay it often against little math and a few large ones rarely
against much; its closed form per op, where it does not apply, its effect on a simulated step, and
its fit (sensitivity column, first-order model, bounds, prior in a fold without MoE rows)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from clustersim.simulator.calibration.fit_crossval import PRIORS, all_evidence, fit_fold
from clustersim.simulator.calibration.fit_defaults import perturb
from clustersim.simulator.calibration.fit_first_order import _initial, feasible, first_order_problem, fit, predict
from clustersim.simulator.calibration.fit_params import EXPERT_CALL_FIT, EXPERT_CALL_MAX, EXPERT_CALL_PROBE, Bounds
from clustersim.simulator.profile import HOST_LAUNCH_RANGE, CalibrationProfile, default_profile
from clustersim.simulator.step.compute import expert_path, op_time
from clustersim.topologies import get_accelerator
from clustersim.workloads.op_primitives import gemm_op

H100 = get_accelerator("h100")
PROFILE = default_profile("h100").replace(kernel_overhead=0.0)
CURVE_X = [1e8, 1e9, 1e10, 1e11, 1e12, 1e13]
BASE = CalibrationProfile(name="synthetic", gemm_efficiency=list(zip(CURVE_X, [0.15, 0.30, 0.40, 0.50, 0.55, 0.60])))
FREE = Bounds(expert_call=EXPERT_CALL_FIT)


def _experts(m: float, count: int, h: int = 2048, f: int = 768, role: str = "routed_expert") -> object:
    """fc1 of ``count`` local experts (2 x f columns of h), m tokens each."""
    return gemm_op("expert_fc1", m, 2 * f, h, 2, params=count * h * 2 * f, count=count, role=role)  # type: ignore[arg-type]


@pytest.mark.parametrize(("which", "gemms"), [("fwd", 1), ("bwd_input", 1), ("bwd_weight", 1), ("bwd", 2)])
def test_each_call_pays_the_time_once_per_gemm_of_the_pass(which: str, gemms: int) -> None:
    t = 15e-6
    on = PROFILE.replace(expert_call_time=t)
    for count in (2, 8, 32):
        op = _experts(1024, count)
        assert op_time(op, H100, on, "bf16", which) - op_time(op, H100, PROFILE, "bf16", which) == pytest.approx(
            count * gemms * t, rel=1e-9)
    # not a routed-expert GEMM: no change (a dense or shared-expert GEMM, the experts' activation)
    for role in ("", "shared_expert"):
        op = _experts(1024, 1, role=role)
        assert op_time(op, H100, on, "bf16", which) == op_time(op, H100, PROFILE, "bf16", which)


def test_small_experts_pay_a_larger_share_than_large_ones() -> None:
    # the same token-expert pairs split over more, smaller experts: the fixed time grows with the calls,
    # and against the GEMMs' own time it weighs most where the experts are small
    on = PROFILE.replace(expert_call_time=20e-6)
    pairs = 65536
    share = []
    for count in (2, 8, 32):
        op = _experts(pairs / count, count)
        t_on, t_off = op_time(op, H100, on, "bf16"), op_time(op, H100, PROFILE, "bf16")
        assert t_on > t_off
        share.append((t_on - t_off) / t_on)
    assert share[0] < share[1] < share[2]


def test_lifted_where_one_expert_or_the_fused_kernel() -> None:
    prof = PROFILE.replace(expert_efficiency=0.5, expert_call_time=20e-6)
    for fused, local in ((True, 16), (False, 1)):
        lifted = expert_path(prof, fused, local)
        assert (lifted.expert_efficiency, lifted.expert_call_time) == (1.0, 0.0)
    assert expert_path(prof, False, 16) is prof
    plain = PROFILE.replace(expert_efficiency=1.0)
    assert expert_path(plain, False, 1) is plain  # nothing to lift


def test_a_moe_step_grows_by_at_least_the_calls_on_one_stage() -> None:
    from clustersim.simulator.plan.plan import ParallelPlan
    from clustersim.simulator.step.simulate import simulate
    from clustersim.topologies.presets import dgx_h100_pod
    from clustersim.workloads import TrainingSpec, get_model

    model = get_model("qwen3-30b-a3b")
    training = TrainingSpec(seq_len=4096, global_batch_size=16, precision="bf16")
    pod = dgx_h100_pod(8)
    cluster = replace(pod, accelerator=replace(pod.accelerator, hbm_capacity=1e18))  # the time, not the fit
    plan = ParallelPlan(tp=1, pp=1, dp=8, ep=8, micro_batch=1, zero=1)
    t = 20e-6
    base = simulate(model, training, cluster, plan, profile=PROFILE)
    more = simulate(model, training, cluster, plan, profile=PROFILE.replace(expert_call_time=t))
    local = model.num_experts // plan.ep
    micro = training.global_batch_size // (plan.dp * plan.micro_batch)
    # fc1 and fc2, one forward and two backward GEMMs each, per local expert, layer and micro-batch
    calls = 2 * 3 * local * model.num_layers * micro
    assert more.step_time - base.step_time == pytest.approx(calls * t, rel=0.02)


def test_probe_bounds_and_perturb() -> None:
    assert EXPERT_CALL_MAX == HOST_LAUNCH_RANGE[1]
    assert 0 < EXPERT_CALL_PROBE <= EXPERT_CALL_MAX
    assert perturb(BASE, "ecall").expert_call_time == pytest.approx(EXPERT_CALL_PROBE)
    assert perturb(BASE.replace(expert_call_time=5e-6), "ecall").expert_call_time == pytest.approx(5e-6 + EXPERT_CALL_PROBE)
    assert PRIORS["ecall"] == ("expert_call_time", 0.0)


def _synthetic(want: float, rows: int = 30, seed: int = 0) -> pd.DataFrame:
    """Rows whose measured time is T0 + A want: the first-order model is exact in the call time; a
    third of the rows have no routed expert (slope 0)."""
    rng = np.random.default_rng(seed)
    t0 = rng.uniform(1.0, 3.0, rows)
    a = rng.uniform(0.1, 1.0, rows) * t0 / EXPERT_CALL_MAX * (np.arange(rows) % 3 != 0)
    return pd.DataFrame({"row_id": np.arange(rows), "gpu_type": "H100", "group": "h100", "status": "ok",
                         "framework": "Megatron-LM", "source_id": "synthetic", "base": t0,
                         "ecall": t0 + a * EXPERT_CALL_PROBE, "measured": t0 + a * want})


@pytest.mark.parametrize("want", [0.0, 4e-6, 12e-6, 20e-6])
def test_fit_recovers_a_call_time_inside_the_bounds(want: float) -> None:
    got = fit(_synthetic(want), profiles={"h100": BASE}, bounds=FREE)["h100"]
    assert got.expert_call_time == pytest.approx(want, abs=0.1e-6)
    # the default bounds pin it at 0 however much the rows ask for (not a default: measured out of sample)
    assert fit(_synthetic(want), profiles={"h100": BASE})["h100"].expert_call_time == 0.0


def test_fit_stays_inside_the_bounds() -> None:
    assert EXPERT_CALL_FIT == (0.0, EXPERT_CALL_MAX) and Bounds().expert_call == (0.0, 0.0)
    assert fit(_synthetic(60e-6), profiles={"h100": BASE}, bounds=FREE)["h100"].expert_call_time == pytest.approx(EXPERT_CALL_MAX)
    pb = first_order_problem(_synthetic(0.0), {"h100": BASE})
    x = _initial(pb)
    assert predict(pb, x) == pytest.approx(pb.t0)
    for v, ok in ((0.0, True), (EXPERT_CALL_MAX, True), (-1e-6, False), (EXPERT_CALL_MAX * 1.01, False)):
        x["ecall"][0] = v
        assert feasible(pb, x, FREE) is ok
        assert feasible(pb, x, Bounds()) is (v == 0.0)


def test_a_fold_without_moe_rows_takes_the_prior_and_with_them_fits_it() -> None:
    sens = _synthetic(12e-6)
    start = {"h100": BASE.replace(expert_call_time=7e-6)}  # a starting profile fitted elsewhere
    moe = (sens.ecall != sens.base).to_numpy()
    without = fit_fold(sens, start, ~moe, bounds=FREE)
    assert without.profiles["h100"].expert_call_time == 0.0  # never the start's value, which saw every row
    assert any("ecall: no training row moves it" in n for n in without.notes)
    with_rows = fit_fold(sens, start, np.ones(len(sens), bool), bounds=FREE)
    # the rows were linearised at the start's 7 us: they ask for 12 us more
    assert with_rows.profiles["h100"].expert_call_time == pytest.approx(19e-6, abs=0.1e-6)
    assert with_rows.fitted_params["h100"] == without.fitted_params["h100"] + 1  # counted only where fitted
    assert not any("expert_call_time" in n for n in with_rows.notes)  # 19 us: inside the range, no bound note
    top = fit_fold(_synthetic(60e-6), {"h100": BASE}, np.ones(len(sens), bool), bounds=FREE)
    assert any("expert_call_time = 2.50e-05 s (bound" in n for n in top.notes)
    pinned = fit_fold(sens, {"h100": BASE}, np.ones(len(sens), bool))
    assert not any("at bound: expert_call_time" in n for n in pinned.notes)  # pinned: no bound to report
    assert pinned.profiles["h100"].expert_call_time == 0.0 and pinned.fitted_params["h100"] == without.fitted_params["h100"]
    old = fit_fold(sens.drop(columns=["ecall"]), start, np.ones(len(sens), bool), bounds=FREE)  # a table of before
    assert old.profiles["h100"].expert_call_time == 0.0 and old.fitted_params["h100"] == without.fitted_params["h100"]
    pb = first_order_problem(sens, start)
    assert all_evidence(pb, moe)["ecall"].all() and not all_evidence(pb, ~moe)["ecall"].any()
