"""Microbenchmarks run inside ranks: GEMM, attention, memory, overhead, optimizer, collectives.

Owns timing single kernels and single collectives by shape and size, the way the simulator
prices them (one call, FLOP per call, bytes per rank buffer in the nccl-tests convention). Every
rank runs the compute suite at the same time, so cores shared by ranks show up as they do in
training; the slowest rank sets each figure. It does not fit curves (``clustersim.simulator.calibration.fit``).
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from clustersim.simulator.calibration.torch_backend import micro_passes, stats
from clustersim.simulator.calibration.torch_backend.gpt import GPT, lm_loss
from clustersim.simulator.calibration.torch_backend.parallelize import apply_fsdp, apply_tp, loss_backward, make_mesh
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, DataParallel, GPTConfig, TimingRecipe


def framework_gpt(world: int) -> GPTConfig:
    """A GPT so small that its step is all framework overhead (hooks, DTensor dispatch, launches);
    heads, sequence and vocabulary divisible by ``world`` so TP and SP shard it."""
    return GPTConfig(num_layers=2, hidden_size=8 * world, num_heads=world, seq_len=4 * world, vocab_size=16 * world)


MIN_SAMPLE_S = 5e-3
"""Each timed sample repeats a call until it lasts at least this long (longer than the timer's
resolution and than one scheduler time slice, so a preemption is averaged, not all or nothing)."""

CALL_BUDGET_SHARE = 1.0 / 30.0
"""Share of ``TimingRecipe.budget_s`` (a plan's timing budget) one microbenchmark may take."""


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _dev() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _slowest(seconds: float) -> float:
    """``seconds`` replaced by its maximum over the ranks."""
    t = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def sample_call(fn: Callable[[], object], timing: TimingRecipe) -> list[float]:
    """Seconds per call of each timed sample (the slowest rank's), after warm-up.

    Samples repeat until the median's 95 % interval is within ``timing.ci_width`` (at least
    ``repeats``, at most ``repeats_max`` or the call's share of ``budget_s``); every rank sees
    the same all-reduced samples, so all stop together and repeat a collective equally often.
    """
    for _ in range(max(timing.warmup, 1)):
        fn()
    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    once = _slowest(max(time.perf_counter() - start, 1e-7))
    inner = max(1, min(1000, int(MIN_SAMPLE_S / once)))
    samples: list[float] = []
    budget = timing.budget_s * CALL_BUDGET_SHARE
    while True:
        dist.barrier()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync()
        samples.append(_slowest((time.perf_counter() - start) / inner))
        spent = sum(samples) * inner
        if (spent >= budget and len(samples) >= timing.repeats) or stats.enough_repeats(
                samples, minimum=timing.repeats, maximum=timing.repeats_max, width=timing.ci_width):
            return samples


def time_call(fn: Callable[[], object], timing: TimingRecipe) -> float:
    """Seconds per call: the median sample (the statistic the step times are compared by)."""
    return stats.median(sample_call(fn, timing))


class OperandPool:
    """Operand sets for the cold microbenchmarks: carved one after the other out of one fp32
    buffer of ``nbytes`` (``measure.micro_working_set``: what a rank touches in one step), so
    calls that take the sets in turn walk through the whole buffer, as a step walks through its
    weights and activations; one fresh set when one set is larger than the buffer."""

    def __init__(self, nbytes: int) -> None:
        self.buffer = torch.randn(max(1, nbytes // 4), device=_dev())

    def sets(self, shapes: Sequence[Sequence[int]]) -> list[list[torch.Tensor]]:
        """As many disjoint sets of tensors of ``shapes`` as the buffer holds (views into it)."""
        sizes = [math.prod(s) for s in shapes]
        count = self.buffer.numel() // sum(sizes)
        if count == 0:
            return [[torch.randn(*s, device=_dev()) for s in shapes]]
        out, offset = [], 0
        for _ in range(count):
            views = []
            for shape, n in zip(shapes, sizes):
                views.append(self.buffer[offset:offset + n].view(*shape))
                offset += n
            out.append(views)
        return out


def operand_sets(shapes: Sequence[Sequence[int]], pool: OperandPool | None) -> Iterator[list[torch.Tensor]]:
    """The operand sets a microbenchmark takes in turn: one fresh set over and over (``pool``
    None: hot, in cache after the first call) or every set of ``pool`` in a cycle (cold)."""
    sets = pool.sets(shapes) if pool is not None else [[torch.randn(*s, device=_dev()) for s in shapes]]
    return itertools.cycle(sets)


def _operand_variants(pool: OperandPool | None, operands: str) -> list[tuple[str, OperandPool | None]]:
    """(label, pool) of each operand variant ``operands`` asks for, hot first (``measure.MICRO_OPERANDS``)."""
    return [(k, None if k == "hot" else pool) for k in ("hot", "cold") if operands in (k, "both")]


def gemm_entries(shapes: list[list[int]], timing: TimingRecipe,
                 probes: list[dict[str, float]] | None = None, pool: OperandPool | None = None,
                 operands: str = "hot") -> dict[str, list[dict[str, Any]]]:
    """Forward (x W^T) and both backward layouts (dY W, dY^T x) of each (m, n, k) linear, hot
    and/or cold (``operands``; each shape's cold calls right after its hot ones); a drift probe
    sample (GEMM only) appended to ``probes`` after each shape. {"hot": entries, "cold": entries}."""
    out: dict[str, list[dict[str, Any]]] = {k: [] for k, _ in _operand_variants(pool, operands)}
    for m, n, k in shapes:
        if probes is not None:
            probes.append(probe_sample(calls=False))
        for label, p in _operand_variants(pool, operands):
            sets = operand_sets([(m, k), (n, k), (m, n)], p)

            def fwd(s: Iterator[list[torch.Tensor]] = sets) -> object:
                x, w, _ = next(s)
                return F.linear(x, w)

            def bwd_input(s: Iterator[list[torch.Tensor]] = sets) -> object:
                _, w, dy = next(s)
                return dy @ w

            def bwd_weight(s: Iterator[list[torch.Tensor]] = sets) -> object:
                x, _, dy = next(s)
                return dy.t() @ x

            for layout, fn in (("fwd", fwd), ("bwd_input", bwd_input), ("bwd_weight", bwd_weight)):
                t = time_call(fn, timing)
                out[label].append({"m": m, "n": n, "k": k, "layout": layout, "flops": 2.0 * m * n * k, "time_s": t})
    return out


def attention_entries(shapes: list[list[int]], timing: TimingRecipe, pool: OperandPool | None = None,
                      operands: str = "hot") -> dict[str, list[dict[str, Any]]]:
    """Causal SDPA forward and backward for each (batch, heads, seq, head_dim), hot and/or cold."""
    out: dict[str, list[dict[str, Any]]] = {k: [] for k, _ in _operand_variants(pool, operands)}
    for b, h, s, d in shapes:
        for label, p in _operand_variants(pool, operands):
            base = p.sets([(b, h, s, d)] * 4) if p is not None else [[torch.randn(b, h, s, d, device=_dev())
                                                                      for _ in range(4)]]
            sets = [[t.detach().requires_grad_(i < 3) for i, t in enumerate(ts)] for ts in base]
            cycle_f, cycle_b = itertools.cycle(sets), itertools.cycle(sets)

            def fwd(c: Iterator[list[torch.Tensor]] = cycle_f) -> object:
                q, k, v, _ = next(c)
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd(c: Iterator[list[torch.Tensor]] = cycle_b) -> None:
                q, k, v, grad = next(c)
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

            t_fwd = time_call(fwd, timing)
            both = time_call(fwd_bwd, timing)
            # FLOP of QK^T and PV without the causal saving: 4 b h s^2 d (forward), twice that backward.
            full = 4.0 * b * h * s * s * d
            out[label].append({"batch": b, "heads": h, "seq": s, "head_dim": d, "flops_fwd_full": full,
                               "fwd_s": t_fwd, "bwd_s": max(both - t_fwd, 1e-9)})
    return out


def memory_entries(sizes: list[int], timing: TimingRecipe, pool: OperandPool | None = None,
                   operands: str = "hot") -> dict[str, list[dict[str, Any]]]:
    """Bytes/s of copy, add, GELU and LayerNorm on fp32 tensors of ``sizes`` elements, hot and/or cold."""
    out: dict[str, list[dict[str, Any]]] = {k: [] for k, _ in _operand_variants(pool, operands)}
    for n in sizes:
        for label, p in _operand_variants(pool, operands):
            sets = operand_sets([(n,)] * 3, p)
            width = 256 if n % 256 == 0 else n

            def copy(s: Iterator[list[torch.Tensor]] = sets) -> object:
                a, _, c = next(s)
                return c.copy_(a)  # read a, write c

            def add(s: Iterator[list[torch.Tensor]] = sets) -> object:
                a, b, c = next(s)
                return torch.add(a, b, out=c)  # read a, b, write c

            def gelu(s: Iterator[list[torch.Tensor]] = sets) -> object:
                return F.gelu(next(s)[0])

            def layernorm(s: Iterator[list[torch.Tensor]] = sets) -> object:
                return F.layer_norm(next(s)[0].view(-1, width), (width,))

            kinds: dict[str, tuple[Callable[[], object], float]] = {
                "copy": (copy, 8.0 * n), "add": (add, 12.0 * n), "gelu": (gelu, 8.0 * n),
                "layernorm": (layernorm, 8.0 * n)}
            for kind, (fn, nbytes) in kinds.items():
                t = time_call(fn, timing)
                out[label].append({"kind": kind, "elements": n, "bytes": nbytes, "time_s": t,
                                   "bandwidth": nbytes / t})
    return out


def overhead_entry(timing: TimingRecipe, chain: int = 16) -> dict[str, float]:
    """Eager per-op cost: a tiny op, and tiny linear chains of 1 and ``chain`` layers, fwd+bwd.

    The chains' slope is the cost of one linear (1 forward + 2 backward GEMMs, all launch-bound);
    their intercept is the fixed cost of one ``backward()`` call (autograd engine start).
    """
    a = torch.ones(1, device=_dev())
    x = torch.ones(1, 1, device=_dev(), requires_grad=True)
    ws = [torch.ones(1, 1, device=_dev(), requires_grad=True) for _ in range(chain)]

    def run(n: int) -> None:
        y = x
        for w in ws[:n]:
            y = F.linear(y, w)
        y.sum().backward()

    tiny = time_call(lambda: torch.add(a, a), timing)
    one, many = time_call(lambda: run(1), timing), time_call(lambda: run(chain), timing)
    per_linear = max(many - one, 0.0) / (chain - 1)
    return {"tiny_op_s": tiny, "per_linear_fwd_bwd_s": per_linear,
            "backward_call_s": max(one - per_linear, 0.0), "chain": float(chain)}


def optimizer_entry(params: int, timing: TimingRecipe) -> dict[str, float]:
    """One Adam step over ``params`` fp32 parameters (foreach implementation)."""
    p = [torch.nn.Parameter(torch.randn(params // 4, device=_dev())) for _ in range(4)]
    for t in p:
        t.grad = torch.randn_like(t)
    opt = torch.optim.Adam(p, lr=1e-4)
    return {"params": float(params), "time_s": time_call(opt.step, timing)}


HOST_LAYERS: tuple[int, int] = (1, 3)
"""Layers of the two eager-host GPTs (``host_entry``): the per-layer cost is the slope between them."""


def host_gpt(layers: int) -> GPTConfig:
    """The backend's GPT module tree (``gpt.GPT``: norms, q/k/v/o, MLP, residuals, embedding, head)
    at a size whose arithmetic is negligible (width 8, 4 tokens, 16 words): its training step is
    all host work (Python module calls, the dispatcher, autograd nodes, views, the optimizer's
    loop over parameter tensors)."""
    return GPTConfig(num_layers=layers, hidden_size=8, num_heads=2, seq_len=4, vocab_size=16)


def host_entry(timing: TimingRecipe) -> dict[str, float]:
    """The eager host cost of the GPT's training step, at ``HOST_LAYERS`` layers (low, high): one
    forward with its loss (``fwd_*_s``), a whole step (zero_grad, forward, loss, backward, Adam
    step: ``step_*_s``) and the Adam step alone (``opt_*_s``), seconds per call (issue 21: the real
    single-rank step spent 1.4 ms in autograd nodes and 3.3 ms between ops that no op price
    covers, and its Adam loop ran per parameter tensor; ``fit.host_fit`` reads the per-layer slopes)."""
    out: dict[str, float] = {}
    for label, layers in zip(("low", "high"), HOST_LAYERS):
        cfg = host_gpt(layers)
        model = GPT(cfg).to(_dev())
        tokens = torch.zeros(1, cfg.seq_len, dtype=torch.long, device=_dev())
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def fwd(m: torch.nn.Module = model, t: torch.Tensor = tokens) -> object:
            return lm_loss(m(t), t)

        def step(m: torch.nn.Module = model, t: torch.Tensor = tokens, o: torch.optim.Optimizer = opt) -> None:
            o.zero_grad(set_to_none=True)
            lm_loss(m(t), t).backward()
            o.step()

        out[f"step_{label}_s"] = time_call(step, timing)  # leaves gradients for the optimizer alone
        out[f"fwd_{label}_s"] = time_call(fwd, timing)
        out[f"opt_{label}_s"] = time_call(opt.step, timing)
        out[f"layers_{label}"] = float(layers)
    return out


def compute_pass(task: Mapping[str, Any], timing: TimingRecipe,
                 probes: list[dict[str, float]] | None = None) -> dict[str, Any]:
    """One pass of every compute microbenchmark the task names (all ranks run it concurrently):
    the GEMM, attention and memory entries on hot operands under "gemm", "attention", "memory",
    on cold ones (cycled through ``working_set_bytes``) under "gemm_cold", ... (``micro_operands``:
    hot, cold or both, ``measure.MICRO_OPERANDS``; tasks written before the option: hot)."""
    operands = str(task.get("micro_operands", "hot"))
    pool = OperandPool(int(task.get("working_set_bytes", 0))) if operands != "hot" else None
    sections = {
        "gemm": gemm_entries(task.get("gemm_shapes", []), timing, probes, pool, operands),
        "attention": attention_entries(task.get("attention_shapes", []), timing, pool, operands),
        "memory": memory_entries(task.get("memory_sizes", []), timing, pool, operands),
    }
    del pool  # the buffer freed before the overhead and optimizer microbenchmarks
    return {
        **{name + ("" if label == "hot" else "_cold"): entries
           for name, by in sections.items() for label, entries in by.items()},
        "overhead": overhead_entry(timing),
        "optimizer": optimizer_entry(int(task.get("optimizer_params", 1 << 20)), timing),
        "host": host_entry(timing),
    }


def compute_suite(task: Mapping[str, Any], timing: TimingRecipe) -> dict[str, object]:
    """The task's compute microbenchmarks in ``passes`` passes, one after the other: the entries
    are the median over the passes (``micro_passes.merge``) and ``passes`` keeps each pass's own."""
    probes: list[dict[str, float]] = []
    runs = [compute_pass(task, timing, probes) for _ in range(max(1, int(task.get("passes", 1))))]
    return compute_result(runs, probes, task)


def compute_result(runs: list[dict[str, Any]], probes: list[dict[str, float]],
                   task: Mapping[str, Any] | None = None) -> dict[str, object]:
    """The compute section from its passes (``compute_pass``, run back to back by ``compute_suite``
    or interleaved with the steps' passes by ``runners.time_interleaved``) and their probe samples;
    the operands they ran on and the cold working set, from ``task``."""
    sections = [s for s in (*micro_passes.SECTIONS, *micro_passes.COLD_SECTIONS) if runs and s in runs[0]]
    task = task or {}
    return {"world_size": dist.get_world_size(), "threads_per_rank": torch.get_num_threads(),
            "device": _dev().type, "micro_operands": str(task.get("micro_operands", "hot")),
            "working_set_bytes": int(task.get("working_set_bytes", 0)),
            **micro_passes.merge(runs, sections=sections), "passes": runs, "probe": probe_summary(probes)}


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


PROBE_GEMMS = 8
"""GEMMs of 256 x 256 x 256 in the drift probe's compute chunk (0.27 GFLOP, ~3 ms on one core)."""

PROBE_CALLS = 5
"""Back-to-back one-element all-reduces per sample of the drift probe's latency figure."""


def probe_sample(*, gemm: bool = True, calls: bool = True) -> dict[str, float]:
    """One sample of the host's drift probe, each figure timed from a barrier, the slowest rank's:
    ``gemm_s``, a fixed GEMM chunk; ``allreduce_s``, the mean of ``PROBE_CALLS`` back-to-back
    one-element all-reduces (0 on one rank, or when not asked for). A few ms to tens of ms.

    Samples are taken between the microbenchmarks (GEMM after each GEMM shape, latency after each
    collective of the sweep: the reference the profile was fitted under, ``probe_summary``) and
    after every timed step of every plan (``runners.time_steps``), so a drift of the host during
    a campaign shows in both; ``check.drift`` moves the profile by their ratio."""
    out = {"gemm_s": 0.0, "allreduce_s": 0.0}
    if gemm:
        a, b = torch.randn(256, 256, device=_dev()), torch.randn(256, 256, device=_dev())
        torch.mm(a, b)  # untimed: the first GEMM of a process pays the BLAS library's start
        _sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(PROBE_GEMMS):
            torch.mm(a, b)
        _sync()
        out["gemm_s"] = _slowest(time.perf_counter() - start)
    if calls and dist.get_world_size() > 1:
        tiny = torch.ones(1, device=_dev())
        dist.all_reduce(tiny)  # untimed, as the GEMM
        dist.barrier()
        start = time.perf_counter()
        for _ in range(PROBE_CALLS):
            dist.all_reduce(tiny)
        _sync()
        out["allreduce_s"] = _slowest((time.perf_counter() - start) / PROBE_CALLS)
    return out


def probe_summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Each probe figure's median over the samples that measured it (0 where none did), and the samples."""
    def med(key: str) -> float:
        xs = [s[key] for s in samples if s.get(key, 0.0) > 0]
        return stats.median(xs) if xs else 0.0
    return {"gemm_s": med("gemm_s"), "allreduce_s": med("allreduce_s"), "samples": samples}


TP_CALL_SAMPLES = 45
"""Samples of each situation of the TP-call microbenchmark (``tp_call_entry``), interleaved (~25 ms
a sample of all four on 2 ranks). 15 until the wait after compute was priced
(``fit.blocking_call_wait``): in the six campaigns of three quiet rounds (/work/data/tb_final)
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
    wait after compute (``fit.blocking_call_wait``, ``CalibrationProfile.blocking_call_wait``)."""
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
