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

_FACADE = {
    "simulate": "clustersim.simulator.step.simulate",
    "Result": "clustersim.simulator.step.result",
    "search": "clustersim.simulator.search.search",
    "sweep": "clustersim.simulator.sweep.sweep",
    "load_scenario": "clustersim.simulator.scenario",
    "ParallelPlan": "clustersim.simulator.plan.plan",
}

__all__ = ["__version__", *_FACADE]


def __getattr__(name: str) -> Any:
    """Import a facade name from the module that owns it (PEP 562)."""
    if name not in _FACADE:
        raise AttributeError(f"module 'clustersim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_FACADE[name]), name)
    globals()[name] = value
    return value
