"""Jobs side by side on one cluster (``step.colocate``): nothing shared = alone exactly; shared
uplinks slow both jobs, symmetric jobs alike, within the max-min fair-share bound; a busier
neighbour slows a job more; deterministic; and ``FabricLoad.taken`` in closed form."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.errors import PlanError
from clustersim.simulator.network import FabricLoad
from clustersim.simulator.network.sharing import FabricLoadError
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.step.colocate import Job, colocate, taken_by_others
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.topologies.colocate import job_views
from clustersim.workloads import TrainingSpec, get_model

MODEL = get_model("llama3-8b")
PLAN = ParallelPlan(tp=1, pp=1, dp=32, zero=1, recompute="full")


def _job(name: str, gbs: int = 32) -> Job:
    return Job(name=name, model=MODEL, training=TrainingSpec(seq_len=2048, global_batch_size=gbs, precision="bf16"),
               plan=PLAN)


def _tor(gpus: int, oversubscription: float = 4.0):  # type: ignore[no-untyped-def]
    """A top-of-rack fat tree: four servers per leaf, oversubscribed uplinks."""
    return get_cluster("dgx-h100", gpus, rail_optimized=False, hosts_per_leaf=32, oversubscription=oversubscription)


def test_nothing_shared_is_the_alone_step_exactly() -> None:
    out = colocate([_job("a"), _job("b")], _tor(64), "packed")  # each job on its own two leaves
    assert not out.shared_links and out.converged
    for o in out.jobs:
        assert o.shared.step_time == o.alone.step_time and o.slowdown == 0.0
        assert o.aligned.step_time == o.alone.step_time


def test_shared_uplinks_slow_both_jobs_alike_within_the_fair_share_bound() -> None:
    joint = _tor(64)
    out = colocate([_job("a"), _job("b")], joint, "interleaved")  # two servers of each job on every leaf
    a, b = out.jobs
    assert out.converged and out.shared_links
    assert a.slowdown > 0.01 and abs(a.slowdown - b.slowdown) < 1e-12  # the same job on mirrored devices
    # Bound: max-min fairness leaves a job at least half of every link it shares.
    view = job_views(joint, [32, 32], "interleaved")[0]
    rates = [o.alone.link_rates for o in out.jobs]
    half = np.where((rates[0] > 0) & (rates[1] > 0), 0.5, 0.0)
    worst = simulate(MODEL, _job("a").training, view, PLAN, fabric_sharing="flows",
                     fabric_load=FabricLoad(taken=half))
    assert a.alone.step_time < a.shared.step_time <= worst.step_time * (1 + 1e-9)
    assert a.aligned.step_time == worst.step_time and a.slowdown_aligned >= a.slowdown  # the band's upper end


def test_a_busier_neighbour_slows_a_job_more() -> None:
    joint = _tor(64)
    calm = colocate([_job("a"), _job("b", gbs=128)], joint, "interleaved").jobs[0]  # same bytes, 4x the compute
    busy = colocate([_job("a"), _job("b", gbs=32)], joint, "interleaved").jobs[0]
    assert calm.alone.step_time == busy.alone.step_time
    assert 0 < calm.slowdown < busy.slowdown


def test_deterministic() -> None:
    one = colocate([_job("a"), _job("b")], _tor(64), "interleaved").to_dict()
    two = colocate([_job("a"), _job("b")], _tor(64), "interleaved").to_dict()
    assert one == two


def test_taken_is_capacity_removed_in_closed_form() -> None:
    cap = np.array([10.0, 20.0, 40.0])
    cls = np.array(["nic", "nic", "leaf_spine"])
    assert np.allclose(FabricLoad(taken=np.array([0.0, 0.25, 0.5])).capacity(cap, cls, {}), [10.0, 15.0, 20.0])
    with pytest.raises(FabricLoadError, match="fractions in"):
        FabricLoad(taken=np.array([0.0, 1.0, 0.5])).capacity(cap, cls, {})
    with pytest.raises(FabricLoadError, match="one per link id"):
        FabricLoad(taken=np.zeros(2)).capacity(cap, cls, {})


def test_others_take_their_rate_but_never_more_than_the_fair_share() -> None:
    cap = np.array([100.0, 100.0, 100.0])
    rates = [np.array([50.0, 0.0, 10.0]), np.array([90.0, 0.0, 20.0]), np.array([90.0, 5.0, 0.0])]
    taken = taken_by_others(rates, 0, cap)
    # link 0: two others want 1.8 of it, leave job 0 a third; link 1: 5 %; link 2: 20 %
    assert np.allclose(taken, [2 / 3, 0.05, 0.2])


def test_one_job_is_not_a_colocation() -> None:
    with pytest.raises(PlanError, match="give two or more"):
        colocate([_job("a")], _tor(64))
