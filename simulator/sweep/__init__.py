"""Grids of scenarios: sweep specs and stores, point evaluation, scaling studies, executors (local process pool, Dask).

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.

``sweep.sweep`` (the driver) and ``sweep.sweep_store`` (the parts store, tables) import pandas when
they load, so they stay out of the face; the CLI and the facade import them when a sweep runs.
``sweep.sweep_spec`` (the sweep file, grid, point ids) loads no pandas and sits behind the face.
"""

from clustersim.simulator.sweep.executors import SchedulerLost, default_workers, make_executor
from clustersim.simulator.sweep.scaling import scaling_rows
from clustersim.simulator.sweep.sweep_spec import expand_points, load_sweep

__all__ = [
    "SchedulerLost",
    "default_workers",
    "expand_points",
    "load_sweep",
    "make_executor",
    "scaling_rows",
]
