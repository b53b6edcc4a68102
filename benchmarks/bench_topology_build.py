"""Benchmark: seconds and peak memory to build (and validate) rail-optimised DGX H100 clusters.

Prints one line per size (1,024 / 4,096 / 16,384 GPUs): the builder's columns (``Wiring``, what
preset clusters hold), the preset with its validation on the columns, the networkx graph built
from the columns on first access of ``Cluster.graph`` (only custom topologies, fabric reports and
drawing need it), the routing tables from the columns (``fabric_of``), and the tracemalloc peak of
the preset build (Python allocations; a separate pass, tracing slows the build down).

    .venv/bin/python benchmarks/bench_topology_build.py
"""

from __future__ import annotations

import time
import tracemalloc

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.routing import fabric_of
from clustersim.topologies import dgx_h100_pod
from clustersim.topologies.fabrics import NodeSpec, rail_optimized_parts
from clustersim.topologies.presets import DGX_H100

SIZES: tuple[int, ...] = (1024, 4096, 16384)


def _node() -> NodeSpec:
    acc = DGX_H100.accelerator
    return NodeSpec(gpus_per_node=8, nvlink_bandwidth=acc.nvlink_bandwidth, in_network_reduction=acc.nvls,
                    nic_bandwidth=DGX_H100.nic_bandwidth)


def _best_seconds(num_gpus: int, repeats: int = 3) -> tuple[float, float, float, float]:
    """Best-of-``repeats`` seconds: columns, preset + validation, graph from columns, routing tables."""
    best = [float("inf")] * 4
    for _ in range(repeats):
        t0 = time.perf_counter()
        rail_optimized_parts(num_gpus, _node()).to_wiring()
        t1 = time.perf_counter()
        cluster = dgx_h100_pod(num_gpus)
        t2 = time.perf_counter()
        fabric_of(cluster, CalibrationProfile(link_efficiency={"nic": 0.999}))  # a fresh profile: not memoised
        t3 = time.perf_counter()
        _ = cluster.graph
        t4 = time.perf_counter()
        best = [min(b, x) for b, x in zip(best, (t1 - t0, t2 - t1, t4 - t3, t3 - t2))]
    return best[0], best[1], best[2], best[3]


def _peak_mb(num_gpus: int) -> float:
    tracemalloc.start()
    cluster = dgx_h100_pod(num_gpus)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del cluster
    return peak / 1e6


def main() -> None:
    print(f"{'gpus':>6} {'nodes':>7} {'edges':>8} {'columns_s':>9} {'preset+validate_s':>17} {'graph_s':>8} "
          f"{'tables_s':>8} {'peak_MB':>8}")
    for n in SIZES:
        wiring = dgx_h100_pod(n).wiring
        assert wiring is not None
        cols, preset, graph, tables = _best_seconds(n)
        print(f"{n:>6} {len(wiring.nodes):>7} {len(wiring.src):>8} {cols:>9.3f} {preset:>17.3f} {graph:>8.3f} "
              f"{tables:>8.3f} {_peak_mb(n):>8.1f}")


if __name__ == "__main__":
    main()
