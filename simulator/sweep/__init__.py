"""Grids of scenarios: sweep specs and stores, point evaluation, scaling studies, executors (local process pool, Dask).
"""

from clustersim.simulator.sweep.executors import SchedulerLost, default_workers, make_executor
from clustersim.simulator.sweep.scaling import scaling_rows

__all__ = [
    "SchedulerLost",
    "default_workers",
    "make_executor",
    "scaling_rows",
]
