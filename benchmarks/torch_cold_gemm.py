"""GEMMs of the small GPT's 2-rank plans with hot operands vs operands cycled through a model-sized
working set, on 2 pinned 1-thread ranks at once and on 1 rank with every core (issue 21).

The question it answers: the calibration's GEMM microbenchmarks repeat one call on the same
operands (they stay in the core's caches), while a training step walks through the whole model's
weights and activations. In the lead's quiet rounds every 2-rank plan was predicted 25-34 ms
(16-24 % of its compute) fast, DDP and the pipelines included, while the single rank (one
process, 2 threads, one copy of the model in the shared cache) was predicted within a few %. If
the cold/hot ratio is ~1.15 on 2 ranks and ~1.0 on 1 rank, the GEMM microbenchmarks should cycle
their operands through the working set a rank really has. Prints one row per (shape, ranks).
Nothing is fitted or written; run it on a quiet machine (~1 minute):

    .venv/bin/python benchmarks/torch_cold_gemm.py [WORKING_SET_MB]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Callable

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:  # the benchmark needs the torch extra
    torch = None  # type: ignore[assignment]

from clustersim.simulator.calibration.torch_backend.measure import SMALL_GPT, gemm_shapes, standard_plans
from clustersim.simulator.calibration.torch_backend.launch import free_port

REPS = 20
"""GEMM calls per timed sample."""
SAMPLES = 15
"""Timed samples per (shape, operands), alternating hot and cold so the host's drift hits both."""


def _rates(shape: list[int], working_set: int) -> tuple[float, float, int]:
    """(hot FLOP/s, cold FLOP/s, copies) of one (m, n, k) forward GEMM on this rank."""
    m, n, k = shape
    copies = max(1, working_set // (4 * (m * k + n * k + m * n)))
    xs, ws = [torch.randn(m, k) for _ in range(copies)], [torch.randn(n, k) for _ in range(copies)]
    outs = [torch.empty(m, n) for _ in range(copies)]

    def run(cycle: bool) -> float:
        start = time.perf_counter()
        for i in range(REPS):
            j = i % copies if cycle else 0
            torch.mm(xs[j], ws[j].t(), out=outs[j])
        return time.perf_counter() - start

    run(False), run(True)
    hot: list[float] = []
    cold: list[float] = []
    for _ in range(SAMPLES):
        for cycle, out in ((False, hot), (True, cold)):
            if dist.is_initialized():
                dist.barrier()
            out.append(run(cycle))
    flops = 2.0 * m * n * k * REPS
    return flops / statistics.median(hot), flops / statistics.median(cold), copies


def _rank(rank: int, world: int, port: int, working_set: int, shapes: list[list[int]]) -> None:
    """One rank: pinned to its core (2 ranks) or every core (1 rank); prints its rows."""
    cores = sorted(os.sched_getaffinity(0))
    if world > 1:
        os.sched_setaffinity(0, [cores[rank % len(cores)]])
    torch.set_num_threads(max(1, len(cores) // world))
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    for shape in shapes:
        hot, cold, copies = _rates(shape, working_set)
        print(f"{world} rank(s) rank {rank} {str(tuple(shape)):>18} hot {hot / 1e9:6.1f} GFLOP/s "
              f"cold {cold / 1e9:6.1f} GFLOP/s ({copies:3d} operand sets)  cold/hot time {hot / cold:.3f}", flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if torch is None:
        print("torch_cold_gemm needs torch: pip install 'clustersim[torch]'", file=sys.stderr)
        return 2
    working_set = int(argv[0] if argv else 64) * 2**20
    shapes = gemm_shapes(SMALL_GPT, standard_plans(2), sweep=False)
    print(f"load {os.getloadavg()}; working set {working_set >> 20} MB per rank; {len(shapes)} shapes")
    run: Callable[..., object] = mp.spawn
    run(_rank, args=(2, free_port(), working_set, shapes), nprocs=2)
    _rank(0, 1, 0, working_set, shapes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
