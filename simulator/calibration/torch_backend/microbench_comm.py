"""Microbenchmarks of communication run inside ranks: each collective by kind and size, the TP
call in the situations a TP step puts it in, the sync skew of ranks meeting at a collective, and
the per-call cost of the frameworks (DDP, FSDP2, DTensor TP and TP+SP) on a GPT so small that its
step is all framework overhead.

Owns timing single collectives the way the simulator prices them (one call, bytes per rank buffer
in the nccl-tests convention), on the timing core of ``microbench`` (every sample the slowest
rank's). It does not fit laws (``clustersim.simulator.calibration.fit``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from clustersim.simulator.calibration.torch_backend import micro_passes, stats
from clustersim.simulator.calibration.torch_backend.gpt import GPT
from clustersim.simulator.calibration.torch_backend.microbench import (_dev, _slowest, _sync, probe_sample,
                                                                       probe_summary, time_call)
from clustersim.simulator.calibration.torch_backend.parallelize import apply_fsdp, apply_tp, loss_backward, make_mesh
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, DataParallel, GPTConfig, TimingRecipe


def framework_gpt(world: int) -> GPTConfig:
    """A GPT so small that its step is all framework overhead (hooks, DTensor dispatch, launches);
    heads, sequence and vocabulary divisible by ``world`` so TP and SP shard it."""
    return GPTConfig(num_layers=2, hidden_size=8 * world, num_heads=world, seq_len=4 * world, vocab_size=16 * world)


def collective_call(kind: str, size: int) -> Callable[[], object]:
    """One collective on a ``size``-byte fp32 buffer (nccl-tests convention for the size)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    elems = max(n, size // 4 // n * n)
    full, part = torch.ones(elems, device=_dev()), torch.ones(elems // n, device=_dev())
    match kind:
        case "all_reduce":
            return lambda: dist.all_reduce(full)
        case "all_gather":  # size = gathered output
            return lambda: dist.all_gather_into_tensor(full, part)
        case "reduce_scatter":  # size = full input
            return lambda: dist.reduce_scatter_tensor(part, full)
        case "all_to_all":  # size = per-rank buffer
            out = torch.empty_like(full)
            return lambda: dist.all_to_all_single(out, full)
        case "send_recv":  # ring exchange: every rank sends ``size`` to the next, receives from the previous
            nxt, prv, recv = (rank + 1) % n, (rank - 1) % n, torch.empty_like(full)
            return lambda: [r.wait() for r in dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, full, nxt), dist.P2POp(dist.irecv, recv, prv)])]
    raise ValueError(f"unknown collective {kind!r}; use all_reduce, all_gather, reduce_scatter, all_to_all, send_recv")


TP_CALL_SAMPLES = 45
"""Samples of each situation of the TP-call microbenchmark (``tp_call_entry``), interleaved (~25 ms
a sample of all four on 2 ranks). 15 until the wait after compute was priced
(``fit_comm.blocking_call_wait``): in the six campaigns of three quiet rounds (/work/data/tb_final)
the call after a chunk took either 0.4-1.0 ms or 3.0-4.7 ms (1 to 7 of 15 samples fast), so the
median's 95 % bootstrap interval spanned up to 3.5 ms; 3x the samples narrow it ~1.7x."""

TP_CALL_B2B = 4
"""Back-to-back calls per sample of its ``b2b`` situation."""


def tp_call_entry(size: int, samples: int = TP_CALL_SAMPLES) -> dict[str, Any]:
    """One all-reduce of ``size`` bytes (a TP plan's message: micro-batch tokens x hidden x 4) in
    the situations a TP step puts it in, every rank alike, interleaved sample by sample from a
    barrier (the slowest rank's): ``b2b_s``, per call of back-to-back calls (what the sweep
    times); ``after_s``, a GEMM chunk then the call, less the chunk (a TP forward); ``overlap_s``,
    the call issued asynchronously, the chunk, then its wait, less the chunk (a TP backward: the
    gradient reduced by gloo's threads on the core autograd computes on); ``chunk_s``, the chunk
    alone (2 GEMMs of 1024 x 512 x 256, ~0.54 GFLOP). ``after_s - b2b_s`` prices every TP call's
    wait after compute (``fit_comm.blocking_call_wait``, ``CalibrationProfile.blocking_call_wait``)."""
    n = dist.get_world_size()
    msg = torch.ones(max(n, size // 4 // n * n), device=_dev())
    a, w = torch.randn(1024, 256, device=_dev()), torch.randn(512, 256, device=_dev())

    def chunk() -> None:
        for _ in range(2):
            F.linear(a, w)
        _sync()

    def b2b() -> None:
        for _ in range(TP_CALL_B2B):
            dist.all_reduce(msg)
        _sync()

    def after() -> None:
        chunk()
        dist.all_reduce(msg)
        _sync()

    def overlap() -> None:
        work = dist.all_reduce(msg, async_op=True)
        chunk()
        if work is not None:
            work.wait()
        _sync()

    cases: dict[str, Callable[[], None]] = {"b2b": b2b, "after": after, "overlap": overlap, "chunk": chunk}
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(samples):
        for key, fn in cases.items():
            dist.barrier()
            start = time.perf_counter()
            fn()
            times[key].append(_slowest(time.perf_counter() - start))
    med = {k: stats.median(v) for k, v in times.items()}
    return {"size": float(msg.numel() * 4), "samples": float(samples), "b2b_s": med["b2b"] / TP_CALL_B2B,
            "after_s": max(med["after"] - med["chunk"], 0.0), "overlap_s": max(med["overlap"] - med["chunk"], 0.0),
            "chunk_s": med["chunk"], "times_s": times}


SKEW_ITERATIONS = 60
"""Iterations of the sync-skew microbenchmark (each: a GEMM chunk from a barrier, then a collective)."""

SKEW_CHUNK_GEMMS = 16
"""GEMMs of 256 x 256 x 256 per chunk of the sync-skew microbenchmark: 0.54 GFLOP, ~6 ms on one
core at ~90 GFLOP/s, the compute of one TP half-layer or a few pipeline passes between two syncs."""


def skew_entry(timing: TimingRecipe, iterations: int = SKEW_ITERATIONS,
               chunk_gemms: int = SKEW_CHUNK_GEMMS) -> dict[str, Any]:
    """The wait of a rank at a collective when its neighbour is slower.

    Every rank runs the same GEMM chunk from a common barrier, then a one-element all-reduce, and
    times both (``chunk_s``, ``total_s``: every rank's, per iteration; ``total_s - chunk_s`` is the
    all-reduce plus the wait for the slower rank); ``allreduce_s``: the one-element all-reduce
    alone from a barrier. What the fit reads: E[slowest rank's chunk] / E[a rank's chunk] - 1.
    """
    a, b, tiny = torch.randn(256, 256, device=_dev()), torch.randn(256, 256, device=_dev()), torch.ones(1, device=_dev())

    def chunk() -> None:
        for _ in range(chunk_gemms):
            torch.mm(a, b)
        _sync()

    for _ in range(max(timing.warmup, 1)):
        chunk()
        dist.all_reduce(tiny)
    alone, chunks, totals = [], [], []
    for _ in range(iterations):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tiny)
        alone.append(time.perf_counter() - start)
    for _ in range(iterations):
        dist.barrier()
        start = time.perf_counter()
        chunk()
        chunks.append(time.perf_counter() - start)
        dist.all_reduce(tiny)
        totals.append(time.perf_counter() - start)
    mine = torch.tensor([alone, chunks, totals], dtype=torch.float64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return {"chunk_flops": 2.0 * 256 ** 3 * chunk_gemms, "iterations": float(iterations),
            "allreduce_s": [e[0].tolist() for e in every], "chunk_s": [e[1].tolist() for e in every],
            "total_s": [e[2].tolist() for e in every]}


def collective_suite(task: Mapping[str, Any], timing: TimingRecipe) -> dict[str, object]:
    """Seconds per collective for every (kind, size) of the task, on the whole world, in ``passes``
    passes (the entries: the median over them, ``micro_passes.merge``); the frameworks' per-call
    cost, the sync skew and the TP-call situations once."""
    probes: list[dict[str, float]] = []
    runs = [{"entries": collective_entries(task, timing, probes)} for _ in range(max(1, int(task.get("passes", 1))))]
    return collective_result(task, timing, runs, probes)


def collective_result(task: Mapping[str, Any], timing: TimingRecipe, runs: list[dict[str, Any]],
                      probes: list[dict[str, float]]) -> dict[str, object]:
    """The collectives section from the sweep's passes (``{"entries": collective_entries(...)}``,
    back to back or interleaved with the steps) and their probe samples; the frameworks' per-call
    cost, the sync skew and the TP-call situations are measured here, once."""
    return {"world_size": dist.get_world_size(), "backend": dist.get_backend(),
            **micro_passes.merge(runs, sections=("entries",), singles=()), "passes": runs,
            "framework": framework_entries(timing), "skew": skew_entry(timing), "probe": probe_summary(probes),
            "tp_call": tp_call_entry(int(task.get("tp_message_bytes", 1 << 20)))}


def collective_entries(task: Mapping[str, Any], timing: TimingRecipe,
                       probes: list[dict[str, float]] | None = None) -> list[dict[str, Any]]:
    """One pass of the collective sweep: seconds per call of every (kind, size) of the task; a
    drift probe sample (latency only) appended to ``probes`` after each."""
    entries = []
    for kind in task.get("kinds", []):
        for size in task.get("sizes", []):
            t = time_call(collective_call(str(kind), int(size)), timing)
            if probes is not None:
                probes.append(probe_sample(gemm=False))
            entries.append({"kind": kind, "size": float(size), "world_size": dist.get_world_size(), "time_s": t})
    return entries


def framework_calls(variant: str, layers: int) -> int:
    """Collective calls of one forward+backward of the GPT under ``variant`` (counted on the wire
    by ``runners.census_plan``; ``tests/simulator/test_torch_census.py`` checks them live).

    tp: per block 2 all-reduces forward (wo, w2) + 2 backward (the inputs of q/k/v, reduced once,
    and of w1), the embedding's forward all-reduce, the output layer's input-gradient all-reduce
    and the loss's 3 per-token all-reduces (``loss_parallel``). tp-sp: per block 2 all-gathers +
    2 reduce-scatters forward and the same backward, 2 at each end (embedding: reduce-scatter
    forward, all-gather backward; output: all-gather forward, reduce-scatter backward), the loss's
    3 and the one all-reduce of the SP norms' gradients. fsdp: per block an all-gather forward and
    backward and a reduce-scatter; the root all-gathers once and reduce-scatters once. ddp: one
    all-reduce per gradient bucket, and the framework GPT's gradients fit DDP's first (1 MiB).
    """
    match variant:
        case "ddp":
            return 1
        case "tp":
            return 4 * layers + 5
        case "tp-sp":
            return 8 * layers + 8
        case "fsdp":
            return 3 * layers + 2
    raise ValueError(f"framework variant {variant!r} unknown; use ddp, tp, tp-sp or fsdp")


FRAMEWORKS: tuple[str, ...] = ("ddp", "tp", "tp-sp", "fsdp")
"""The framework variants whose per-call overhead is measured."""


def framework_plan(variant: str, world: int) -> BackendPlan:
    """The plan of a framework variant on ``world`` ranks: one sequence per replica."""
    if variant not in FRAMEWORKS:
        raise ValueError(f"framework variant {variant!r} unknown; use one of {list(FRAMEWORKS)}")
    dp = world if variant in ("ddp", "fsdp") else 1
    data_parallel: DataParallel = "ddp" if variant == "ddp" else "fsdp" if variant == "fsdp" else "none"
    return BackendPlan(name=variant, dp=dp, tp=world // dp, sp=variant == "tp-sp", data_parallel=data_parallel,
                       global_batch=dp)


def _framework_model(variant: str, cfg: GPTConfig, world: int) -> torch.nn.Module:
    model = GPT(cfg).to(_dev())
    if variant == "plain":
        return model
    if variant == "ddp":
        return DistributedDataParallel(model)
    plan = framework_plan(variant, world)
    mesh = make_mesh(plan)
    if variant == "fsdp":
        apply_fsdp(model, mesh["dp"])
    else:
        apply_tp(model, mesh["tp"], plan.sp)
    return model


def framework_entries(timing: TimingRecipe) -> list[dict[str, Any]]:
    """Seconds per collective call as the frameworks issue them: (parallel - plain) / calls."""
    cfg = framework_gpt(dist.get_world_size())
    tokens = torch.zeros(1, cfg.seq_len, dtype=torch.long, device=_dev())
    times = {}
    for variant in ("plain", *FRAMEWORKS):
        model = _framework_model(variant, cfg, dist.get_world_size())

        def call(m: torch.nn.Module = model) -> None:
            m.zero_grad(set_to_none=True)  # each call's gradients fresh, as after an optimizer step
            loss_backward(m(tokens), tokens, m)

        times[variant] = time_call(call, timing)
    return [{"variant": v, "calls": float(framework_calls(v, cfg.num_layers)), "time_s": times[v],
             "plain_s": times["plain"],
             "per_call_s": max(times[v] - times["plain"], 0.0) / framework_calls(v, cfg.num_layers)}
            for v in FRAMEWORKS]
