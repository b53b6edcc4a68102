"""clustersim: a discrete-event performance simulator for distributed AI training clusters.

The facade: ``simulate`` (one step), ``search`` (the best plan), ``sweep`` (a grid of
scenarios), ``load_scenario`` (a scenario file into its three inputs), ``Result``. The packages
are ``clustersim.workloads`` (models, training), ``clustersim.topologies`` (accelerators,
clusters), ``clustersim.simulator`` (the engine and everything around it) and
``clustersim.reports`` (tables, plots, HTML). Names resolve on first use, so ``import
clustersim`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from clustersim.simulator import __version__

# name -> (the room's face that offers it, its name there). ``sweep`` comes from its module: the
# sweep's tables need pandas, so it stays out of the sweep face (see docs/ARCHITECTURE.md).
_FACADE = {
    "simulate": ("clustersim.simulator.step", "simulate_step"),
    "Result": ("clustersim.simulator.step", "Result"),
    "search": ("clustersim.simulator.search", "search_plans"),
    "sweep": ("clustersim.simulator.sweep.sweep", "sweep"),
    "load_scenario": ("clustersim.simulator.scenario", "load_scenario"),
    "ParallelPlan": ("clustersim.simulator.plan", "ParallelPlan"),
}

__all__ = ["__version__", *_FACADE]


def __getattr__(name: str) -> Any:
    """Import a facade name from the face (or module) that offers it (PEP 562)."""
    if name not in _FACADE:
        raise AttributeError(f"module 'clustersim' has no attribute {name!r}")
    module, attribute = _FACADE[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
