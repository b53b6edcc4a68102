"""simulate() end to end: bounds, conservation, monotonicity, determinism, symmetric == full."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.errors import OutOfMemoryError, PlanError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.result import CATEGORIES
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

TRAIN = TrainingSpec(seq_len=2048, global_batch_size=64, precision="bf16")


def run(gpus: int = 16, model: str = "llama3-8b", cluster: str = "dgx-h100", training: TrainingSpec = TRAIN, **plan: object):
    p = ParallelPlan(**{"tp": 2, "pp": 2, "dp": gpus // 4, "sp": True, **plan})  # type: ignore[arg-type]
    return simulate(get_model(model), training, get_cluster(cluster, gpus), p)


def test_bounds_mfu_and_compute_lower_bound() -> None:
    r = run()
    assert 0.0 < r.mfu <= 1.0 and r.mfu <= r.hfu
    # no step is faster than the model FLOPs at peak on every device
    assert r.step_time >= r.ideal_compute_s
    assert r.step_time >= r.breakdown["compute"]


def test_breakdown_sums_to_step_time() -> None:
    r = run(schedule="interleaved", vpp=2, pp=2, zero=1)
    assert set(r.breakdown) == set(CATEGORIES)
    assert sum(r.breakdown.values()) == pytest.approx(r.step_time, rel=1e-9)
    assert all(v >= 0 for v in r.breakdown.values())


@pytest.mark.parametrize("recompute,factor", [("none", 0.0), ("full", 1.0)])
def test_flop_conservation_with_recompute(recompute: str, factor: float) -> None:
    # FLOPs summed over all ranks = (device-local fwd+bwd FLOPs) x (1 + recompute share of forward).
    base = run(recompute="none")
    r = run(recompute=recompute)
    fwd_share = 1.0 / 3.0  # forward = 1/3 of fwd+bwd for GEMMs and attention
    model = get_model("llama3-8b")
    # the output layer (6 * V * h per token) is not recomputed, only the transformer layers
    embed = 6 * model.vocab_size * model.hidden_size * TRAIN.tokens_per_step
    recomputed = r.hardware_flops - r.model_flops
    assert recomputed == pytest.approx(factor * fwd_share * (base.device_flops - embed), rel=0.01)
    # the device FLOPs are the model's FLOPs: the PaLM 6N counts only parameters that multiply,
    # so the input-embedding lookup (6 * V * h per token if it were counted) is left out of both
    assert base.device_flops == pytest.approx(base.model_flops, rel=0.01)


def test_more_bandwidth_never_slows_a_step() -> None:
    model, gpus = get_model("llama3-8b"), 32
    plan = ParallelPlan(tp=2, pp=2, dp=8, sp=True)
    times = []
    for gbps in (100, 200, 400, 800):
        cluster = get_cluster("dgx-h100", gpus, nic_bandwidth=gbps * 1e9 / 8)
        times.append(simulate(model, TRAIN, cluster, plan).step_time)
    assert times == sorted(times, reverse=True)
    assert times[0] > times[-1]


def test_more_microbatches_shrink_bubble_share() -> None:
    shares = []
    for gbs in (16, 32, 64, 128):
        r = run(training=dataclasses.replace(TRAIN, global_batch_size=gbs), pp=4, tp=1, dp=4)
        shares.append(r.breakdown["bubble"] / r.step_time)
    assert shares == sorted(shares, reverse=True)


def test_deterministic_byte_for_byte() -> None:
    a, b = run(seed=0) if False else run(), run()
    assert a.to_dict() == b.to_dict()
    assert a.provenance["input_hash"] == b.provenance["input_hash"]
    c = run(micro_batch=2)
    assert c.provenance["input_hash"] != a.provenance["input_hash"]


@pytest.mark.parametrize("gpus,plan", [
    (16, dict(tp=2, pp=2, dp=4)),
    (32, dict(tp=4, pp=2, dp=4, zero=1)),
    (64, dict(tp=8, pp=4, dp=2, schedule="interleaved", vpp=2)),
])
def test_symmetric_equals_full(gpus: int, plan: dict) -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", gpus)
    p = ParallelPlan(sp=True, **plan)
    sym = simulate(model, TRAIN, cluster, p)
    full = simulate(model, TRAIN, cluster, p, mode="full")
    assert full.step_time == pytest.approx(sym.step_time, rel=0.01)
    assert full.rank_wait_time is not None and len(full.rank_wait_time) == gpus


def test_full_mode_straggler_slows_and_waits_show_it() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", 16)
    p = ParallelPlan(tp=2, pp=2, dp=4, sp=True)
    base = simulate(model, TRAIN, cluster, p, mode="full")
    scale = np.ones(16)
    scale[5] = 1.3
    slow = simulate(model, TRAIN, cluster, p, mode="full", compute_scale=scale)
    assert slow.step_time > base.step_time
    waits = np.array(slow.rank_wait_time)
    assert waits[5] == waits.min()  # the straggler is the one that never waits for others


def test_plan_errors_name_the_numbers() -> None:
    with pytest.raises(PlanError, match=r"dp\(2\) \* tp\(2\) \* pp\(2\) \* cp\(1\) = 8 != cluster GPUs 16"):
        run(dp=2)
    with pytest.raises(PlanError, match="does not divide num_heads"):
        run(model="tiny", tp=8, pp=1, dp=2)
    with pytest.raises(PlanError, match="not a multiple of dp"):
        run(micro_batch=3)


def test_out_of_memory_names_the_largest_part() -> None:
    with pytest.raises(OutOfMemoryError, match="largest part: activations"):
        run(gpus=8, model="llama3-8b", tp=1, pp=1, dp=8, micro_batch=8,
            training=dataclasses.replace(TRAIN, seq_len=8192))


def test_calibration_profile_changes_compute() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", 16)
    p = ParallelPlan(tp=2, pp=2, dp=4, sp=True)
    slow = CalibrationProfile(gemm_efficiency=[(1e6, 0.1), (1e13, 0.3)])
    fast = CalibrationProfile(gemm_efficiency=[(1e6, 0.5), (1e13, 0.9)])
    assert simulate(model, TRAIN, cluster, p, profile=slow).step_time > simulate(model, TRAIN, cluster, p, profile=fast).step_time
