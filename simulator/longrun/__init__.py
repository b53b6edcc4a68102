"""Phase 5, runs of days: checkpoint cost, failures drawn from MTBF, stragglers, goodput and the best checkpoint interval.

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.
"""

from clustersim.simulator.longrun.checkpoint import CheckpointSpec, LongRunError, checkpoint_cost
from clustersim.simulator.longrun.energy import RunEnergy, run_energy
from clustersim.simulator.longrun.failures import FailureSpec, system_mtbf
from clustersim.simulator.longrun.goodput import (
    CAUSES,
    IntervalSweep,
    LongRunResult,
    LongRunSpec,
    interval_grid,
    simulate_long_run,
    sweep_intervals,
)
from clustersim.simulator.longrun.stragglers import (
    StepTimeDistribution,
    StragglerSpec,
    SymmetricStep,
    step_time_distribution,
)

__all__ = [
    "CAUSES",
    "CheckpointSpec",
    "FailureSpec",
    "IntervalSweep",
    "LongRunError",
    "LongRunResult",
    "LongRunSpec",
    "RunEnergy",
    "StepTimeDistribution",
    "StragglerSpec",
    "SymmetricStep",
    "checkpoint_cost",
    "interval_grid",
    "run_energy",
    "simulate_long_run",
    "step_time_distribution",
    "sweep_intervals",
    "system_mtbf",
]
