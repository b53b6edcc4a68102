"""The parallel plan and what is checked of it before any cost: ParallelPlan, the plan checks, rank placement on the cluster, pipeline schedules.
"""
