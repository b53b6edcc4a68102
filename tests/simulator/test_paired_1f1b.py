"""Megatron-Core's combined 1F1B (``overlap_moe_expert_parallel_comm``) as the engine runs it: one
more warm-up forward, then every steady forward paired with a backward of another micro-batch,
started once both inputs are there; the paired compute slowed while the all-to-alls run beside it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from clustersim.simulator.plan.schedules import (
    in_flight_peak,
    paired_in_flight_peak,
    paired_program,
    stage_in_flight_peak,
    stage_program,
)
from clustersim.simulator.step.costs import ChunkCost, StageCost
from clustersim.simulator.step.engine import EngineInput, run
from clustersim.simulator.step.lower_dp import overlapped_duration

CASES = [("1f1b", pp, 1, m) for pp in (1, 2, 4) for m in (3, 8, 13)] + [
    ("interleaved", pp, vpp, m) for pp in (2, 4) for vpp in (2, 3) for m in (pp, 2 * pp, 3 * pp)]


def _warmup(program: list[tuple[str, int, int]]) -> int:
    return next((i for i, a in enumerate(program) if a[0] == "B"), len(program))


@pytest.mark.parametrize(("schedule", "pp", "vpp", "m"), CASES)
def test_paired_program_is_one_more_warmup_then_independent_pairs(schedule: str, pp: int, vpp: int, m: int) -> None:
    for s in range(pp):
        steps = paired_program(schedule, s, pp, m, vpp)
        flat = [a for step in steps for a in step]
        plain = stage_program(schedule, s, pp, m, vpp)
        assert flat == stage_program(schedule, s, pp, m, vpp, paired=True)
        assert sorted(flat) == sorted(plain)  # the same passes, in Megatron's paired order
        total = m * vpp
        assert _warmup(flat) == min(_warmup(plain) + 1, total)
        seen: set[tuple[str, int, int]] = set()
        for step in steps:
            if len(step) == 2:
                f, b = step
                assert f[0] == "F" and b[0] == "B"
                # independent: the backward's own forward ran in an earlier step, never in this pair
                assert ("F", b[1], b[2]) in seen and f[1:] != b[1:]
            seen.update(step)
        assert sum(len(step) == 2 for step in steps) == total - _warmup(plain)  # plain: its warm-up + 1 F


@pytest.mark.parametrize(("schedule", "pp", "vpp", "m"), CASES)
def test_pairing_holds_no_more_activations_than_the_plain_schedule(schedule: str, pp: int, vpp: int, m: int) -> None:
    # a pair frees layer by layer as it holds: the extra warm-up forward takes the place of the
    # plain steady state's forward-before-backward
    rng = np.random.default_rng(7)
    weights = rng.uniform(0.5, 2.0, size=vpp)
    for s in range(pp):
        steps = paired_program(schedule, s, pp, m, vpp)
        plain = stage_program(schedule, s, pp, m, vpp)
        for w in (None, weights):
            assert paired_in_flight_peak(steps, w) == pytest.approx(in_flight_peak(plain, w))
            assert stage_in_flight_peak(schedule, s, pp, m, vpp, w, paired=True) == pytest.approx(
                stage_in_flight_peak(schedule, s, pp, m, vpp, w))
        # walked pass by pass the extra forward would count one more micro-batch: the pair's order matters
        flat = [a for step in steps for a in step]
        if any(len(step) == 2 for step in steps):
            assert in_flight_peak(flat) == in_flight_peak(plain) + 1


def _chunk(a2a: float) -> ChunkCost:
    """F 1 s, B 1 s + W 1 s of compute; ``a2a`` s of hideable all-to-all per F and per B."""
    z = 0.0
    return ChunkCost(chunk=0, fwd=1.0, bwd_input=1.0, bwd_weight=1.0, recompute=z, tp_fwd=z, tp_bwd=z,
                     cp_fwd=z, cp_bwd=z, ep_fwd=z, ep_bwd=z, dp_fwd=z, dp_bwd=z, flops=1.0,
                     recompute_flops=z, buckets=(), param_gather=z, ep_a2a_fwd=a2a, ep_a2a_bwd=a2a)


@pytest.mark.parametrize(("a2a", "slow"), [(0.4, 0.0), (0.4, 0.189), (1.2, 0.3), (2.0, 0.189), (0.0, 0.189)])
def test_no_pipelining_pairs_in_closed_form(a2a: float, slow: float) -> None:
    # pp = 1 (combined_1f1b_schedule_for_no_pipelining): F0 alone, then (F i+1, B i), then the last
    # B alone; a pair lasts the longer of its all-to-alls (2 a) and its 3 s of compute slowed by
    # 1 + f while they run beside it
    m = 8
    stage = StageCost(stage=0, chunks=(_chunk(a2a),), p2p=0.0, optimizer=0.0)
    inp = EngineInput(stages=(stage,), schedule="1f1b", microbatches=m, vpp=1, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, 1)), paired=True, ep_slowdown=slow)
    log, t = run(inp, extrapolate=False)
    pair = max(2 * a2a, overlapped_duration(3.0, 2 * a2a, slow))
    assert t == pytest.approx((1 + a2a) + (m - 1) * pair + (2 + a2a))
    exposed = sum(iv.end - iv.start for iv in log if iv.category == "exposed_ep")
    compute = sum(iv.end - iv.start for iv in log if iv.category == "compute")
    assert compute == pytest.approx(3.0 * m) and exposed == pytest.approx(t - 3.0 * m)
    assert run(inp)[1] == pytest.approx(t, rel=1e-9)  # the extrapolated steady state, exactly


def _interleaved(scale: float, slow: float) -> float:
    pp, m, vpp = 4, 32, 2

    def chunk(v: int) -> ChunkCost:
        c = _chunk(0.9)
        return replace(c, chunk=v, fwd=c.fwd * scale, bwd_input=c.bwd_input * scale, bwd_weight=c.bwd_weight * scale)

    stages = tuple(StageCost(stage=s, chunks=(chunk(0), chunk(1)), p2p=0.05, optimizer=0.0) for s in range(pp))
    inp = EngineInput(stages=stages, schedule="interleaved", microbatches=m, vpp=vpp, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, pp)), paired=True, ep_slowdown=slow)
    return run(inp)[1]


def test_the_paired_step_is_monotone_in_compute_and_in_the_slowdown() -> None:
    # the pairs no longer depend on which input arrived first: a slower GPU never gives a
    # shorter step, a larger slowdown never a shorter one, and neither jumps
    scales = np.linspace(0.8, 1.2, 9)
    times = [_interleaved(k, 0.189) for k in scales]
    assert all(b >= a - 1e-9 for a, b in zip(times, times[1:]))
    assert all(b / a <= 1.07 for a, b in zip(times, times[1:]))  # at most the compute step (0.85 / 0.8)
    slows = [0.0, 0.05, 0.1, 0.189, 0.3, 0.4]
    by_f = [_interleaved(1.0, f) for f in slows]
    assert all(b >= a - 1e-9 for a, b in zip(by_f, by_f[1:]))
    assert by_f[-1] - by_f[0] <= 0.4 * 3.0 * 32 * 2  # at most f x the paired compute


def test_a_published_paired_plan_never_gets_faster_on_a_slower_gpu() -> None:
    # Qwen3-235B-A22B on 256 GB300 (Megatron-Bridge, PP4 VPP12 EP32, EP overlap): before the fix a
    # 2 % slower GPU made the step 12 % longer, and a 10 % slower one shorter than a 8 % slower one
    from clustersim.simulator.calibration.validate import (SYSTEM_OF_PART, default_profile, load_runs, part_of_row,
                                                           scenario_for_row)
    from clustersim.simulator.step import simulate_step

    runs = load_runs()
    row = {str(k): v for k, v in runs[runs.row_id == 351].iloc[0].to_dict().items()}
    prof = default_profile(SYSTEM_OF_PART[part_of_row(row)][1])
    sc = scenario_for_row(row, None, prof)
    assert sc.plan.paired_steady
    times = []
    for k in (0.90, 0.92, 0.94, 0.96, 0.98, 1.0):
        acc = replace(sc.cluster.accelerator, peak_flops={p: v * k for p, v in sc.cluster.accelerator.peak_flops.items()})
        times.append(simulate_step(sc.model, sc.training, replace(sc.cluster, accelerator=acc), sc.plan,
                                   profile=prof).step_time)
    assert all(b <= a for a, b in zip(times, times[1:]))
    assert all(a / b <= 1.025 for a, b in zip(times, times[1:]))


def test_the_paired_interleaved_steady_state_extrapolates_exactly() -> None:
    pp, m, vpp = 4, 48, 2
    stages = tuple(StageCost(stage=s, chunks=(replace(_chunk(0.9), chunk=0), replace(_chunk(1.7), chunk=1)),
                             p2p=0.05, optimizer=0.0) for s in range(pp))
    inp = EngineInput(stages=stages, schedule="interleaved", microbatches=m, vpp=vpp, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, pp)), paired=True, ep_slowdown=0.189)
    assert run(inp)[1] == pytest.approx(run(inp, extrapolate=False)[1], rel=1e-9)


# ---- one pair, layer by layer (step.pairing: Megatron-Core's TransformerLayerSchedulePlan.run) ----

from clustersim.simulator.step.pairing import PassSplit, combined_pair  # noqa: E402


def _split(layers: int, attn: float, mlp: float, a2a: float, attn_w: float = 0.0, mlp_w: float = 0.0) -> PassSplit:
    return PassSplit(layers=layers, attn=attn, mlp=mlp, dispatch=a2a, combine=a2a, attn_w=attn_w, mlp_w=mlp_w)


def test_a_pair_without_all_to_alls_is_its_compute_and_without_compute_its_all_to_alls() -> None:
    f, b = _split(3, 0.4, 0.3, 0.0), _split(3, 0.5, 0.4, 0.0, 0.2, 0.3)
    t, done = combined_pair(f, b, 0.189)
    assert t == pytest.approx(3 * (0.4 + 0.3 + 0.5 + 0.4 + 0.2 + 0.3))  # one compute stream, nothing beside it
    f0, b0 = _split(3, 0.0, 0.0, 0.25), _split(3, 0.0, 0.0, 0.35)
    assert combined_pair(f0, b0, 0.189)[0] == pytest.approx(3 * 2 * (0.25 + 0.35))  # one EP stream


def test_one_layer_by_hand() -> None:
    # comm: combine_B [0, 1]; dispatch_F [max(1, attn_F 0.5), 2]; dispatch_B [max(2, mlp_B 1.7), 3];
    # combine_F [max(3, mlp_F 2.0 + 0.6), 4]; compute: attn_F [0, 0.5], mlp_B [1, 1.7], mlp_w [1.7, 2.0],
    # mlp_F [max(2.0, dispatch_F 2), 2.6], attn_B [max(2.6, dispatch_B 3), 3.8], attn_w [3.8, 4.1]
    f, b = _split(1, 0.5, 0.6, 1.0), _split(1, 0.8, 0.7, 1.0, attn_w=0.3, mlp_w=0.3)
    t, done = combined_pair(f, b)
    assert t == pytest.approx(4.1) and done == pytest.approx(4.0)


@pytest.mark.parametrize("a2a", [0.05, 0.2, 0.5, 1.0])
def test_a_pair_lies_between_its_chains_and_running_apart(a2a: float) -> None:
    f, b = _split(4, 0.4, 0.3, a2a), _split(4, 0.5, 0.4, a2a, 0.2, 0.3)
    t = combined_pair(f, b)[0]
    apart = 4 * (0.4 + 0.3 + 2 * a2a) + 4 * (0.5 + 0.4 + 0.2 + 0.3 + 2 * a2a)
    chains = 4 * max(0.4 + 0.3 + 2 * a2a, 0.5 + 0.4 + 2 * a2a)  # each pass's own chain, layer after layer
    streams = max(4 * (0.4 + 0.3 + 0.5 + 0.4 + 0.2 + 0.3), 4 * 4 * a2a)
    assert max(chains, streams) - 1e-12 <= t <= apart + 1e-12
    slowed = [combined_pair(f, b, x)[0] for x in (0.0, 0.1, 0.189, 0.4)]
    assert all(y >= x - 1e-12 for x, y in zip(slowed, slowed[1:]))
    assert slowed[-1] - slowed[0] <= 0.4 * 4 * (0.4 + 0.3 + 0.5 + 0.4 + 0.2 + 0.3) + 1e-12


def test_extra_layers_of_the_longer_pass_run_alone() -> None:
    f, b = _split(2, 0.4, 0.3, 0.2), _split(3, 0.5, 0.4, 0.2, 0.2, 0.3)
    t = combined_pair(f, b)[0]
    both = combined_pair(_split(2, 0.4, 0.3, 0.2), _split(2, 0.5, 0.4, 0.2, 0.2, 0.3))[0]
    chain = 0.2 + 0.4 + 0.2 + 0.5  # the third backward layer alone: combine, experts, dispatch, attention
    everything = chain + 0.2 + 0.3  # and its weight gradients after them
    assert both + chain - 1e-12 <= t <= both + everything + 1e-12


def _moe_chunk(a2a: float) -> ChunkCost:
    """A chunk of 2 MoE layers: F 1 s (0.4 s experts), B 1 + 1 s (0.4 + 0.4 s experts)."""
    return replace(_chunk(a2a), moe_layers=2, expert_fwd=0.4, expert_bwd_input=0.4, expert_bwd_weight=0.4)


@pytest.mark.parametrize(("a2a", "slow"), [(0.4, 0.0), (0.4, 0.189), (2.0, 0.189)])
def test_the_engine_runs_a_combined_pair_layer_by_layer(a2a: float, slow: float) -> None:
    m = 8
    chunk = _moe_chunk(a2a)
    stage = StageCost(stage=0, chunks=(chunk,), p2p=0.0, optimizer=0.0)
    inp = EngineInput(stages=(stage,), schedule="1f1b", microbatches=m, vpp=1, overlap_grad_reduce=True,
                      overlap_param_gather=True, scale=np.ones((1, 1)), paired=True, ep_slowdown=slow)
    f, b = chunk.split("F"), chunk.split("B")
    assert f is not None and b is not None
    pair = combined_pair(f, b, slow)[0]
    t = run(inp, extrapolate=False)[1]
    assert t == pytest.approx((1 + a2a) + (m - 1) * pair + (2 + a2a))
    # DualPipe keeps its own component schedule (the aggregate of its two streams)
    assert pair >= max(3.0, 2 * a2a)
