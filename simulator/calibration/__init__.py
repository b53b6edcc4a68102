"""Calibration: fitting the profiles (efficiency curves and link factors as data), validation against published runs, the real PyTorch backend.

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.

The fits (``fit_defaults``, ``fit_first_order``, ``fit_runs``, ``fit_crossval``, ``fit_logs``) and
``validate`` import pandas when they load, so they stay out of the face; the CLI imports them
inside the commands that run them. The profile every tier reads is ``clustersim.simulator.profile``
(outside this room: behind this face, which imports the step, it would close a cycle).
"""

from clustersim.simulator.calibration.fit import FitReport, fit_profile, fit_profiles
from clustersim.simulator.calibration.imported_runs import (
    ImportedRun,
    MeasuredLongRun,
    import_measured,
    import_run,
    measured_long_run,
    write_run,
)
from clustersim.simulator.calibration.intervals_transferred import transferred_coverage, transferred_table
from clustersim.simulator.calibration.ranks import (
    SlowRank,
    detection_reports,
    has_rank_times,
    slow_rank,
)
from clustersim.simulator.calibration.runlog_records import RunLogError
from clustersim.simulator.calibration.runlogs import parse_log
from clustersim.simulator.calibration.torch_backend import torch_available
from clustersim.simulator.calibration.torch_backend.census import compare, measured_tally, passes
from clustersim.simulator.calibration.torch_backend.check import (
    STATISTICS,
    CheckRow,
    check,
    fastest_gap,
    misordered,
    summary,
)
from clustersim.simulator.calibration.torch_backend.measure import (
    HOLDOUT_GPT,
    MICRO_OPERANDS,
    MICRO_PASSES,
    MICRO_PLACEMENTS,
    SMALL_GPT,
    TINY_GPT,
    census,
    check_passes,
    host_cores,
    load_steps,
    measure,
    standard_plans,
)
from clustersim.simulator.calibration.torch_backend.micro_passes import OPERANDS_DEFAULT
from clustersim.simulator.calibration.torch_backend.specs import GPTConfig, StepRecord, TimingRecipe
from clustersim.simulator.calibration.watch import (
    Assessment,
    Event,
    Prediction,
    ScalePoint,
    WatchRules,
    assess,
    detection_delay,
)

__all__ = [
    "HOLDOUT_GPT",
    "MICRO_OPERANDS",
    "MICRO_PASSES",
    "MICRO_PLACEMENTS",
    "OPERANDS_DEFAULT",
    "SMALL_GPT",
    "STATISTICS",
    "TINY_GPT",
    "Assessment",
    "CheckRow",
    "Event",
    "FitReport",
    "GPTConfig",
    "ImportedRun",
    "MeasuredLongRun",
    "Prediction",
    "RunLogError",
    "ScalePoint",
    "SlowRank",
    "StepRecord",
    "TimingRecipe",
    "WatchRules",
    "assess",
    "census",
    "check",
    "check_passes",
    "compare",
    "detection_delay",
    "detection_reports",
    "fastest_gap",
    "fit_profile",
    "fit_profiles",
    "has_rank_times",
    "host_cores",
    "import_measured",
    "import_run",
    "load_steps",
    "measure",
    "measured_long_run",
    "measured_tally",
    "misordered",
    "parse_log",
    "passes",
    "slow_rank",
    "standard_plans",
    "summary",
    "torch_available",
    "transferred_coverage",
    "transferred_table",
    "write_run",
]
