"""Grids of scenarios: sweep specs and stores, point evaluation, scaling studies, executors (local process pool, Dask).

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.

``sweep.sweep`` (sweep specs, stores, tables) imports pandas when it loads, so it stays out of the
face; the CLI and the facade import it when a sweep runs.
"""

from clustersim.simulator.sweep.executors import SchedulerLost, default_workers, make_executor
from clustersim.simulator.sweep.scaling import scaling_rows

__all__ = [
    "SchedulerLost",
    "default_workers",
    "make_executor",
    "scaling_rows",
]
