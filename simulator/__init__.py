"""clustersim's simulator: plan, partition, cost, engine and result for one training step.

The public API is ``simulate`` (one step), with ``ParallelPlan``, ``Result`` and the scenario
loader; search, sweeps, calibration and the long-run goodput model build on it.
"""

__version__ = "0.1.0"
