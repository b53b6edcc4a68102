"""The plan space, the analytical tier (estimate) and the search that re-prices its shortlist with the engine.
"""

from clustersim.simulator.search.estimate import Estimator
from clustersim.simulator.search.search import (
    OBJECTIVES,
    Ranked,
    SearchReport,
    TokenPrice,
    candidate_plans,
    plan_is_valid,
    price_per_token,
    search as search_plans,
)

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
