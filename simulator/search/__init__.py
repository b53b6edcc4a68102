"""The plan space, the analytical tier (estimate) and the search that re-prices its shortlist with the engine.

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.

``search_plans`` is ``search.search.search``: under its own name it would hide the submodule
``search.search``.
"""

from clustersim.simulator.search.candidates import candidate_plans, plan_is_valid
from clustersim.simulator.search.estimate import Estimator
from clustersim.simulator.search.objectives import OBJECTIVES, Ranked, TokenPrice, price_per_token
from clustersim.simulator.search.search import SearchReport, search as search_plans

__all__ = [
    "OBJECTIVES",
    "Estimator",
    "Ranked",
    "SearchReport",
    "TokenPrice",
    "candidate_plans",
    "plan_is_valid",
    "price_per_token",
    "search_plans",
]
