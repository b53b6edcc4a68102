"""Benchmark: seconds and peak memory to build (and validate) rail-optimised DGX H100 clusters.

Prints one line per size (1,024 / 4,096 / 16,384 GPUs). Target: < 2 s and < 500 MB at 16k GPUs.
Memory is the tracemalloc peak of the build (Python allocations), measured in a separate pass
from the timing because tracing slows the build down.

    .venv/bin/python benchmarks/bench_topology_build.py
"""

from __future__ import annotations

import time
import tracemalloc

from clustersim.topologies import dgx_h100_pod, validate_cluster
from clustersim.topologies.fabrics import NodeSpec, rail_optimized
from clustersim.topologies.presets import DGX_H100

SIZES: tuple[int, ...] = (1024, 4096, 16384)


def _node() -> NodeSpec:
    acc = DGX_H100.accelerator
    return NodeSpec(gpus_per_node=8, nvlink_bandwidth=acc.nvlink_bandwidth, in_network_reduction=acc.nvls,
                    nic_bandwidth=DGX_H100.nic_bandwidth)


def _best_seconds(num_gpus: int, repeats: int = 3) -> tuple[float, float]:
    """Best-of-``repeats`` seconds for the graph build alone and for preset + validation."""
    build, full = float("inf"), float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        rail_optimized(num_gpus, _node())
        t1 = time.perf_counter()
        validate_cluster(dgx_h100_pod(num_gpus))  # the preset validates too: validation runs twice here
        build, full = min(build, t1 - t0), min(full, time.perf_counter() - t1)
    return build, full


def _peak_mb(num_gpus: int) -> float:
    tracemalloc.start()
    cluster = dgx_h100_pod(num_gpus)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del cluster
    return peak / 1e6


def main() -> None:
    print(f"{'gpus':>6} {'nodes':>7} {'edges':>8} {'build_s':>8} {'preset+2xvalidate_s':>20} {'peak_MB':>8}")
    for n in SIZES:
        graph = dgx_h100_pod(n).graph
        build, full = _best_seconds(n)
        print(f"{n:>6} {graph.number_of_nodes():>7} {graph.number_of_edges():>8} {build:>8.3f} {full:>20.3f} "
              f"{_peak_mb(n):>8.1f}")


if __name__ == "__main__":
    main()
