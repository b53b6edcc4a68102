"""Speed of ``price_collective`` on DGX H100 fat trees of 1k, 4k and 16k GPUs.

Prints, per fabric (2:1 oversubscribed fat tree and rail-optimised) and size, the milliseconds to build the graph (topologies) and the fabric tables (once
per cluster), to price a data-parallel all-reduce with every concurrent DP group on the links
(first: first call on a fresh fabric, building the shortest-path DAGs it needs; ring / selector:
first call for new groups once the DAGs exist, forced ring and the ring-vs-tree selector; warm:
another message size, patterns memoised), a TP all-reduce inside nodes and one all-to-all of every
GPU (priced from per-switch sums, ``Fabric.all_to_all``) with its peak RSS so far.
Run: ``.venv/bin/python benchmarks/bench_collectives.py``. Not part of the test run.
"""

from __future__ import annotations

import resource
import time

import numpy as np

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.collectives import price_collective
from clustersim.simulator.network.routing import fabric_of
from clustersim.topologies.presets import get_cluster


def _ms(fn: object) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()  # type: ignore[operator]
    return (time.perf_counter() - t0) * 1e3, out


def bench(num_gpus: int, fabric: str, tp: int = 8, dp: int = 128, oversubscription: float = 2.0) -> None:
    """Print timings for one cluster size (DP groups of ``dp`` ranks, stride ``num_gpus // dp``)."""
    profile = CalibrationProfile()
    t_build, cluster = _ms(lambda: get_cluster("dgx-h100", num_gpus, fabric=fabric, oversubscription=oversubscription))
    t_fabric, _ = _ms(lambda: fabric_of(cluster, profile))
    ids = np.arange(num_gpus)
    dp_groups = ids.reshape(dp, num_gpus // dp).T.tolist()  # rank r of every DP group, all at once
    tp_groups = ids.reshape(-1, tp).tolist()
    t_first, cost = _ms(lambda: price_collective("all_reduce", 2**30, dp_groups, cluster, profile))
    flipped = [g[::-1] for g in dp_groups]  # same devices, new key: nothing memoised but the DAGs
    t_ring, _ = _ms(lambda: price_collective("all_reduce", 2**30, flipped, cluster, profile, "ring"))
    t_sel, _ = _ms(lambda: price_collective("all_reduce", 2**30, [g[1:] + g[:1] for g in dp_groups], cluster, profile))
    t_warm, _ = _ms(lambda: price_collective("all_reduce", 2**28, dp_groups, cluster, profile))
    t_tp, tp_cost = _ms(lambda: price_collective("all_reduce", 2**26, tp_groups, cluster, profile))
    t_a2a, a2a = _ms(lambda: price_collective("all_to_all", 2**30, [list(range(num_gpus))], cluster, profile))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{fabric:14s} {num_gpus:6d} GPUs: graph {t_build:6.0f} ms, fabric tables {t_fabric:5.0f} ms | DP all-reduce "
          f"({len(dp_groups)} groups x {dp}): first {t_first:5.0f} ms, ring {t_ring:5.1f} ms, selector "
          f"{t_sel:5.1f} ms, warm {t_warm:5.2f} ms [{cost.algorithm}, busbw {cost.bus_bandwidth / 1e9:.0f} GB/s] | "
          f"TP all-reduce ({len(tp_groups)} groups) {t_tp:5.1f} ms [{tp_cost.algorithm}] | all-to-all of all "
          f"{num_gpus} GPUs {t_a2a:6.0f} ms [busbw {a2a.bus_bandwidth / 1e9:.0f} GB/s] | peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    for fab in ("fat_tree", "rail_optimized"):
        for n in (1024, 4096, 16384):
            bench(n, fab)
