"""Engine against closed forms, on synthetic stage costs (no workload, no network)."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.step.engine import EngineInput, run
from clustersim.simulator.step.costs import Bucket, ChunkCost, StageCost
from clustersim.simulator.step.result import breakdown_of, critical_unit
from clustersim.simulator.plan.schedules import in_flight_peak, stage_program


def chunk(k: int, f: float, b: float, w: float = 0.0, buckets: tuple = (), gather: float = 0.0) -> ChunkCost:
    z = 0.0
    return ChunkCost(chunk=k, fwd=f, bwd_input=b, bwd_weight=w, recompute=z, tp_fwd=z, tp_bwd=z, cp_fwd=z,
                     cp_bwd=z, ep_fwd=z, ep_bwd=z, dp_fwd=z, dp_bwd=z, flops=1.0, recompute_flops=z,
                     buckets=buckets, param_gather=gather)


def stages(pp: int, f: float, b: float, *, vpp: int = 1, w: float = 0.0, p2p: float = 0.0,
           buckets: tuple = (), opt: float = 0.0) -> tuple[StageCost, ...]:
    return tuple(
        StageCost(stage=s, chunks=tuple(chunk(v * pp + s, f, b, w, buckets) for v in range(vpp)), p2p=p2p, optimizer=opt)
        for s in range(pp)
    )


def step(pp: int, m: int, schedule: str, f: float = 1.0, b: float = 2.0, **kw: object) -> float:
    vpp = int(kw.pop("vpp", 1))
    w = float(kw.pop("w", 0.0))
    st = stages(pp, f, b, vpp=vpp, w=w, **kw)  # type: ignore[arg-type]
    inp = EngineInput(stages=st, schedule=schedule, microbatches=m, vpp=vpp, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, pp)))
    return run(inp)[1]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp,m", [(1, 4), (2, 4), (4, 8), (8, 8), (4, 32)])
def test_bubble_closed_form(schedule: str, pp: int, m: int) -> None:
    # With free communication: step = (m + p - 1)(f + b); bubble share (p-1)/(m+p-1).
    f, b = 1.0, 2.0
    assert step(pp, m, schedule, f, b) == pytest.approx((m + pp - 1) * (f + b), rel=1e-9)


def test_interleaving_divides_bubble_by_v() -> None:
    # Megatron (Narayanan et al. 2021): the interleaved bubble is (p-1)/v chunk-times of a full stage.
    pp, m, v = 4, 8, 2
    f, b = 1.0, 2.0
    t = step(pp, m, "interleaved", f / v, b / v, vpp=v)
    bubble = t - m * (f + b)
    assert bubble == pytest.approx((pp - 1) * (f + b) / v, rel=1e-9)


def test_zero_bubble_beats_1f1b_same_memory() -> None:
    pp, m = 4, 8
    t_1f1b = step(pp, m, "1f1b", 1.0, 2.0)
    t_zb = step(pp, m, "zb-h1", 1.0, 1.0, w=1.0)
    assert t_zb < t_1f1b
    for s in range(pp):
        assert in_flight_peak(stage_program("zb-h1", s, pp, m)) == in_flight_peak(stage_program("1f1b", s, pp, m))


def test_more_microbatches_shrink_bubble_share() -> None:
    shares = []
    for m in (4, 8, 16, 32):
        t = step(4, m, "1f1b")
        shares.append((t - m * 3.0) / t)
    assert shares == sorted(shares, reverse=True)


def test_p2p_latency_never_speeds_up() -> None:
    times = [step(4, 8, "1f1b", p2p=p) for p in (0.0, 0.01, 0.1, 0.5)]
    assert times == sorted(times)


def test_dp_buckets_overlap_and_expose_tail() -> None:
    # One bucket of 0.5 s released at the end of the last backward is fully exposed.
    tail = (Bucket(at=1.0, time=0.5),)
    assert step(1, 2, "1f1b", buckets=tail) == pytest.approx(2 * 3.0 + 0.5)
    # Released half-way through the last backward (2 s), 0.5 s of reduction is hidden.
    mid = (Bucket(at=0.5, time=0.5),)
    assert step(1, 2, "1f1b", buckets=mid) == pytest.approx(2 * 3.0)


def test_breakdown_sums_to_step_time() -> None:
    st = stages(4, 1.0, 2.0, p2p=0.05, buckets=(Bucket(at=1.0, time=0.3),), opt=0.2)
    inp = EngineInput(stages=st, schedule="1f1b", microbatches=8, vpp=1, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, 4)))
    log, t = run(inp)
    r, s = critical_unit(log)
    bd = breakdown_of(log, r, s, t)
    assert sum(bd.values()) == pytest.approx(t, rel=1e-12)
    assert bd["compute"] == pytest.approx(8 * 3.0)
    assert bd["optimizer"] == pytest.approx(0.2)
    assert bd["bubble"] > 0 and bd["exposed_pp"] > 0


def test_straggler_gates_the_step_and_never_speeds_it() -> None:
    pp, m = 2, 4
    st = stages(pp, 1.0, 2.0, buckets=(Bucket(at=1.0, time=0.1),))
    base = run(EngineInput(st, "1f1b", m, 1, True, True, np.ones((3, pp))))[1]
    slow = np.ones((3, pp))
    slow[1, 0] = 1.5
    t = run(EngineInput(st, "1f1b", m, 1, True, True, slow))[1]
    assert t > base
    assert base == pytest.approx(run(EngineInput(st, "1f1b", m, 1, True, True, np.ones((1, pp))))[1])


def test_dualpipe_bubble_matches_deepseek_formula() -> None:
    # DeepSeek-V3 report, Table 2: DualPipe bubble (PP/2 - 1)(F&B + B - 3W); with F = B = W = 1
    # and no overlap, F&B = 3: (4/2 - 1)(3 + 1 - 3) = 1 time unit on top of m (F + B + W).
    pp, m = 4, 16
    t = step(pp, m, "dualpipe", 1.0, 1.0, w=1.0, vpp=2)
    assert t == pytest.approx(m * 3.0 + (pp / 2 - 1) * (3 + 1 - 3))
    assert t < step(pp, m, "zb-h1", 1.0, 1.0, w=1.0) < step(pp, m, "1f1b", 1.0, 2.0)


def _gather_step(gather: float, lead: float, overlap: bool = True) -> tuple[float, float]:
    """(step time, exposed DP seconds) of one stage, 2 micro-batches, a ZeRO-1/2 gather."""
    c = ChunkCost(chunk=0, fwd=1.0, bwd_input=2.0, bwd_weight=0.0, recompute=0.0, tp_fwd=0.0, tp_bwd=0.0,
                  cp_fwd=0.0, cp_bwd=0.0, ep_fwd=0.0, ep_bwd=0.0, dp_fwd=0.0, dp_bwd=0.0, flops=1.0,
                  recompute_flops=0.0, buckets=(), param_gather=gather, param_gather_lead=lead)
    inp = EngineInput(stages=(StageCost(stage=0, chunks=(c,), p2p=0.0, optimizer=0.0),), schedule="1f1b",
                      microbatches=2, vpp=1, overlap_grad_reduce=True, overlap_param_gather=overlap,
                      scale=np.ones((1, 1)))
    intervals, t = run(inp)
    return t, sum(iv.end - iv.start for iv in intervals if iv.category == "exposed_dp")


def test_layer_pipelined_param_gather_exposes_only_its_lead() -> None:
    # compute alone: 2 x (F 1 + B 2) = 6 s
    whole, exposed_whole = _gather_step(gather=1.5, lead=-1.0)  # forward waits for the whole gather
    assert whole == pytest.approx(7.5) and exposed_whole == pytest.approx(1.5)
    piped, exposed = _gather_step(gather=1.5, lead=0.25)  # layer by layer: only the lead is exposed
    assert piped == pytest.approx(6.25) and exposed == pytest.approx(0.25)
    unhidden, _ = _gather_step(gather=1.5, lead=0.25, overlap=False)  # after the optimizer, all of it
    assert unhidden == pytest.approx(7.5)
