"""The inputs every chunk's costing shares, and the op timing and host excess read through them.

Owns ``Costing``: the workload, the plan, the accelerator, the calibration profile and the pricer
of the collectives, with the expert load of the plan, each op list's time by pass
(``step.compute.ops_time``) and what the host adds to a chunk (``step.host``). The lowering
(``step.lower``) and the data-parallel pricing (``step.lower_dp``) both take it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from clustersim.simulator.network import CommPricer
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.step.compute import Pass, local_experts, ops_time
from clustersim.simulator.step.dispatch import expert_load
from clustersim.simulator.step.graphs import layer_launches
from clustersim.simulator.step.host import HostExcess, eager_excess, host_excess
from clustersim.topologies import AcceleratorSpec
from clustersim.workloads import ModelSpec, Op, TrainingSpec


@dataclass(frozen=True)
class Costing:
    """The inputs shared by every chunk's costing."""

    model: ModelSpec
    training: TrainingSpec
    plan: ParallelPlan
    accelerator: AcceleratorSpec
    profile: CalibrationProfile
    pricer: CommPricer

    @property
    def hbm_bandwidth(self) -> float:
        """HBM bytes/s a memory-bound kernel gets: the datasheet figure at the profile's efficiency."""
        return self.accelerator.hbm_bandwidth * self.profile.memory_efficiency

    @property
    def expert_scale(self) -> float:
        """The busiest expert rank's tokens over the mean (imbalance, capped by a capacity factor)."""
        return expert_load(self.plan.expert_imbalance, self.model.capacity_factor)

    def time(self, ops: list[Op], which: Pass) -> float:
        return ops_time(ops, self.accelerator, self.profile, self.training.precision, which, self.expert_scale)

    def host(self, per_layer: list[tuple[list[Op], bool]], recomputed: list[list[Op]]) -> HostExcess:
        """Seconds the host's kernel launches add to one micro-batch of a chunk (``step.host``)."""
        local = max(1, local_experts(self.model, self.plan))
        layers = [ops for ops, _ in per_layer]

        def gpu(ops: Sequence[Op], which: Pass) -> float:
            return self.time(list(ops), which)

        scopes, fused, ep = self.plan.cuda_graph_scope, self.plan.moe_fused_grouped_mlp, self.plan.ep

        def launches(ops: Sequence[Op], which: Pass) -> list[int]:
            return layer_launches(ops, which, scopes, local, fused, ep)

        launch = host_excess(self.model, layers, recomputed, gpu, self.profile.host_launch_time, launches)
        eager = eager_excess(layers, self.profile.eager_layer_overhead, self.profile.kernel_overhead,
                             gpu if self.profile.kernels_async else None)
        return HostExcess(fwd=launch.fwd + eager.fwd, bwd=launch.bwd + eager.bwd, recompute=launch.recompute)

