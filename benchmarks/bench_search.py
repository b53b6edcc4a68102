"""Benchmark: search every valid plan of llama3-70b on 1,024 H100 (issue target: < 60 s; the
analytical tier >= 1,000 plans/s). Run: python benchmarks/bench_search.py
"""

from __future__ import annotations

import time

from clustersim.simulator.search.search import search
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


def main() -> None:
    model = get_model("llama3-70b")
    training = TrainingSpec(seq_len=8192, global_batch_size=1024)
    cluster = get_cluster("dgx-h100", 1024)
    t0 = time.perf_counter()
    rep = search(model, training, cluster, top=5)
    total = time.perf_counter() - t0
    print(f"candidates {rep.candidates}, valid {rep.valid}, fit {rep.fitting}")
    print(f"analytical tier: {rep.analytic_seconds:.2f} s = {rep.valid / rep.analytic_seconds:,.0f} valid plans/s")
    print(f"total with the engine shortlist: {total:.2f} s")
    for r in rep.ranked:
        engine = f"{r.result.step_time:.3f}" if r.result else "-"
        print(f"  {r.plan.describe():45s} engine {engine} s  analytic {r.estimate.step_time:.3f} s  tiers {r.disagreement * 100:+.1f}%")


if __name__ == "__main__":
    main()
