"""Grids of scenarios: sweep specs and stores, point evaluation, scaling studies, executors (local process pool, Dask).
"""
