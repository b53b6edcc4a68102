"""Flows over time in the engine (``fabric_sharing="flows"``): closed forms, invariants, the static
pricing when nothing overlaps, monotonic in other tenants' load, exact under steady-state
extrapolation, and one clear error per bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import simpy

from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.simulator.errors import PlanError
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.network.sharing import FabricLoad, FabricLoadError, FluidShare, Phase, Transfer
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step import simulate as simulate_module
from clustersim.simulator.step.engine import EngineInput, run
from clustersim.simulator.step.fluid import FabricStreams
from clustersim.simulator.step.result import CATEGORIES, breakdowns
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

PROFILE = CalibrationProfile()
MB = 64 * 2**20


def _pricer(plan: ParallelPlan, gpus: int, **cluster: Any) -> CommPricer:
    c = get_cluster("dgx-h100", gpus, **cluster)
    return CommPricer(c, Placement(plan, c.gpus_per_node), PROFILE)


def _finish_times(capacity: np.ndarray, transfers: list[Transfer], starts: list[float]) -> list[float]:
    """Run ``transfers`` from ``starts`` on one shared fabric; the time each ends."""
    env = simpy.Environment()
    fabric = FabricStreams(env, capacity)
    ends: list[float] = [0.0] * len(transfers)

    def one(k: int) -> Any:
        yield env.timeout(starts[k])
        yield from fabric.run(transfers[k])
        ends[k] = env.now

    for k in range(len(transfers)):
        env.process(one(k))
    env.run()
    return ends


def _capacity(pricer: CommPricer) -> np.ndarray:
    from clustersim.simulator.network.routing import fabric_of

    return fabric_of(pricer.cluster, pricer.profile).capacity


def test_two_equal_streams_on_one_nic_take_twice_as_long() -> None:
    # two identical pipeline sends of every pipeline from stage 0 to stage 1 at once: each NIC
    # carries both, so the bytes take 2x as long (the latency is paid once by each, in parallel)
    pricer = _pricer(ParallelPlan(tp=8, pp=2, dp=1), 16)
    tr = pricer.p2p_transfer(MB, 0, "fwd")
    assert tr is not None
    delay = tr.phases[0].delay
    alone = _finish_times(_capacity(pricer), [tr], [0.0])[0]
    both = _finish_times(_capacity(pricer), [tr, tr], [0.0, 0.0])
    assert alone == pytest.approx(tr.static_time, rel=1e-12)
    assert both == pytest.approx([delay + 2 * (alone - delay)] * 2, rel=1e-12)


def test_send_during_dp_reduce_scatter_slows_both_by_max_min() -> None:
    # tp8 dp2 pp2 on 4 nodes: GPU 0's NIC carries its DP ring flow (to GPU 8) and its pipeline
    # send (to GPU 16). Both are bottlenecked there alone, so while they overlap each gets half of
    # it: the shorter (alone T1) ends at 2 T1, the longer (T2) at T1 + T2 (bytes parts, after latency).
    pricer = _pricer(ParallelPlan(tp=8, pp=2, dp=2), 32)
    rs = pricer.transfer("reduce_scatter", 4 * MB, "dp", 0, "dp")
    send = pricer.p2p_transfer(MB, 0, "fwd")
    assert rs is not None and send is not None
    cap = _capacity(pricer)
    d1, d2 = rs.phases[0].delay, send.phases[0].delay
    t1, t2 = rs.static_time - d1, send.static_time - d2
    ends = _finish_times(cap, [rs, send], [-d1 + 1.0, -d2 + 1.0])  # bytes of both start at t = 1
    short, long_ = sorted([t1, t2])
    got = sorted(e - 1.0 for e in ends)
    assert got == pytest.approx([2 * short, short + long_], rel=1e-9)


def test_fluid_share_conserves_bytes_and_never_exceeds_capacity() -> None:
    rng = np.random.default_rng(3)
    cap = rng.uniform(1e9, 5e9, 12)
    share = FluidShare(cap)
    flows = []
    for k in range(30):
        edges = np.sort(rng.choice(12, size=int(rng.integers(1, 5)), replace=False))
        flows.append((float(rng.uniform(0, 0.05)), Phase(delay=0.0, edges=edges, load=rng.uniform(0.1, 2.0, len(edges)),
                                                         work=float(rng.uniform(1e6, 1e8)))))
    flows.sort(key=lambda x: x[0])
    pending, done, t = list(flows), 0, 0.0
    while done < len(flows):
        nxt = share.next_end()
        if pending and (nxt is None or pending[0][0] <= nxt[0]):
            t, phase = pending.pop(0)
            share.start(t, phase, "dp")
        else:
            assert nxt is not None
            t = nxt[0]
            share.advance(t)
            share.finish(nxt[1])
            done += 1
        assert (share.link_rates() <= cap * (1 + 1e-9)).all()
    want = np.zeros(12)
    for _, ph in flows:
        np.add.at(want, ph.edges, ph.load * ph.work)
    np.testing.assert_allclose(share.link_bytes, want, rtol=1e-12)


LLAMA = get_model("llama3-8b")


@pytest.mark.parametrize("plan", [
    ParallelPlan(tp=8, dp=4, zero=1, overlap_param_gather=True),
    ParallelPlan(tp=4, dp=8, zero=0),
    ParallelPlan(tp=8, dp=4, zero=1, overlap_grad_reduce=False, overlap_param_gather=False),
])
def test_nothing_overlapping_is_the_static_pricing_exactly(plan: ParallelPlan) -> None:
    # one pipeline stage: the DP stream's buckets run one after another and the gathers before
    # the first forward, so no two transfers overlap and the flows must give the priced times
    training = TrainingSpec(seq_len=2048, global_batch_size=32)
    cluster = get_cluster("dgx-h100", 32)
    static = simulate(LLAMA, training, cluster, plan)
    flows = simulate(LLAMA, training, cluster, plan, fabric_sharing="flows")
    assert flows.step_time == pytest.approx(static.step_time, rel=1e-12)
    for cat in CATEGORIES:
        assert flows.breakdown[cat] == pytest.approx(static.breakdown[cat], rel=1e-9, abs=1e-12)
    assert not any(iv.category.endswith("_shared") for iv in flows.intervals)


PP_PLAN = ParallelPlan(tp=8, pp=4, dp=2, zero=1, micro_batch=1)
PP_TRAIN = TrainingSpec(seq_len=4096, global_batch_size=64)


def test_more_background_load_is_never_faster() -> None:
    cluster = get_cluster("dgx-h100", 64)
    steps = [simulate(LLAMA, PP_TRAIN, cluster, PP_PLAN, fabric_sharing="flows",
                      fabric_load=FabricLoad(background={"nic": f})).step_time for f in (0.0, 0.3, 0.6, 0.9)]
    assert all(a <= b * (1 + 1e-12) for a, b in zip(steps, steps[1:]))
    assert steps[-1] > steps[0]  # at 90 % of every NIC taken, the streams' transfers are exposed


def test_a_degraded_nic_slows_the_step() -> None:
    cluster = get_cluster("dgx-h100", 64)
    base = simulate(LLAMA, PP_TRAIN, cluster, PP_PLAN, fabric_sharing="flows")
    nic = next(n for n in cluster.graph.successors("gpu0") if cluster.graph.nodes[n].get("kind") == "nic")
    slow = simulate(LLAMA, PP_TRAIN, cluster, PP_PLAN, fabric_sharing="flows",
                    fabric_load=FabricLoad(degraded={f"gpu0->{nic}": 0.05}))
    assert slow.step_time > base.step_time


def test_flows_stay_exact_under_steady_state_extrapolation(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[EngineInput] = []
    real = simulate_module.run

    def capture(inp: EngineInput, **kw: Any) -> Any:
        seen.append(inp)
        return real(inp, **kw)

    monkeypatch.setattr(simulate_module, "run", capture)
    training = TrainingSpec(seq_len=4096, global_batch_size=2048)  # 1,024 micro-batches per pipeline
    simulate(LLAMA, training, get_cluster("dgx-h100", 64), PP_PLAN, fabric_sharing="flows")
    inp = seen[0]
    fast, t_fast = run(inp)
    full, t_full = run(inp, extrapolate=False)
    assert len(fast) < len(full) / 4  # the steady state was extrapolated, not run
    assert t_fast == pytest.approx(t_full, rel=1e-9, abs=0.0)
    got, want = breakdowns(fast, t_fast), breakdowns(full, t_full)
    for unit, row in want.items():
        for cat in CATEGORIES:
            assert got[unit][cat] == pytest.approx(row[cat], rel=0.0, abs=1e-9 * t_full), (unit, cat)


def test_bad_sharing_inputs_name_the_field() -> None:
    cluster = get_cluster("dgx-h100", 16)
    plan = ParallelPlan(tp=8, dp=2)
    training = TrainingSpec(seq_len=2048, global_batch_size=8)
    with pytest.raises(PlanError, match="mode = 'symmetric'"):
        simulate(LLAMA, training, cluster, plan, mode="full", fabric_sharing="flows")
    with pytest.raises(PlanError, match="fidelity = 'flow'"):
        simulate(LLAMA, training, cluster, plan, fidelity="analytic", fabric_sharing="flows")
    with pytest.raises(PlanError, match="needs fabric_sharing = 'flows'"):
        simulate(LLAMA, training, cluster, plan, fabric_load=FabricLoad(background={"nic": 0.5}))
    with pytest.raises(FabricLoadError, match="'infiniband' is not in this fabric"):
        simulate(LLAMA, training, cluster, plan, fabric_sharing="flows", fabric_load=FabricLoad(background={"infiniband": 0.5}))
    with pytest.raises(FabricLoadError, match=r"nic = 1.5; use a fraction"):
        simulate(LLAMA, training, cluster, plan, fabric_sharing="flows", fabric_load=FabricLoad(background={"nic": 1.5}))
    with pytest.raises(FabricLoadError, match="'gpu0->moon' is not a directed link"):
        simulate(LLAMA, training, cluster, plan, fabric_sharing="flows", fabric_load=FabricLoad(degraded={"gpu0->moon": 0.5}))


def test_fabric_report_counts_every_message_once() -> None:
    # pipeline only (dp 1, no ZeRO): GPU 0's NIC uplink carries exactly the m activations stage 0
    # sends forward; GPU 8's (stage 1) the m gradients it sends back. sp=False: a whole activation.
    plan = ParallelPlan(tp=8, pp=2, dp=1, micro_batch=1)
    training = TrainingSpec(seq_len=2048, global_batch_size=16)
    cluster = get_cluster("dgx-h100", 16)
    r = simulate(LLAMA, training, cluster, plan, fabric_sharing="flows")
    act = 1 * 2048 * LLAMA.hidden_size * training.activation_bytes
    links = {row["link"]: row for row in r.fabric["hottest_links"]}
    assert links["gpu0->nic0"]["bytes"] == pytest.approx(16 * act, rel=1e-12)
    assert links["gpu8->nic8"]["bytes"] == pytest.approx(16 * act, rel=1e-12)
    cap = float(cluster.nic_bandwidth) * default_profile(cluster.accelerator.name).link_eff("nic")
    assert links["gpu0->nic0"]["utilisation"] == pytest.approx(16 * act / (cap * r.step_time), rel=1e-3)
    assert all(0 < row["utilisation"] <= 1 for row in r.fabric["hottest_links"])
    assert r.fabric["lost_to_sharing_s"] == {"pp": 0.0, "dp": 0.0}  # one direction per NIC: nothing shared
