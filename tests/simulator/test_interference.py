"""Compute-communication interference: compute slows while a prefetched collective runs beside it
(issue 14, item 2): the flow shop's closed forms and what a step makes of it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.profile import OVERLAP_SLOWDOWN_MEASURED, default_profile, load_profile
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.lower_dp import flow_shop, overlapped_duration
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


def test_overlapped_duration_closed_forms() -> None:
    f = 0.25
    assert overlapped_duration(2.0, 10.0, f) == pytest.approx(2.0 * 1.25)  # wholly beside the comm
    assert overlapped_duration(2.0, 1.0, f) == pytest.approx(2.0 + 1.0 * 0.25 / 1.25)  # 1 s beside, rest alone
    assert overlapped_duration(2.0, 0.0, f) == 2.0  # nothing overlapping: interference factor 1
    assert overlapped_duration(2.0, 5.0, 0.0) == 2.0


def test_flow_shop_with_no_slowdown_or_no_comm_is_unchanged() -> None:
    comp, comm = [1.0, 3.0, 2.0], [2.0, 0.5, 4.0]
    assert flow_shop(comp, comm, 0.0) == flow_shop(comp, comm)
    assert flow_shop(comp, [0.0] * 3, 0.3) == flow_shop(comp, [0.0] * 3) == 0.0


def test_flow_shop_slowdown_closed_form() -> None:
    # compute 1, comm 2 per item, f = 0.5: compute i runs beside comm i + 1 for all its (1.5 s)
    # duration: comm ends 2, 4, 6; compute 2-3.5, 4-5.5, 6-7 (the last has no comm beside it)
    assert flow_shop([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], 0.5) == pytest.approx(7.0 - 3.0)
    # compute-bound: compute 3 with comm 1 beside: 3 + 1 x 0.5 / 1.5 each but the last
    assert flow_shop([3.0, 3.0], [1.0, 1.0], 0.5) == pytest.approx(1.0 + 0.5 / 1.5)


LLAMA = get_model("llama3-8b")
TRAIN = TrainingSpec(seq_len=4096, global_batch_size=64)


def test_fsdp_step_slows_with_interference_and_not_without_overlap() -> None:
    cluster = get_cluster("dgx-h100", 32)
    # without interference explicitly: the fit writes the measured slowdown into the GPU profiles
    prof = default_profile(cluster.accelerator.name).replace(overlap_slowdown={})
    slow = prof.replace(overlap_slowdown={"all_gather": OVERLAP_SLOWDOWN_MEASURED,
                                          "reduce_scatter": OVERLAP_SLOWDOWN_MEASURED})
    plan = ParallelPlan(tp=1, dp=32, fsdp="full", micro_batch=1, recompute="full")
    base = simulate(LLAMA, TRAIN, cluster, plan, profile=prof)
    hit = simulate(LLAMA, TRAIN, cluster, plan, profile=slow)
    assert hit.step_time > base.step_time
    # the loss is bounded by f x the compute of the passes it overlaps
    assert hit.step_time - base.step_time <= OVERLAP_SLOWDOWN_MEASURED * base.breakdown["compute"]
    # gathers not prefetched (no overlap): the slowdown has nothing to act on
    flat = replace(plan, overlap_param_gather=False)
    assert simulate(LLAMA, TRAIN, cluster, flat, profile=slow).step_time == simulate(
        LLAMA, TRAIN, cluster, flat, profile=prof).step_time


def test_bad_overlap_slowdown_names_the_field() -> None:
    with pytest.raises(CalibrationError, match="overlap_slowdown"):
        load_profile({"overlap_slowdown": {"all_reduce": 0.2}})
    with pytest.raises(CalibrationError, match="overlap_slowdown"):
        load_profile({"overlap_slowdown": {"all_gather": 1.5}})
