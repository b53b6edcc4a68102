"""The analytical tier's memory counts the MoE dispatch buffers the partition counts (issue 13).

``step.partition`` holds one MoE layer's dispatch copies per stage under ``buffers`` (0.25-0.5 GiB on
these plans); the search's estimate must count them too, or its ``fits`` verdict passes plans that
phase 1 then finds out of memory for that reason alone. On one-stage plans the two memory models
agree to within a third of the buffers, so leaving the buffers out fails these tests.
"""

from __future__ import annotations

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.search.estimate import Estimator
from clustersim.simulator.step.partition import partition_plan
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model, moe_dispatch_buffer_bytes

CASES = [
    ("qwen3-30b-a3b", 8, ParallelPlan(dp=8, ep=8, zero=1, micro_batch=2), 512, "bf16"),
    ("qwen3-30b-a3b", 8, ParallelPlan(dp=8, ep=8, zero=1, micro_batch=2), 512, "fp8"),
    ("mixtral-8x7b", 16, ParallelPlan(dp=16, ep=8, zero=1, micro_batch=4), 256, "bf16"),
]


def _both(name: str, gpus: int, plan: ParallelPlan, gbs: int, precision: str) -> tuple[float, float, float]:
    """(estimated peak, the partition's peak, the partition's dispatch buffers) in bytes."""
    model, cluster = get_model(name), get_cluster("dgx-h100", gpus)
    training = TrainingSpec(seq_len=4096, global_batch_size=gbs, precision=precision)  # type: ignore[arg-type]
    est = Estimator(model, training, cluster, default_profile(cluster.accelerator.name)).estimate(plan)
    (stage,) = partition_plan(model, training, plan).memory
    buffers = moe_dispatch_buffer_bytes(model, micro_batch=plan.micro_batch, seq_len=4096, tp=plan.tp, cp=plan.cp,
                                        etp=plan.etp, dtype_bytes=training.activation_bytes,
                                        gemm_input_bytes=training.gemm_input_bytes)
    return est.peak_memory, stage.total, buffers


@pytest.mark.parametrize(("name", "gpus", "plan", "gbs", "precision"), CASES)
def test_the_estimate_counts_the_dispatch_buffers(name: str, gpus: int, plan: ParallelPlan, gbs: int,
                                                   precision: str) -> None:
    estimated, partitioned, buffers = _both(name, gpus, plan, gbs, precision)
    assert buffers >= 0.25 * 2**30  # the buffers are big enough to matter
    assert abs(estimated - partitioned) < 0.3 * buffers


@pytest.mark.parametrize(("name", "gpus", "plan", "gbs", "precision"), CASES)
def test_a_device_short_by_half_the_buffers_is_out_of_memory_for_both(name: str, gpus: int, plan: ParallelPlan,
                                                                       gbs: int, precision: str) -> None:
    estimated, partitioned, buffers = _both(name, gpus, plan, gbs, precision)
    capacity = partitioned - buffers / 2  # phase 1 rejects the plan on such a device
    assert estimated > capacity  # so the analytical tier must not call it fitting
