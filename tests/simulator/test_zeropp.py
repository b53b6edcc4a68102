"""ZeRO++ (``step.zeropp``): qwZ halves the gathered bytes, hpZ keeps the backward gathers inside a
node at the cost of a secondary weight copy, qgZ sends int4 gradients in two all-to-all hops; each
lowers exposed data-parallel time where the network binds, the plan checks name the field, and the
published-row spelling reads the tutorial's configuration."""

from __future__ import annotations

import math

import pytest

from clustersim.simulator.calibration.spellings import Sharding, sharding
from clustersim.simulator.calibration.validate_plan import ZEROPP_PLAN
from clustersim.simulator.errors import PlanError
from clustersim.simulator.network import CommPricer
from clustersim.simulator.plan import ParallelPlan, Placement, check_plan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step import Costing, step_calls
from clustersim.simulator.step.lower_dp import unit_time
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.step.zeropp import QGZ_BYTES, QWZ_BYTES, QWZ_GROUP
from clustersim.topologies import get_cluster
from clustersim.units import GBIT
from clustersim.workloads import TrainingSpec, get_model

MODEL = get_model("gpt-1.7b")
TRAINING = TrainingSpec(seq_len=2048, global_batch_size=64)
PROFILE = default_profile("h100")
SLOW_NIC = 12.5 * GBIT
"""100 Gb/s per 8-GPU node, the low-bandwidth setting ZeRO++ was built for."""
ALL = dict(zero_quantized_weights=True, zero_hpz_partition_size=8, zero_quantized_gradients=True)


def _plan(**kw: object) -> ParallelPlan:
    base = dict(tp=1, pp=1, dp=32, zero=3, micro_batch=2, recompute="full")
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _costing(plan: ParallelPlan, nic: float = SLOW_NIC) -> Costing:
    cluster = get_cluster("dgx-h100", plan.world_size, nic_bandwidth=nic)
    pricer = CommPricer(cluster, Placement(plan, cluster.gpus_per_node), PROFILE, "flow")
    return Costing(MODEL, TRAINING, plan, cluster.accelerator, PROFILE, pricer)


def _calls(plan: ParallelPlan) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = {}
    for call in step_calls(_costing(plan))[0]:
        out.setdefault((call.kind, call.axis), []).extend([call.size] * call.count)
    return out


def _exposed_dp(plan: ParallelPlan, nic: float = SLOW_NIC) -> float:
    cluster = get_cluster("dgx-h100", plan.world_size, nic_bandwidth=nic)
    return simulate(MODEL, TRAINING, cluster, plan, profile=PROFILE).breakdown["exposed_dp"]


def test_qwz_gathers_int8_with_one_scale_per_group() -> None:
    base, q = _calls(_plan()), _calls(_plan(zero_quantized_weights=True))
    assert QWZ_BYTES == 1.0 + 4.0 / QWZ_GROUP
    plain = sorted(base[("all_gather", "dp_shard")])
    quant = sorted(q[("all_gather", "dp_shard")])
    assert quant == pytest.approx([s * QWZ_BYTES / TRAINING.param_bytes for s in plain], rel=1e-12)
    assert q[("reduce_scatter", "dp_shard")] == base[("reduce_scatter", "dp_shard")]  # gradients untouched


def test_hpz_regathers_inside_a_node_and_pays_a_secondary_copy() -> None:
    plan = _plan(zero_hpz_partition_size=8)
    placement = Placement(plan, 8)
    assert placement.groups("dp_hpz").shape == (4, 8) and placement.nodes_spanned("dp_hpz") == 1
    calls, base = _calls(plan), _calls(_plan())
    # the backward gathers move to dp_hpz at the weights' dtype, the forward ones (and the root's) stay
    # on dp_shard: the same calls, split between the two axes
    assert len(calls[("all_gather", "dp_hpz")]) == len(calls[("all_gather", "dp_shard")]) - 1
    assert sorted(calls[("all_gather", "dp_hpz")] + calls[("all_gather", "dp_shard")]) == sorted(
        base[("all_gather", "dp_shard")])
    cluster = get_cluster("dgx-h100", 32)
    with_copy = simulate(MODEL, TRAINING, cluster, plan, profile=PROFILE).memory[0].weights
    without = simulate(MODEL, TRAINING, cluster, _plan(), profile=PROFILE).memory[0].weights
    params = MODEL.num_params()
    assert with_copy - without == pytest.approx(params * TRAINING.param_bytes / 8, rel=1e-3)


def test_qgz_two_hops_of_int4() -> None:
    calls = _calls(_plan(zero_quantized_gradients=True))
    assert ("reduce_scatter", "dp_shard") not in calls
    local, across = sorted(calls[("all_to_all", "dp_local")]), sorted(calls[("all_to_all", "dp_across")])
    # hop 1: every rank sends its whole unit gradient at 4 bits inside the node (8 ranks of the group);
    # hop 2: an eighth of it across the 4 nodes
    plain = sorted(_calls(_plan())[("reduce_scatter", "dp_shard")])
    elements = [s / _plan().grad_dtype_bytes for s in plain]
    assert local == pytest.approx([e * QGZ_BYTES for e in elements], rel=1e-12)
    assert across == pytest.approx([e * QGZ_BYTES / 8 for e in elements], rel=1e-12)
    placement = Placement(_plan(), 8)
    assert placement.node_local_shard() == 8 and placement.nodes_spanned("dp_local") == 1
    assert placement.groups("dp_across").shape == (8, 4) and placement.nodes_spanned("dp_across") == 4


def test_qgz_keeps_the_reduce_scatter_inside_one_node() -> None:
    plan = _plan(dp=8, micro_batch=8, zero_quantized_gradients=True)
    assert ("reduce_scatter", "dp_shard") in _calls(plan) and ("all_to_all", "dp_local") not in _calls(plan)


def test_node_local_shard_with_tensor_parallelism() -> None:
    # tp 4 on 8-GPU nodes: a shard group has 2 ranks per node; every local group stays on one node
    placement = Placement(ParallelPlan(tp=4, pp=1, dp=8, zero=3), 8)
    assert placement.node_local_shard() == 2
    assert placement.nodes_spanned("dp_local") == 1 and placement.nodes_spanned("dp_across") == 4


@pytest.mark.parametrize("switch", [dict(zero_quantized_weights=True), dict(zero_hpz_partition_size=8),
                                    dict(zero_quantized_gradients=True), ALL])
def test_each_switch_lowers_exposed_dp_where_the_network_binds(switch: dict[str, object]) -> None:
    plain = _exposed_dp(_plan(overlap_param_gather=False))
    assert _exposed_dp(_plan(overlap_param_gather=False, **switch)) < plain


def test_all_three_cut_the_unit_collectives_by_about_the_volume_ratio() -> None:
    # NIC-bound (100 Gb/s per node): ZeRO-3 moves 3 M per layer unit across nodes (two gathers, one
    # scatter), ZeRO++ about 0.5 M + 0.25 M across (the backward gather stays in the node)
    sizes = _calls(_plan())[("all_gather", "dp_shard")]
    layer = max(set(sizes), key=sizes.count) / TRAINING.param_bytes  # the layer unit, gathered most often
    c, cpp = _costing(_plan()), _costing(_plan(**ALL))
    before = sum(unit_time(c, layer, None, phase) for phase in ("fwd", "bwd", "grad"))
    after = sum(unit_time(cpp, layer, None, phase) for phase in ("fwd", "bwd", "grad"))
    assert 0.15 < after / before < 0.45


def test_nothing_changes_on_a_fast_fabric_without_the_switches() -> None:
    # the ZeRO-3 path itself is unchanged: the same step with the switches off, fast or slow NIC
    for nic in (SLOW_NIC, 400 * GBIT):
        assert _exposed_dp(_plan(), nic) == _exposed_dp(_plan(zero_quantized_weights=False, zero_hpz_partition_size=1,
                                                               zero_quantized_gradients=False), nic)


@pytest.mark.parametrize(("kw", "match"), [
    (dict(zero=1, zero_quantized_weights=True), "plan.zero_quantized_weights is ZeRO\\+\\+"),
    (dict(zero=0, fsdp="full", zero_quantized_gradients=True), "plan.zero_quantized_gradients is ZeRO\\+\\+"),
    (dict(zero_hpz_partition_size=3), "plan.zero_hpz_partition_size = 3 must be >= 1 and divide"),
    (dict(zero_hpz_partition_size=0), "plan.zero_hpz_partition_size = 0"),
])
def test_plan_checks_name_the_field(kw: dict[str, object], match: str) -> None:
    plan = _plan(**kw)
    with pytest.raises(PlanError, match=match):
        check_plan(MODEL, TRAINING, get_cluster("dgx-h100", 32), plan)


def test_describe_and_spelling() -> None:
    assert _plan(**ALL).describe().endswith("zero3 qwZ hpZ8 qgZ")
    assert sharding("ZeRO++") == Sharding(zero=3, zeropp=True) == sharding("DeepSpeed zeropp")
    assert ZEROPP_PLAN["zero"] == 3 and ZEROPP_PLAN["zero_quantized_weights"] and ZEROPP_PLAN["zero_quantized_gradients"]


def test_symmetric_equals_full_mode() -> None:
    cluster = get_cluster("dgx-h100", 32, nic_bandwidth=SLOW_NIC)
    sym = simulate(MODEL, TRAINING, cluster, _plan(**ALL), profile=PROFILE)
    full = simulate(MODEL, TRAINING, cluster, _plan(**ALL), profile=PROFILE, mode="full")
    assert full.step_time == pytest.approx(sym.step_time, rel=1e-12)
    assert full.breakdown["exposed_dp"] == pytest.approx(sym.breakdown["exposed_dp"], rel=1e-12)


def test_a_published_row_spelled_zeropp_reads_the_tutorial_configuration() -> None:
    from clustersim.simulator.calibration.validate import load_runs, scenario_for_row

    runs = load_runs()
    row = runs[runs.framework.str.contains("DeepSpeed", na=False)].iloc[0].to_dict()
    sc = scenario_for_row({**row, "zero_fsdp": "ZeRO++"})
    gpn = sc.cluster.gpus_per_node // (sc.plan.tp * sc.plan.cp)
    assert (sc.plan.zero, sc.plan.zero_quantized_weights, sc.plan.zero_quantized_gradients) == (3, True, True)
    assert sc.plan.zero_hpz_partition_size == math.gcd(gpn, sc.plan.shard_degree)
    assert sc.plan.param_gather_unit == "module" and any("ZeRO++" in n for n in sc.inferred)
