"""The EP all-to-alls inside passes as flows on the shared fabric (``fabric_sharing="flows"``): the
calls are the priced exposed EP exactly, an all-to-all beside a DP reduce-scatter on the same NICs
slows both by the max-min prediction, nothing overlapping gives the static pricing, and sharing
never makes a step faster."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import simpy

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.network.routing import fabric_of
from clustersim.simulator.network.sharing import FabricLoad, Transfer
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step import simulate as simulate_module
from clustersim.simulator.step.costs import Call
from clustersim.simulator.step.engine import EngineInput, run
from clustersim.simulator.step.fluid import FabricStreams
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import lower
from clustersim.simulator.step.result import CATEGORIES, breakdowns
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.step.streams import stream_transfers
from clustersim.topologies import get_cluster, segment_overrides
from clustersim.workloads import TrainingSpec, get_model

PROFILE = CalibrationProfile()
MB = 64 * 2**20
MOE = get_model("qwen3-30b-a3b")
TRAIN = TrainingSpec(seq_len=4096, global_batch_size=64)
CLUSTER = get_cluster("dgx-h100", 32)


def _costing(plan: ParallelPlan) -> Costing:
    pricer = CommPricer(CLUSTER, Placement(plan, CLUSTER.gpus_per_node), PROFILE)
    return Costing(MOE, TRAIN, plan, CLUSTER.accelerator, PROFILE, pricer)


def _priced(c: Costing, call: Call | None) -> float:
    return 0.0 if call is None else call.count * c.pricer.time(call.kind, call.size, call.axis)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_ep_calls_are_the_priced_exposed_ep(recompute: str) -> None:
    # alltoall dispatcher, 1F1B (no pairing): the exposed EP of every pass is whole all-to-alls
    # (dispatch + combine per MoE layer; the full recompute's backward runs them twice)
    c = _costing(ParallelPlan(tp=1, pp=2, dp=16, ep=16, zero=1, recompute=recompute))  # type: ignore[arg-type]
    moe_layers = sum(MOE.is_moe_layer(i) for i in range(MOE.num_layers)) // 2
    for st in lower(c).stages:
        for ch in st.chunks:
            assert ch.ep_call_fwd is not None and ch.ep_call_bwd is not None
            assert ch.ep_call_fwd.count == 2 * moe_layers
            assert ch.ep_call_bwd.count == 2 * moe_layers * (2 if recompute == "full" else 1)
            assert _priced(c, ch.ep_call_fwd) == pytest.approx(ch.ep_fwd, rel=1e-12)
            assert _priced(c, ch.ep_call_bwd) == pytest.approx(ch.ep_bwd, rel=1e-12)
            assert ch.ep_fwd > 0


def test_ep_calls_absent_where_exposed_ep_is_not_whole_calls() -> None:
    for plan in (ParallelPlan(tp=1, dp=32, ep=16, ep_comm_overlap=0.5),
                 ParallelPlan(tp=1, dp=32, ep=16, moe_dispatcher="allgather"),
                 ParallelPlan(tp=1, dp=32, ep=1)):
        for st in lower(_costing(plan)).stages:
            assert all(ch.ep_call_fwd is None and ch.ep_call_bwd is None for ch in st.chunks)


def _finish_times(capacity: np.ndarray, transfers: list[Transfer], starts: list[float]) -> list[float]:
    env = simpy.Environment()
    fabric = FabricStreams(env, capacity)
    ends = [0.0] * len(transfers)

    def one(k: int) -> Any:
        yield env.timeout(starts[k])
        yield from fabric.run(transfers[k])
        ends[k] = env.now

    for k in range(len(transfers)):
        env.process(one(k))
    env.run()
    return ends


def test_alltoall_beside_dp_reduce_scatter_slows_both_by_max_min() -> None:
    # ep16 over two nodes: each GPU's NIC carries half of its all-to-all; the dp32 ring crosses
    # every NIC too. Alone, each saturates every NIC link it uses (checked), so while both run each
    # gets half: the shorter (bytes alone T1) ends at 2 T1, the longer (T2) at T1 + T2.
    c = _costing(ParallelPlan(tp=1, dp=32, ep=16))
    a2a = c.pricer.transfer("all_to_all", MB, "ep", 0, "ep")
    rs = c.pricer.transfer("reduce_scatter", 4 * MB, "dp", 0, "dp")
    assert a2a is not None and rs is not None and len(a2a.phases) == len(rs.phases) == 1
    cap = fabric_of(CLUSTER, PROFILE).capacity
    pa, pr = a2a.phases[0], rs.phases[0]
    ra, rr = pa.load / cap[pa.edges], pr.load / cap[pr.edges]
    common = np.intersect1d(pa.edges[np.isclose(ra, ra.max())], pr.edges[np.isclose(rr, rr.max())])
    assert len(common) >= 16  # both bottlenecked on the same NIC links
    t1, t2 = a2a.static_time - pa.delay, rs.static_time - pr.delay
    ends = _finish_times(cap, [a2a, rs], [1.0 - pa.delay, 1.0 - pr.delay])  # bytes of both start at t = 1
    short, long_ = sorted([t1, t2])
    assert sorted(e - 1.0 for e in ends) == pytest.approx([2 * short, short + long_], rel=1e-9)


@pytest.mark.parametrize("plan", [
    ParallelPlan(tp=1, dp=32, ep=16, zero=1, overlap_grad_reduce=False, overlap_param_gather=False),
    ParallelPlan(tp=1, dp=32, ep=16, zero=1, recompute="full", overlap_grad_reduce=False, overlap_param_gather=False),
])
def test_ep_flows_overlapping_nothing_are_the_static_pricing(plan: ParallelPlan) -> None:
    # one stage, buckets after the backward: the all-to-alls run alone on the fabric
    static = simulate(MOE, TRAIN, CLUSTER, plan)
    flows = simulate(MOE, TRAIN, CLUSTER, plan, fabric_sharing="flows")
    assert any(iv.stream == "ep" and iv.category == "ep_comm" for iv in flows.intervals)  # they ran as flows
    assert flows.step_time == pytest.approx(static.step_time, rel=1e-12)
    for cat in CATEGORIES:
        assert flows.breakdown[cat] == pytest.approx(static.breakdown[cat], rel=1e-9, abs=1e-12)
    assert flows.fabric["lost_to_sharing_s"] == {"pp": 0.0, "dp": 0.0, "ep": 0.0}


@pytest.mark.parametrize("pp", [1, 2])
def test_alltoall_sharing_nics_with_gradient_buckets_is_slower_never_faster(pp: int) -> None:
    # buckets reduced during the backward (overlap_grad_reduce) cross the same NICs as the
    # backward's all-to-alls: both lose time to sharing, and the step can only get longer
    plan = ParallelPlan(tp=1, pp=pp, dp=32 // pp, ep=16, zero=1)
    static = simulate(MOE, TRAIN, CLUSTER, plan)
    flows = simulate(MOE, TRAIN, CLUSTER, plan, fabric_sharing="flows")
    lost = flows.fabric["lost_to_sharing_s"]
    assert lost["ep"] > 0 and lost["dp"] > 0
    assert flows.step_time > static.step_time
    assert flows.breakdown["exposed_ep"] >= static.breakdown["exposed_ep"] * (1 - 1e-12)
    # the compute stream waits for the whole (slowed) all-to-all: its exposed EP is what the EP
    # stream logs, priced part plus shared part
    crit = [iv for iv in flows.intervals if iv.replica == 0]
    ep_stream = sum(iv.end - iv.start for iv in crit if iv.stream == "ep" and iv.stage == 0)
    waited = sum(iv.end - iv.start for iv in crit if iv.stream == "compute" and iv.stage == 0 and iv.category == "exposed_ep")
    assert waited == pytest.approx(ep_stream, rel=1e-9)


def test_ep_flows_stay_exact_under_steady_state_extrapolation(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[EngineInput] = []
    real = simulate_module.run

    def capture(inp: EngineInput, **kw: Any) -> Any:
        seen.append(inp)
        return real(inp, **kw)

    monkeypatch.setattr(simulate_module, "run", capture)
    training = TrainingSpec(seq_len=4096, global_batch_size=4096)  # 256 micro-batches per pipeline
    simulate(MOE, training, CLUSTER, ParallelPlan(tp=1, pp=2, dp=16, ep=16, zero=1, recompute="full"),
             fabric_sharing="flows")
    inp = seen[0]
    assert inp.flows is not None and inp.flows.ep
    fast, t_fast = run(inp)
    full, t_full = run(inp, extrapolate=False)
    assert len(fast) < len(full) / 4  # the steady state was extrapolated, not run
    assert t_fast == pytest.approx(t_full, rel=1e-9, abs=0.0)
    got, want = breakdowns(fast, t_fast), breakdowns(full, t_full)
    for unit, row in want.items():
        for cat in CATEGORIES:
            assert got[unit][cat] == pytest.approx(row[cat], rel=0.0, abs=1e-9 * t_full), (unit, cat)


def test_stages_whose_ep_groups_are_not_translates_keep_the_priced_exposed_ep() -> None:
    # NVLink domains of 72, EP groups of 64: stage 0's groups (GPUs 0-63) sit in one domain, as the
    # static pricing's group does; stages 1-3 (GPUs 64-127, ...) straddle two, so alone they would
    # not take the priced time: those passes keep their priced exposed EP, stage 0's run as flows
    cluster = get_cluster("gb200-nvl72", 256)
    plan = ParallelPlan(tp=1, pp=4, dp=64, ep=64, zero=1)
    pricer = CommPricer(cluster, Placement(plan, cluster.gpus_per_node), PROFILE)
    c = Costing(MOE, TRAIN, plan, cluster.accelerator, PROFILE, pricer)
    stages = lower(c).stages
    call = stages[1].chunks[0].ep_call_fwd
    assert call is not None
    alone = [pricer.transfer(call.kind, call.size, call.axis, s, "ep") for s in range(4)]
    priced = pricer.time(call.kind, call.size, call.axis)  # one call; the transfers are one call each
    assert alone[0] is not None and alone[0].static_time == pytest.approx(priced, rel=1e-12)
    assert all(tr is not None and tr.static_time > 2 * priced for tr in alone[1:])
    flows = stream_transfers(pricer, stages, FabricLoad())
    assert {s for s, _, _ in flows.ep} == {0}


def test_segment_placement_puts_every_stages_ep_group_in_one_rack() -> None:
    # the same job placed as Megatron-Bridge's launcher places it (Slurm segments of 16 trays, 64
    # GPUs per rack): every stage's EP groups are translates of the priced group, take its time
    # alone and run as flows
    cluster = get_cluster("gb200-nvl72", 256, **segment_overrides("gb200-nvl72", 256))
    plan = ParallelPlan(tp=1, pp=4, dp=64, ep=64, zero=1)
    pricer = CommPricer(cluster, Placement(plan, cluster.gpus_per_node), PROFILE)
    stages = lower(Costing(MOE, TRAIN, plan, cluster.accelerator, PROFILE, pricer)).stages
    call = stages[1].chunks[0].ep_call_fwd
    assert call is not None
    priced = pricer.time(call.kind, call.size, call.axis)
    for s in range(4):
        tr = pricer.transfer(call.kind, call.size, call.axis, s, "ep")
        assert tr is not None and tr.static_time == pytest.approx(priced, rel=1e-12)
    assert {s for s, _, _ in stream_transfers(pricer, stages, FabricLoad()).ep} == {0, 1, 2, 3}
