"""The parallel plan and what is checked of it before any cost: ParallelPlan, the plan checks, rank placement on the cluster, pipeline schedules.

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.
"""

from clustersim.simulator.plan.checks import BUCKET_RANGE, check_plan
from clustersim.simulator.plan.columns import FSDPS, PlanColumns, columns_valid, plan_columns
from clustersim.simulator.plan.layout import layout_split, parse_layout
from clustersim.simulator.plan.placement import Axis, Placement
from clustersim.simulator.plan.plan import (
    RECOMPUTES,
    SCHEDULES,
    Fsdp,
    ParallelPlan,
    ParamGatherUnit,
    Recompute,
    Schedule,
    num_microbatches,
    plan_from_mapping,
)
from clustersim.simulator.plan.schedules import (
    Action,
    Step,
    chunks_per_stage,
    dependency,
    destination,
    dualpipe_program,
    extra_warmup,
    lanes,
    model_chunk,
    num_model_chunks,
    paired_program,
    pairs_forward_backward,
    program_ends,
    stage_in_flight_peak,
)

__all__ = [
    "BUCKET_RANGE",
    "FSDPS",
    "RECOMPUTES",
    "SCHEDULES",
    "Action",
    "Axis",
    "Fsdp",
    "ParallelPlan",
    "ParamGatherUnit",
    "Placement",
    "PlanColumns",
    "Recompute",
    "Schedule",
    "Step",
    "check_plan",
    "chunks_per_stage",
    "columns_valid",
    "dependency",
    "destination",
    "dualpipe_program",
    "extra_warmup",
    "lanes",
    "layout_split",
    "model_chunk",
    "num_microbatches",
    "num_model_chunks",
    "paired_program",
    "pairs_forward_backward",
    "parse_layout",
    "plan_columns",
    "plan_from_mapping",
    "program_ends",
    "stage_in_flight_peak",
]
