"""TP communication overlapped chunk by chunk with its GEMMs (``plan.tp_overlap``, ``step.tp_overlap``).

Closed forms of the ring exchange and the bulk overlap; the lowering's exposed TP seconds against a
hand computation from the same GEMM and collective times; the limits (a free fabric hides all of
it, a slow one exposes what the GEMMs cannot cover, never more than without overlap); the bound
search prunes with stays below the engine; a plan without sequence parallel is refused.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.errors import PlanError
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.plan.checks import check_plan
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.step import simulate_step
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import _per_layer, lower
from clustersim.simulator.step.tp_overlap import block_exposed, bulk_exposed, ring_exposed, tp_blocks
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

L3 = replace(get_model("llama3-70b"), num_layers=4)
TRAIN = TrainingSpec(seq_len=8192, global_batch_size=16)


def test_ring_exchange_closed_form() -> None:
    # the GEMM covers (n-1)/n of itself: nothing exposed until the collective is longer than that
    assert ring_exposed(0.7, 1.0, 4) == 0.0
    assert ring_exposed(0.75, 1.0, 4) == 0.0
    assert ring_exposed(2.0, 1.0, 4) == pytest.approx(2.0 - 0.75)
    assert ring_exposed(2.0, 1.0, 8) == pytest.approx(2.0 - 7 / 8)
    assert ring_exposed(2.0, 1.0, 1) == 0.0  # no tensor parallelism, nothing to exchange
    assert ring_exposed(2.0, 0.0, 4) == 2.0  # no GEMM to hide behind: all of it
    assert bulk_exposed(0.4, 1.0) == 0.0 and bulk_exposed(1.5, 1.0) == pytest.approx(0.5)


def _costing(plan: ParallelPlan, cluster_name: str = "dgx-h100", scale: float = 1.0) -> Costing:
    cluster = get_cluster(cluster_name, plan.world_size)
    if scale != 1.0:  # NVLink (where tp = 8 runs) `scale` times as fast
        acc = cluster.accelerator
        cluster = replace(cluster, accelerator=replace(acc, nvlink_bandwidth=acc.nvlink_bandwidth * scale))
    prof = default_profile(cluster.accelerator.name).replace(overlap_slowdown={})  # the hand computation has no slowdown
    return Costing(L3, TRAIN, plan, cluster.accelerator, prof,
                   CommPricer(cluster, Placement(plan, cluster.gpus_per_node), prof, "analytic"))


def _exposed(plan: ParallelPlan, scale: float = 1.0) -> tuple[float, float]:
    chunk = lower(_costing(plan, scale=scale)).stages[0].chunks[0]
    return chunk.tp_fwd, chunk.tp_bwd


def test_lowering_matches_the_hand_computation() -> None:
    plan = ParallelPlan(tp=8, dp=1, sp=True, micro_batch=1, tp_overlap=True)
    c = _costing(plan)
    size = 8192 * L3.hidden_size * TRAIN.activation_bytes
    gather, scatter = c.pricer.time("all_gather", size, "tp"), c.pricer.time("reduce_scatter", size, "tp")

    def t(name: str, which: str) -> float:
        ops = _per_layer(c, 0, range(0, 1))[0][0]
        return c.time([next(o for o in ops if o.name == name)], which)  # type: ignore[arg-type]

    fwd = bwd = 0.0
    for entry, exit_ in (("qkv", "attn_out"), ("mlp_fc1", "mlp_fc2")):
        fwd += max(0.0, gather - t(entry, "fwd") * 7 / 8) + max(0.0, scatter - t(exit_, "fwd") * 7 / 8)
        bwd += (max(0.0, gather - t(exit_, "bwd_input") * 7 / 8) + max(0.0, gather - t(entry, "bwd_input"))
                + max(0.0, scatter - t(entry, "bwd_weight")))
    layers = L3.num_layers
    got_f, got_b = _exposed(plan)
    # the first chunk adds the embedding's scatter, the last the output layer's and the loss's calls
    ends = lower(_costing(replace(plan, tp_overlap=False))).stages[0].chunks[0]
    one = gather + scatter
    end_f, end_b = ends.tp_fwd - 2 * layers * one, ends.tp_bwd - 2 * layers * one
    assert got_f == pytest.approx(layers * fwd + end_f, rel=1e-9)
    assert got_b == pytest.approx(layers * bwd + end_b, rel=1e-9)


def test_blocks_pair_the_entry_and_exit_gemms() -> None:
    c = _costing(ParallelPlan(tp=8, dp=1, sp=True, tp_overlap=True))
    ops = _per_layer(c, 0, range(0, 1))[0][0]
    blocks = tp_blocks(ops, 2)
    assert [(b.entry.name, b.exit.name) for b in blocks if b.entry and b.exit] == [("qkv", "attn_out"),
                                                                                 ("mlp_fc1", "mlp_fc2")]
    moe = get_model("mixtral-8x7b")
    from clustersim.workloads import layer_ops
    mops = list(layer_ops(moe, 0, micro_batch=1, seq_len=4096, tp=2, cp=1, dtype_bytes=2, sp=True))
    attn, mlp = tp_blocks(mops, 2)
    assert attn.entry is not None and attn.entry.role == "qkv_proj"
    assert mlp.entry is None and mlp.exit is None  # routed experts: the dispatcher's traffic, not userbuffers
    assert block_exposed(mlp, 0.3, 0.2, 2, lambda o, w: 1.0) == (pytest.approx(0.5), pytest.approx(0.5))


def test_limits_fast_and_slow_fabric() -> None:
    over = ParallelPlan(tp=8, dp=1, sp=True, micro_batch=1, tp_overlap=True)
    plain = replace(over, tp_overlap=False)
    for scale in (0.05, 1.0, 20.0):
        f, b = _exposed(over, scale)
        pf, pb = _exposed(plain, scale)
        assert 0.0 <= f <= pf + 1e-12
        assert b >= 0.0
    # a fabric 1000x as fast: the layers' gathers and scatters all hide behind their GEMMs
    c = _costing(over, scale=1000.0)
    f_fast, _ = _exposed(over, 1000.0)
    _, size = 8192, 8192 * L3.hidden_size * TRAIN.activation_bytes
    ends = lower(_costing(plain, scale=1000.0)).stages[0].chunks[0].tp_fwd
    layer_calls = 2 * L3.num_layers * (c.pricer.time("all_gather", size, "tp") + c.pricer.time("reduce_scatter", size, "tp"))
    assert f_fast == pytest.approx(ends - layer_calls, abs=1e-12)
    # slower links expose more, monotonically
    exposed = [_exposed(over, s)[0] for s in (0.02, 0.05, 0.2, 1.0)]
    assert exposed == sorted(exposed, reverse=True) and exposed[0] > exposed[-1]


def test_bound_stays_below_the_engine() -> None:
    cluster = get_cluster("dgx-h100", 16)
    prof = default_profile(cluster.accelerator.name)
    model = replace(get_model("llama3-70b"), num_layers=8)
    plan = ParallelPlan(tp=8, pp=2, dp=1, sp=True, micro_batch=1, tp_overlap=True)
    res = simulate_step(model, TRAIN, cluster, plan, profile=prof)
    sb = StepBound(model, TRAIN, cluster, prof)
    assert sb.step_time(plan) <= res.step_time * (1 + 1e-9)
    slower = simulate_step(model, TRAIN, cluster, replace(plan, tp_overlap=False), profile=prof)
    assert res.step_time < slower.step_time  # hiding TP traffic shortens the step
    assert "tp-overlap" in plan.describe() and "tp-overlap" not in replace(plan, tp_overlap=False).describe()


def test_tp_overlap_needs_sequence_parallel() -> None:
    cluster = get_cluster("dgx-h100", 8)
    with pytest.raises(PlanError, match=r"plan.tp_overlap = true needs plan.sp = true"):
        check_plan(L3, TRAIN, cluster, ParallelPlan(tp=8, dp=1, sp=False, tp_overlap=True))


def test_the_gemm_beside_a_collective_pays_the_overlap_slowdown() -> None:
    c = _costing(ParallelPlan(tp=4, dp=2, sp=True, tp_overlap=True))
    attn = tp_blocks(_per_layer(c, 0, range(0, 1))[0][0], 2)[0]
    times = {"fwd": 1.0, "bwd_input": 2.0, "bwd_weight": 2.0}
    f = 0.2
    fwd, bwd = block_exposed(attn, 0.5, 0.5, 4, lambda o, w: times[w], {"all_gather": f, "reduce_scatter": f})
    # each forward GEMM of 1 s beside 0.5 s of collective: 1 + 0.5 f / (1 + f), all of it hidden
    assert fwd == pytest.approx(2 * 0.5 * f / (1 + f))
    # backward: three collectives of 0.5 s beside GEMMs of 2 s, each hidden, each slowing its GEMM
    assert bwd == pytest.approx(3 * 0.5 * f / (1 + f))
    # a collective longer than the slowed GEMM: the GEMM runs slowed throughout, the rest exposed
    fwd_long, _ = block_exposed(attn, 3.0, 0.0, 4, lambda o, w: times[w], {"all_gather": f})
    g = 1.0 * (1 + f)
    assert fwd_long == pytest.approx((3.0 - g * 3 / 4) + (g - 1.0))
    # without the slowdown: nothing exposed while the GEMMs cover the collectives
    assert block_exposed(attn, 0.5, 0.5, 4, lambda o, w: times[w]) == (0.0, 0.0)
