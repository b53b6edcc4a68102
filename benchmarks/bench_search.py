"""Benchmark: the engine's best plan of llama3-70b on 1,024 H100 (GBS 1024 x 8192), proven by branch and bound.

Prints the space, the seconds of each tier, how many plans the engine priced and the proven best.
``--check-bound`` also prices every valid plan with the engine (about 4,000 simulations: tens of
minutes) and prints the largest bound / engine ratio (the bound is valid when it is <= 1) and
whether the search's best is the exhaustive best. Run: python benchmarks/bench_search.py [--check-bound]
"""

from __future__ import annotations

import sys
import time

from clustersim.simulator.profile import default_profile
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.search.candidates import candidate_plans, plan_is_valid
from clustersim.simulator.search.search import search
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


def check_bound(model, training, cluster, best: float) -> None:  # type: ignore[no-untyped-def]
    """Engine-price every valid plan; print the worst bound / engine ratio and the exhaustive best."""
    prof = default_profile(cluster.accelerator.name)
    sb = StepBound(model, training, cluster, prof)
    worst, exhaustive, priced = 0.0, float("inf"), 0
    for plan in candidate_plans(model, training, cluster):
        if not plan_is_valid(model, training, cluster, plan):
            continue
        try:
            step = simulate(model, training, cluster, plan, profile=prof).step_time
        except ClusterSimError:
            continue
        priced += 1
        worst, exhaustive = max(worst, sb.step_time(plan) / step), min(exhaustive, step)
    print(f"every plan priced: {priced} fit; max bound/engine {worst:.4f} (valid: <= 1); "
          f"exhaustive best {exhaustive:.4f} s, search best {best:.4f} s, equal: {exhaustive == best}")


def main() -> None:
    model = get_model("llama3-70b")
    training = TrainingSpec(seq_len=8192, global_batch_size=1024)
    cluster = get_cluster("dgx-h100", 1024)
    t0 = time.perf_counter()
    rep = search(model, training, cluster, top=5)
    total = time.perf_counter() - t0
    print(f"candidates {rep.candidates}, valid {rep.valid}, memory-checked and fit {rep.fitting}, "
          f"did not fit {rep.memory_rejected}, pruned by the bound {rep.pruned}")
    print(f"enumeration and plan checks: {rep.analytic_seconds:.2f} s = {rep.valid / rep.analytic_seconds:,.0f} valid plans/s; "
          f"bound: {rep.bound_seconds:.2f} s; engine: {rep.engine_calls} calls, {rep.engine_seconds:.2f} s")
    print(f"total: {total:.2f} s")
    for r in rep.ranked:
        engine = f"{r.result.step_time:.3f}" if r.result else "-"
        print(f"  {r.plan.describe():45s} engine {engine} s  bound {r.bound:.3f} s  "
              f"analytic {r.estimate.step_time if r.estimate else float('nan'):.3f} s  tiers {r.disagreement * 100:+.1f}%")
    if "--check-bound" in sys.argv:
        check_bound(model, training, cluster, rep.ranked[0].result.step_time)  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
