"""DualPipe's paired chunks hide the EP all-to-all in the engine (no overlap knob), on synthetic
stage costs: the closed forms of the pair (max of the two streams) and their consequences."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.costs import ChunkCost, StageCost
from clustersim.simulator.step.engine import EngineInput, run
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies.presets import dgx_h100_pod
from clustersim.workloads import TrainingSpec, get_model


def _chunk(k: int, a2a: float, *, exposed: float = 0.0) -> ChunkCost:
    """F 1 s, B 1 s, W 1 s of compute; ``a2a`` s of hideable all-to-all per F and per B."""
    z = 0.0
    return ChunkCost(chunk=k, fwd=1.0, bwd_input=1.0, bwd_weight=1.0, recompute=z, tp_fwd=z, tp_bwd=z,
                     cp_fwd=z, cp_bwd=z, ep_fwd=exposed, ep_bwd=exposed, dp_fwd=z, dp_bwd=z, flops=1.0,
                     recompute_flops=z, buckets=(), param_gather=z, ep_a2a_fwd=a2a, ep_a2a_bwd=a2a)


def _run(a2a: float, pp: int = 4, m: int = 32, *, exposed: float = 0.0) -> tuple[float, float, int]:
    """(step time, exposed EP seconds on stage 1, paired passes on stage 1) of DualPipe."""
    stages = tuple(StageCost(stage=s, chunks=(_chunk(s, a2a, exposed=exposed), _chunk(pp - 1 - s, a2a, exposed=exposed)),
                             p2p=0.0, optimizer=0.0) for s in range(pp))
    inp = EngineInput(stages=stages, schedule="dualpipe", microbatches=m, vpp=2, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, pp)))
    log, t = run(inp, extrapolate=False)
    ep = sum(iv.end - iv.start for iv in log if iv.stage == 1 and iv.category == "exposed_ep")
    pairs = sum(1 for iv in log if iv.stage == 1 and iv.stream == "ep")
    return t, ep, pairs


def test_zero_cost_all_to_all_equals_no_ep() -> None:
    # DeepSeek-V3 report Table 2 bubble with F = B = W = 1: m (F + B + W) + (pp/2 - 1)(F&B + B - 3W)
    pp, m = 4, 32
    t, ep, pairs = _run(0.0, pp, m)
    assert pairs == 0 and ep == 0.0
    assert t == pytest.approx(m * 3.0 + (pp / 2 - 1) * (3 + 1 - 3))


def test_all_to_all_shorter_than_paired_compute_is_hidden_in_pairs() -> None:
    pp, m, a2a = 4, 32, 0.4  # a pair: compute F + B = 2 s, all-to-alls 2 x 0.4 = 0.8 s < 2 s
    t0, _, _ = _run(0.0, pp, m)
    t, ep, pairs = _run(a2a, pp, m)
    assert pairs > m // 2  # the steady state runs paired
    alone = 2 * m - 2 * pairs  # F and B passes of stage 1 that found no partner (warm-up, drain)
    assert ep == pytest.approx(alone * a2a)  # exposed only where a pass ran alone
    assert ep < 0.25 * 2 * m * a2a  # most of the step's all-to-all is hidden
    assert t - t0 < 0.25 * 2 * m * a2a


def test_exposure_grows_once_all_to_all_exceeds_the_paired_compute() -> None:
    pp, m = 4, 32
    eps = [_run(a2a, pp, m)[1] for a2a in (0.5, 1.0, 1.5, 2.0)]
    _, _, pairs = _run(1.5, pp, m)
    assert all(b > a for a, b in zip(eps, eps[1:]))
    # per pair, what 2 x a2a outlasts the 2 s of compute is exposed: 2 x 1.5 - 2 = 1 s each
    _, ep_short, pairs_short = _run(1.0, pp, m)  # 2 x 1.0 = 2 s: exactly the compute, nothing left
    alone_short = 2 * m - 2 * pairs_short
    assert ep_short == pytest.approx(alone_short * 1.0)
    assert eps[2] == pytest.approx((2 * m - 2 * pairs) * 1.5 + pairs * (2 * 1.5 - 2.0))


def test_an_explicit_override_is_not_paired() -> None:
    # ep_fwd/ep_bwd carry an override's exposed share; nothing is hideable, so nothing pairs
    t, ep, pairs = _run(0.0, exposed=0.3)
    assert pairs == 0 and ep == pytest.approx(2 * 32 * 0.3)


def test_paired_steady_state_extrapolates_exactly() -> None:
    pp, m = 4, 96
    stages = tuple(StageCost(stage=s, chunks=(_chunk(s, 0.7), _chunk(pp - 1 - s, 0.7)), p2p=0.05, optimizer=0.0)
                   for s in range(pp))
    inp = EngineInput(stages=stages, schedule="dualpipe", microbatches=m, vpp=2, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, pp)))
    assert run(inp)[1] == pytest.approx(run(replace(inp), extrapolate=False)[1], rel=1e-9)


def _simulate(schedule: str, pp: int = 2, **plan: object) -> tuple[float, float]:
    """(step time, exposed EP seconds) of Qwen3-30B-A3B, EP16 over two 8-GPU H100 nodes, PP2."""
    kw = dict(tp=1, pp=pp, dp=32 // pp, ep=16, micro_batch=1, schedule=schedule, zero=1)
    if schedule == "interleaved":
        kw["vpp"] = 2
    res = simulate(get_model("qwen3-30b-a3b"), TrainingSpec(seq_len=4096, global_batch_size=512),
                   dgx_h100_pod(32), ParallelPlan(**{**kw, **plan}))  # type: ignore[arg-type]
    return res.step_time, res.breakdown["exposed_ep"]


@pytest.mark.parametrize(("schedule", "pp"), [("1f1b", 1), ("interleaved", 2)])
def test_megatron_ep_overlap_pairs_the_steady_state(schedule: str, pp: int) -> None:
    t_off, ep_off = _simulate(schedule, pp)
    t_zero, ep_zero = _simulate(schedule, pp, ep_comm_overlap=0.0)  # the override at 0 = no overlap
    t_on, ep_on = _simulate(schedule, pp, ep_overlap=True)
    assert (t_off, ep_off) == pytest.approx((t_zero, ep_zero))
    assert ep_off > 0 and ep_on < 0.5 * ep_off and t_on < t_off


def test_plain_1f1b_over_stages_cannot_pair() -> None:
    # Megatron-Core asks for a virtual pipeline when pp > 1: a plain 1F1B's pairs would wait on
    # each other across the two stages
    from clustersim.simulator.errors import PlanError
    with pytest.raises(PlanError, match="ep_overlap"):
        _simulate("1f1b", 2, ep_overlap=True)
