"""The modules split for code health stay within STYLE.md's 400 lines, and their old homes stay faces.

The style guide (STYLE.md, shared by the project) asks for modules of 100-400 lines, one concept
each. The eight modules below were over 400 lines (jobargs 529, runlogs 522, fit_first_order 443,
fit 421, search 466, cli.calibrate 443, sweep 458, intervals 503) and were split without a logic change; this
test fails on the tree before the split in all 19 size cases (the seven old modules are over 400
lines, the twelve parts do not exist yet), and keeps each part, and the old module that is now
the face of its parts, from growing back.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400

SPLIT: dict[str, tuple[str, ...]] = {
    "simulator/calibration/jobargs.py": ("jobconfig.py", "jobargs_megatron.py"),
    "simulator/calibration/runlogs.py": ("runlog_records.py", "runlog_parsers.py"),
    "simulator/calibration/fit_first_order.py": ("fit_params.py",),
    "simulator/calibration/fit.py": ("fit_compute.py", "fit_comm.py"),
    "simulator/search/search.py": ("objectives.py", "branch_bound.py"),
    "simulator/cli/calibrate.py": ("calibrate_tables.py",),
    "simulator/sweep/sweep.py": ("sweep_spec.py", "sweep_store.py"),
    "simulator/intervals.py": ("interval_fit.py",),
}
"""Old module -> the modules split out of it (in the same folder)."""

FACE_NAMES: dict[str, tuple[str, ...]] = {
    "clustersim.simulator.calibration.jobargs": ("read_job",),
    "clustersim.simulator.calibration.runlogs": ("parse_log", "read_log", "steady_state", "interruptions"),
    "clustersim.simulator.calibration.fit_first_order": ("fit", "fit_scales", "cross_validate", "apply_scales"),
    "clustersim.simulator.calibration.fit": ("fit_profile", "fit_profiles", "FitReport", "probe_reference"),
    "clustersim.simulator.search.search": ("search", "SearchReport"),
    "clustersim.simulator.cli.calibrate": ("register",),
    "clustersim.simulator.sweep.sweep": ("run_sweep", "sweep", "consolidate", "SweepInterrupted"),
    "clustersim.simulator.intervals": ("interval_for", "interval_of", "load_intervals", "INTERVALS_PATH"),
}
"""The entry points each old module still offers (the callers of the repository import them there)."""


def _parts() -> list[Path]:
    return sorted({ROOT / old for old in SPLIT} | {(ROOT / old).parent / new for old, news in SPLIT.items() for new in news})


@pytest.mark.parametrize("path", _parts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_split_modules_are_within_the_style_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines > {MAX_LINES} (STYLE.md)"


@pytest.mark.parametrize("module", sorted(FACE_NAMES))
def test_old_modules_keep_their_entry_points(module: str) -> None:
    loaded = importlib.import_module(module)
    assert [n for n in FACE_NAMES[module] if not hasattr(loaded, n)] == []
