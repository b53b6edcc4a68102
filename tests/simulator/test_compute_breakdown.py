"""The compute part of the breakdown, split by where it goes, sums to compute on every schedule."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.plan.plan import ParallelPlan, num_microbatches
from clustersim.simulator.step.compute import COMPUTE_PARTS, peak_for
from clustersim.simulator.step.partition import chunk_ops, stage_chunks
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

MODEL = get_model("llama2-7b")
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=32)
PLANS = [
    ParallelPlan(tp=2, pp=4, dp=2, micro_batch=1, schedule="1f1b", recompute="selective"),
    ParallelPlan(tp=2, pp=4, dp=2, micro_batch=1, schedule="interleaved", vpp=2, recompute="full"),
    ParallelPlan(tp=4, pp=2, dp=2, micro_batch=2, schedule="zb-h1"),
    ParallelPlan(tp=2, pp=4, dp=2, micro_batch=1, schedule="dualpipe", recompute="none"),
]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_parts_sum_to_compute_and_gemm_ideal_is_the_gemm_flops_at_peak(plan: ParallelPlan) -> None:
    cluster = get_cluster("dgx-h100", 16)
    r = simulate(MODEL, TRAINING, cluster, plan)
    parts = r.compute_breakdown
    assert set(parts) == set(COMPUTE_PARTS)
    assert all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == pytest.approx(r.breakdown["compute"], rel=1e-9)
    assert (parts["recompute"] > 0) == (plan.recompute != "none")
    # closed form: GEMM FLOPs (fwd + bwd, causal fraction) of the critical stage's chunks x passes / peak
    stage = max(range(plan.pp), key=lambda s: r.stage_breakdowns[s]["compute"])
    m = num_microbatches(plan, TRAINING)
    passes = [m // 2, m - m // 2] if plan.schedule == "dualpipe" else [m] * plan.vpp
    crit_stage = [s for s in range(plan.pp) if r.stage_breakdowns[s] is r.breakdown or r.stage_breakdowns[s] == r.breakdown]
    s = crit_stage[0] if crit_stage else stage
    flops = sum(n * sum((o.flops + o.bwd_flops) * o.causal_flops_fraction for o in chunk_ops(MODEL, TRAINING, plan, k, layers)
                        if o.kind in ("gemm", "bmm"))
                for n, (k, layers) in zip(passes, stage_chunks(plan, MODEL.num_layers)[s]))
    assert parts["gemm_ideal"] == pytest.approx(flops / peak_for(cluster.accelerator, "bf16", True), rel=1e-9)


def test_full_mode_straggler_scales_the_parts() -> None:
    plan = PLANS[0]
    cluster = get_cluster("dgx-h100", 16)
    scale = np.ones(16)
    scale[3] = 1.5
    r = simulate(MODEL, TRAINING, cluster, plan, mode="full", compute_scale=scale)
    assert sum(r.compute_breakdown.values()) == pytest.approx(r.breakdown["compute"], rel=1e-9)
    row = r.to_row()
    assert sum(row[f"c_{p}"] for p in COMPUTE_PARTS) == pytest.approx(row["t_compute"], rel=1e-9)
    assert row["tflops_per_gpu"] == pytest.approx(r.mfu * r.peak_flops / 1e12, rel=1e-12)
    assert row["memory_headroom_gib"] == pytest.approx(80.0 - r.peak_memory / 2**30)
