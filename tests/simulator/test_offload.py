"""Activation CPU offloading (``step.offload``, issue 12): the host copies' exposed time, its place in
the breakdown, the memory it frees, and the checks of the host link and the plan field.

Model (Transformer Engine ``AsyncDoubleBufferGroupOffloadHandler``, windowed 2025 version): group k's
copy runs behind the layers of its window ``layer_window_map``; exposed = sum_k max(0, bytes_k /
host_bandwidth - window compute_k), each direction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.errors import PlanError
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import lower
from clustersim.simulator.step.offload import copy_time, layer_windows, offload_exposure
from clustersim.simulator.step.partition import partition_plan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import Cluster, get_cluster
from clustersim.workloads import TrainingSpec, get_model, layer_activation_bytes

TRAIN = TrainingSpec(seq_len=4096, global_batch_size=16, precision="bf16")
PLAN = ParallelPlan(tp=1, pp=1, dp=8, micro_batch=1, fsdp="full")


def _cluster(host_bandwidth: float | None = None) -> Cluster:
    cluster = get_cluster("dgx-h100", 8)
    if host_bandwidth is None:
        return cluster
    return replace(cluster, accelerator=replace(cluster.accelerator, host_bandwidth=host_bandwidth))


def test_copy_time_is_bytes_over_the_host_bandwidth() -> None:
    assert copy_time(64e9, 64e9) == 1.0
    assert copy_time(3e9, 225e9) == pytest.approx(3e9 / 225e9)


@pytest.mark.parametrize(("layers", "offloaded"), [(80, 40), (80, 30), (80, 79), (126, 92), (80, 5), (2, 1)])
def test_the_windows_tile_the_layers_after_the_first(layers: int, offloaded: int) -> None:
    windows = layer_windows(layers, offloaded)
    assert len(windows) == offloaded and all(len(w) >= 1 for w in windows)
    assert [j for w in windows for j in w] == list(range(1, layers))  # contiguous, disjoint, end at L - 1
    assert max(len(w) for w in windows) <= layers // offloaded + 1  # TE spreads the remainder


def test_te_window_map_of_half_the_layers() -> None:
    # TE layer_window_map for 80 layers, 40 offloaded: w_k = 2(k + 1) - 1 -> windows {1}, {2, 3}, ..., {78, 79}
    windows = layer_windows(80, 40)
    assert windows[0] == range(1, 2) and windows[1] == range(2, 4) and windows[-1] == range(78, 80)


def test_exposed_is_zero_while_compute_covers_the_copy_and_then_grows_linearly() -> None:
    n_layers, n, bandwidth, compute = 10, 9, 64e9, 0.010  # one layer per window (n = L - 1)
    fwd, bwd = [compute] * n_layers, [2 * compute] * n_layers
    hidden = compute * bandwidth  # bytes whose copy lasts exactly one layer's forward
    assert offload_exposure([0.5 * hidden] * n, fwd, bwd, bandwidth) == (0.0, 0.0)
    assert offload_exposure([hidden] * n, fwd, bwd, bandwidth) == pytest.approx((0.0, 0.0), abs=1e-15)
    exposed = [offload_exposure([f * hidden] * n, fwd, bwd, bandwidth) for f in (1.5, 2.5, 3.5)]
    # forward: n * (copy - compute), slope n / bandwidth per byte; backward hides twice as much
    assert [e[0] for e in exposed] == pytest.approx([n * (f - 1) * compute for f in (1.5, 2.5, 3.5)])
    assert [e[1] for e in exposed] == pytest.approx([0.0, n * 0.5 * compute, n * 1.5 * compute])


def test_wider_windows_hide_more() -> None:
    # 80 layers, 40 offloaded: every window but the first holds two layers' compute
    fwd = [0.01] * 80
    copy = 0.015 * 64e9
    exposed, _ = offload_exposure([copy] * 40, fwd, fwd, 64e9)
    assert exposed == pytest.approx(0.005)  # only group 0 (window {1}) outlasts its window


def _costing(plan: ParallelPlan, cluster: Cluster) -> Costing:
    prof = default_profile(cluster.accelerator.name)
    return Costing(get_model("llama3-8b"), TRAIN, plan, cluster.accelerator, prof,
                   CommPricer(cluster, Placement(plan, cluster.gpus_per_node), prof, "analytic"))


def test_a_slow_host_link_shows_as_exposed_offload_and_the_breakdown_still_sums() -> None:
    model, slow = get_model("llama3-8b"), _cluster(host_bandwidth=2e9)
    plan = replace(PLAN, cpu_offloading_num_layers=16)
    chunk = lower(_costing(plan, slow)).stages[0].chunks[0]
    assert chunk.offload_fwd > 0 and chunk.offload_bwd > 0
    # 16 copies of one layer's activations over 2 GB/s outlast their windows by about the copy time
    one = layer_activation_bytes(model, 0, micro_batch=1, seq_len=4096)
    assert chunk.offload_fwd <= 16 * one / 2e9 and chunk.offload_fwd > 0.5 * 16 * one / 2e9
    res = simulate(model, TRAIN, slow, plan)
    base = simulate(model, TRAIN, slow, PLAN)
    assert sum(res.breakdown.values()) == pytest.approx(res.step_time, rel=1e-9)
    m = TRAIN.global_batch_size // (plan.dp * plan.micro_batch)
    assert res.breakdown["exposed_offload"] == pytest.approx(m * (chunk.offload_fwd + chunk.offload_bwd), rel=1e-9)
    assert base.breakdown["exposed_offload"] == 0.0
    assert res.step_time > base.step_time


def test_a_fast_host_link_hides_the_copies() -> None:
    plan = replace(PLAN, cpu_offloading_num_layers=16)
    chunk = lower(_costing(plan, _cluster(host_bandwidth=450e9))).stages[0].chunks[0]
    assert chunk.offload_fwd == 0.0 and chunk.offload_bwd == 0.0


def test_offloading_frees_the_offloaded_layers_but_one_in_flight() -> None:
    model = get_model("llama3-8b")
    full = partition_plan(model, TRAIN, PLAN).stages[0].memory.activations
    off = partition_plan(model, TRAIN, replace(PLAN, cpu_offloading_num_layers=20)).stages[0].memory.activations
    one = layer_activation_bytes(model, 0, micro_batch=1, seq_len=4096)
    assert full - off == pytest.approx(19 * one)


def test_no_host_link_no_offloading() -> None:
    plan = replace(PLAN, cpu_offloading_num_layers=4)
    with pytest.raises(PlanError, match=r"cpu_offloading_num_layers = 4.*host_bandwidth = 0"):
        simulate(get_model("llama3-8b"), TRAIN, _cluster(host_bandwidth=0.0), plan)
    simulate(get_model("llama3-8b"), TRAIN, _cluster(host_bandwidth=0.0), PLAN)  # no offloading: fine


@pytest.mark.parametrize("layers", [32, 40, -1])
def test_the_plan_field_lies_below_the_layers(layers: int) -> None:
    with pytest.raises(PlanError, match=r"plan.cpu_offloading_num_layers"):
        simulate(get_model("llama3-8b"), TRAIN, _cluster(), replace(PLAN, cpu_offloading_num_layers=layers))
