"""The plan space, the analytical tier (estimate) and the search that re-prices its shortlist with the engine.
"""
