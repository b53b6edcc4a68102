"""One training step, phases 1-4: partition (stages, layers, memory) -> lower (per-stage costs) -> SimPy engine -> Result; roofline compute; the Chrome trace.

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.

``simulate_step`` is ``step.simulate.simulate``: under its own name it would hide the submodule
``step.simulate``.
"""

from clustersim.simulator.step.colocate import Colocation, Job, colocate as colocate_jobs
from clustersim.simulator.step.compute import (
    ADAM_BYTES_PER_PARAM,
    Pass,
    is_routed_expert,
    ops_time,
    ops_time_parts,
    optimizer_time,
    peak_for,
)
from clustersim.simulator.step.dispatch import EpShape, dispatch_time, expert_load
from clustersim.simulator.step.energy import (
    J_PER_KWH,
    StepEnergy,
    compute_mix,
    energy_per_token,
    energy_row,
    floor_w,
    money,
    rental_price,
    step_energy,
)
from clustersim.simulator.step.jitter import sync_wait_fraction
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import step_calls
from clustersim.simulator.step.lower_dp import flow_shop, overlapped_duration
from clustersim.simulator.step.partition import (
    RESERVED_BYTES,
    LayerSignature,
    layer_signature,
    op_kwargs,
    partition_memory,
    pipeline_split,
    stage_chunks,
)
from clustersim.simulator.step.recompute import full_recompute_time, saved_forward
from clustersim.simulator.step.result import CATEGORIES, Result
from clustersim.simulator.step.simulate import simulate as simulate_step
from clustersim.simulator.step.streams import FabricSharing
from clustersim.simulator.step.tp_overlap import hidden_bound
from clustersim.simulator.step.trace import write_trace

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "CATEGORIES",
    "J_PER_KWH",
    "RESERVED_BYTES",
    "Colocation",
    "Costing",
    "EpShape",
    "FabricSharing",
    "Job",
    "LayerSignature",
    "Pass",
    "Result",
    "StepEnergy",
    "colocate_jobs",
    "compute_mix",
    "dispatch_time",
    "energy_per_token",
    "energy_row",
    "expert_load",
    "floor_w",
    "flow_shop",
    "full_recompute_time",
    "hidden_bound",
    "is_routed_expert",
    "layer_signature",
    "money",
    "op_kwargs",
    "ops_time",
    "ops_time_parts",
    "optimizer_time",
    "overlapped_duration",
    "partition_memory",
    "peak_for",
    "pipeline_split",
    "rental_price",
    "saved_forward",
    "simulate_step",
    "stage_chunks",
    "step_calls",
    "step_energy",
    "sync_wait_fraction",
    "write_trace",
]
