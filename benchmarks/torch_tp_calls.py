"""What one TP collective costs on this host, in the situations a TP step puts it in (issue 21).

The calibration prices a TP call with the collective sweep's law (back-to-back calls, the rank
doing nothing else) plus the framework microbenchmark's per-call cost (a GPT so small that its
step is all overhead). In the lead's quiet rounds TP and TP+SP were predicted 20-43 % fast in
rounds 2-3 (4-9 ms per call more than priced) and within 9 % in round 1. This probe times a
call of the small GPT's TP message (micro-batch tokens x hidden x 4 bytes) on 2 pinned 1-thread
gloo ranks in five situations, interleaved sample by sample so the host's drift hits all alike:

    b2b        back-to-back synchronous all-reduces (what the sweep measures)
    after      a GEMM chunk, then a synchronous all-reduce (a TP forward: compute, then reduce)
    overlap    an async all-reduce issued, the GEMM chunk, then its wait (a TP backward: the
               gradient reduced while autograd computes on the same core), less the chunk alone
    dtensor    a DTensor TP MLP block (Colwise w1, Rowwise w2) forward + backward, less the same
               local shards without communication, per call (2 calls)
    chunk      the GEMM chunk alone (the reference of "after" and "overlap")

each with the vCPUs left to halt when a rank waits (this VM boots with
``haltpoll.guest_halt_poll_ns=0``: an idle vCPU halts at once and is woken through the
hypervisor) and with a SCHED_IDLE spinner on each core keeping its vCPU awake ("awake": the
spinner yields to any other thread at once). Per call: median ms of the slowest rank, and the
context switches of the rank's threads per call (gloo's loop and worker threads). Nothing is
fitted or written; run it on a quiet machine (~1-2 minutes):

    .venv/bin/python benchmarks/torch_tp_calls.py [SAMPLES]
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:  # the benchmark needs the torch extra
    torch = None  # type: ignore[assignment]

from clustersim.simulator.calibration.torch_backend.launch import free_port
from clustersim.simulator.calibration.torch_backend.measure import SMALL_GPT, standard_plans

CASES: tuple[str, ...] = ("b2b", "after", "overlap", "dtensor", "chunk")
MODES: tuple[str, ...] = ("halting", "awake")
SPIN = "import os, sys\nos.sched_setaffinity(0, [int(sys.argv[1])])\n" \
       "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True:\n    pass\n"


def _switches() -> int:
    """Context switches (voluntary and not) of every thread of this process so far."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[2])
        except (OSError, IndexError, ValueError):
            pass
    return total


def _rank(rank: int, port: int, samples: int, spinners: list[int]) -> None:
    os.sched_setaffinity(0, [sorted(os.sched_getaffinity(0))[rank]])
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    cfg, plan = SMALL_GPT, next(p for p in standard_plans(2) if p.name == "tp2")
    tokens, h, f = plan.micro_batch * cfg.seq_len, cfg.hidden_size, cfg.ffn_hidden_size
    msg = torch.ones(tokens * h)  # the TP all-reduce of one block's output (fp32)
    a, w = torch.randn(tokens, h), torch.randn(f // 2, h)  # one local w1 GEMM of the TP MLP

    def chunk() -> None:
        for _ in range(2):
            torch.nn.functional.linear(a, w)

    mesh = init_device_mesh("cpu", (2,))

    def mlp(width: int) -> torch.nn.Sequential:
        return torch.nn.Sequential(torch.nn.Linear(h, width, bias=False), torch.nn.GELU(),
                                   torch.nn.Linear(width, h, bias=False))

    torch.manual_seed(0)
    tp = mlp(f)
    parallelize_module(tp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    local = mlp(f // 2)
    x = torch.randn(plan.micro_batch, cfg.seq_len, h, requires_grad=True)

    def block(m: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            m.zero_grad(set_to_none=True)
            x.grad = None
            m(x).sum().backward()
        return run

    def overlap() -> None:
        work = dist.all_reduce(msg, async_op=True)
        chunk()
        assert work is not None
        work.wait()

    runs: dict[str, tuple[Callable[[], None], int]] = {
        "b2b": (lambda: [dist.all_reduce(msg) for _ in range(4)], 4),  # type: ignore[func-returns-value]
        "after": (lambda: (chunk(), dist.all_reduce(msg)), 1),  # type: ignore[func-returns-value]
        "overlap": (overlap, 1), "dtensor": (block(tp), 2), "local": (block(local), 2), "chunk": (chunk, 1)}
    for fn, _ in runs.values():
        fn()
    times: dict[tuple[str, str], list[float]] = {}
    switches: dict[tuple[str, str], list[float]] = {}
    for i in range(samples):
        for mode in (MODES if i % 2 == 0 else MODES[::-1]):
            os.kill(spinners[rank], signal.SIGCONT if mode == "awake" else signal.SIGSTOP)
            for case, (fn, calls) in runs.items():
                dist.barrier()
                time.sleep(0.002)  # let the spinner (or the halt) take the idle core
                s0, t0 = _switches(), time.perf_counter()
                fn()
                took, n = time.perf_counter() - t0, _switches() - s0
                both = torch.tensor([took], dtype=torch.float64)
                dist.all_reduce(both, op=dist.ReduceOp.MAX)
                times.setdefault((case, mode), []).append(float(both) / calls)
                switches.setdefault((case, mode), []).append(n / calls)
    os.kill(spinners[rank], signal.SIGSTOP)
    if rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"TP message {msg.numel() * 4 / 2**20:.2f} MiB, chunk {2 * 2 * tokens * h * f // 2 / 1e9:.2f} GFLOP, "
              f"{samples} samples per case and mode; per call, slowest rank, ms (context switches per call)")
        for mode in MODES:
            chunk_s = med[("chunk", mode)]
            per = {"b2b": med[("b2b", mode)], "after": med[("after", mode)] - chunk_s,
                   "overlap": med[("overlap", mode)] - chunk_s,
                   "dtensor": med[("dtensor", mode)] - med[("local", mode)], "chunk": chunk_s}
            cells = [f"{c} {per[c] * 1e3:6.2f} ({statistics.median(switches[(c, mode)]):4.1f})" for c in CASES]
            print(f"  {mode:8s} " + "  ".join(cells))
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if torch is None:
        print("torch_tp_calls needs torch: pip install 'clustersim[torch]'", file=sys.stderr)
        return 2
    samples = int(argv[0]) if argv else 15
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print("torch_tp_calls needs 2 cores for its 2 pinned ranks", file=sys.stderr)
        return 2
    spin = [subprocess.Popen([sys.executable, "-c", SPIN, str(c)]) for c in cores[:2]]
    try:
        for p in spin:
            os.kill(p.pid, signal.SIGSTOP)
        print(f"load {os.getloadavg()}")
        mp.spawn(_rank, args=(free_port(), samples, [p.pid for p in spin]), nprocs=2)
        print(f"load {os.getloadavg()}")
    finally:
        for p in spin:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
