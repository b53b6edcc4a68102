"""The host loops of PyTorch's list-API collectives in DeepSpeed ZeRO-3 of 2021 (``step.host.list_api_time``):
closed form, linear growth with the ranks of a synchronised tensor-by-tensor step, no change to a
flat-buffer gather, and the strong-scaling shape of SC'21 Table 2's ZeRO-3 rows it was built for."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from clustersim.simulator.profile import HOST_LAUNCH_RANGE
from clustersim.simulator.step import step_calls
from clustersim.simulator.step.host import LIST_API_HOST_OP, list_api_time
from clustersim.simulator.step.lower_dp import tensor_call_time, tensor_copies_time
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from tests.simulator.test_zero3_tensor_gather import MODEL, PROFILE, TRAINING, _costing, _plan

DEEPSPEED = dict(param_gather_unit="tensor", param_persistence_threshold=100_000, overlap_param_gather=False)


def test_host_op_prior_is_the_geometric_middle_of_the_cited_range() -> None:
    assert LIST_API_HOST_OP == pytest.approx(math.sqrt(5e-6 * 25e-6))
    assert HOST_LAUNCH_RANGE[0] < LIST_API_HOST_OP < HOST_LAUNCH_RANGE[1]


def test_list_api_time_closed_form() -> None:
    h = LIST_API_HOST_OP
    prof = PROFILE.model_copy(update={"host_launch_time": 0.0})
    # all-gather: the caller's view loop, then the NCCL call and the copy loop side by side
    assert list_api_time("all_gather", 384, 10e-3, 1e-3, prof) == pytest.approx(384 * h + 11e-3)
    assert list_api_time("all_gather", 1536, 10e-3, 1e-3, prof) == pytest.approx(2 * 1536 * h)
    # reduce-scatter: view loop, copy loop (or the GPU copies if longer), then the NCCL call
    assert list_api_time("reduce_scatter", 384, 10e-3, 1e-3, prof) == pytest.approx(2 * 384 * h + 10e-3)
    assert list_api_time("reduce_scatter", 8, 10e-3, 1e-3, prof) == pytest.approx(8 * h + 1e-3 + 10e-3)
    # a measured host_launch_time replaces the prior
    measured = PROFILE.model_copy(update={"host_launch_time": 20e-6})
    assert list_api_time("reduce_scatter", 100, 0.0, 0.0, measured) == pytest.approx(2 * 100 * 20e-6)


def test_tensor_call_adds_the_loops_to_the_nccl_call() -> None:
    c = _costing(_plan(16, **DEEPSPEED))
    size = 5e8
    coll = c.pricer.time("all_gather", size, "dp_shard")
    expected = list_api_time("all_gather", 16, coll, tensor_copies_time(c, size), c.profile)
    assert tensor_call_time(c, "all_gather", size) == pytest.approx(expected)
    # the caller's view loop is never hidden: one eager op per rank on top of the call and its copies
    assert tensor_call_time(c, "all_gather", size) >= coll + tensor_copies_time(c, size) + 16 * LIST_API_HOST_OP


def test_flat_buffer_gathers_unchanged() -> None:
    # one flat buffer per unit (torch FSDP, ``_all_gather_base``): no list API, the NCCL call alone
    c = _costing(_plan(16))
    for kind in ("all_gather", "reduce_scatter"):
        assert tensor_call_time(c, kind, 5e8) == c.pricer.time(kind, 5e8, "dp_shard")  # type: ignore[arg-type]


def _exposed_dp(dp: int) -> float:
    plan = _plan(dp, **DEEPSPEED)
    res = simulate(MODEL, TRAINING, get_cluster("a100", dp), plan, profile=PROFILE, fidelity="analytic")
    return res.breakdown["exposed_dp"]


def test_synchronised_tensor_step_grows_with_the_ranks() -> None:
    # fixed global batch, one micro-batch per step at every dp: the bytes each GPU gathers stay the
    # same, the host loops of every call grow by one eager op per added rank and loop
    calls = sum(c.count for c in step_calls(_costing(_plan(16, **DEEPSPEED)))[0]
                if c.kind in ("all_gather", "reduce_scatter"))
    exposed = [_exposed_dp(dp) for dp in (8, 16, 32, 64)]
    assert all(b > a for a, b in zip(exposed, exposed[1:]))
    # at least one loop per call of the added ranks (the gathers' copy loop may hide under NCCL)
    assert exposed[3] - exposed[2] >= calls * 32 * LIST_API_HOST_OP


def test_sc21_zero3_strong_scaling_shape() -> None:
    # Narayanan et al. SC'21 Table 2, DeepSpeed ZeRO-3 on A100 (rows 248-253 of published_runs.csv):
    # 175B 81.6 s at 384 GPUs -> 66.7 s at 1,536; 530B 255.5 s at 640 -> 183.7 s at 2,240. The
    # predicted ratio of the two ends of each model, at the bundled A100 profile, within 20 % of
    # the measured one (0.43 and 0.42 before the host loops: the compute halved twice, the
    # collectives did not grow)
    from clustersim.simulator.calibration.validate import load_runs, validate_row

    runs = load_runs().set_index("row_id", drop=False)
    rec = {i: validate_row({str(k): v for k, v in runs.loc[i].to_dict().items()}) for i in (248, 250, 251, 253)}
    for small, big in ((248, 250), (251, 253)):
        measured = rec[big]["measured_step_time_s"] / rec[small]["measured_step_time_s"]
        predicted = rec[big]["predicted_step_time_s"] / rec[small]["predicted_step_time_s"]
        assert predicted == pytest.approx(measured, rel=0.2)


def test_prior_applies_only_without_a_measured_launch_time() -> None:
    c = _costing(_plan(16, **DEEPSPEED))
    slow = replace(c, profile=PROFILE.model_copy(update={"host_launch_time": 50e-6}))
    assert tensor_call_time(slow, "reduce_scatter", 5e8) > tensor_call_time(c, "reduce_scatter", 5e8)
