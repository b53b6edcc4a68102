"""An optimistic bound on a plan's facility energy per token, for the search objective ``energy``.

Owns ``EnergyBound``: for one (model, training, cluster, profile), per plan, joules per token that
the energy model of ``step.energy`` cannot go below without running the engine:

    E / token >= (T_bound x floor_w + sum over kernel parts of cluster seconds x (W_part - W_min)) / tokens

- ``T_bound`` is ``search.bound.StepBound.step_time`` (<= the engine's step time) and ``floor_w``
  the cluster's least power while a step runs (every GPU at its lowest activity level, nodes and
  fabric on; ``step.energy.floor_w``): no instant of the step draws less.
- the kernels: every device runs its stage's ops for each of its micro-batches (forward, input
  and weight gradient), so the cluster runs each layer's per-device ops (the plan's sharding,
  ``step.partition.op_kwargs``) GBS / micro_batch x tp x cp times, and the embedding and head as
  often. Those seconds by part (``step.compute.ops_time_parts``) are the compute the engine logs;
  a compute interval draws at least its kernel mix (element-wise at the memory level, launch
  overhead at the waiting level, the rest dense), i.e. ``W_part - W_min`` above the floor.
  Recompute, communication, bubbles and the optimizer only add.

It prices no plan with the engine and decides nothing (``search.search`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.search.bound import SAFETY
from clustersim.simulator.step import (
    Pass,
    compute_mix,
    expert_load,
    floor_w,
    op_kwargs,
    ops_time_parts,
)
from clustersim.topologies import Cluster
from clustersim.topologies.power import ACTIVITIES, power_spec
from clustersim.workloads import ModelSpec, Op, TrainingSpec, embedding_ops, head_ops, layer_ops

PASSES: tuple[Pass, ...] = ("fwd", "bwd_input", "bwd_weight")


@dataclass
class EnergyBound:
    """Optimistic facility joules per token of plans of one (model, training, cluster, profile)."""

    model: ModelSpec
    training: TrainingSpec
    cluster: Cluster
    profile: CalibrationProfile
    _kernels: dict[tuple[object, ...], float] = field(default_factory=dict)

    @property
    def floor_per_token(self) -> float:
        """Facility joules per token per second of step time at the cluster's least power."""
        return floor_w(self.cluster) / self.training.tokens_per_step

    def per_token(self, plan: ParallelPlan, step_time_bound: float) -> float:
        """The plan's optimistic J per token, from its optimistic step time."""
        return step_time_bound * self.floor_per_token + self.kernel_j_per_token(plan)

    def kernel_j_per_token(self, plan: ParallelPlan) -> float:
        """Facility J per token the plan's kernels draw above the floor (cached by sharding)."""
        kw = op_kwargs(plan, self.training)
        key = (tuple(sorted(kw.items())), plan.expert_imbalance)
        if key not in self._kernels:
            load = expert_load(plan.expert_imbalance, self.model.capacity_factor)  # as lowering prices it
            ends: list[Op] = [*embedding_ops(self.model, **kw), *head_ops(self.model, **kw)]
            device_j = sum(self._above_floor_j(ends, which, load) for which in PASSES)
            for first, count in self._layer_kinds().values():  # layers alike in kind cost alike
                ops = list(layer_ops(self.model, first, attention_kernel=self.training.attention_kernel, **kw))
                device_j += count * sum(self._above_floor_j(ops, which, load) for which in PASSES)
            copies = self.training.global_batch_size / plan.micro_batch * plan.tp * plan.cp
            self._kernels[key] = SAFETY * device_j * copies / self.training.tokens_per_step  # PUE 1, as the search prices
        return self._kernels[key]

    def _layer_kinds(self) -> dict[tuple[object, ...], tuple[int, int]]:
        """(first layer, count) per layer signature (kind, MoE or not, attention window)."""
        out: dict[tuple[object, ...], tuple[int, int]] = {}
        m = self.model
        for i in range(m.num_layers):
            sig = (m.layer_kind(i), m.is_moe_layer(i), m.attention_window(i))
            first, count = out.get(sig, (i, 0))
            out[sig] = (first, count + 1)
        return out

    def _above_floor_j(self, ops: list[Op], which: Pass, imbalance: float) -> float:
        """One device, one micro-batch, one pass: joules its kernels draw above the least watts."""
        acc = self.cluster.accelerator
        parts = ops_time_parts(ops, acc, self.profile, self.training.precision, which, imbalance)
        power = power_spec(acc)
        watts = {a: power.watts(power.levels[a], acc.power_limit_w) for a in ACTIVITIES}
        least = min(watts.values())
        seconds = sum(parts.values())
        return sum(share * seconds * (watts[a] - least) for a, share in compute_mix(parts).items())
