"""Microbenchmarks run inside ranks: the timing core, the drift probe and the compute suite
(GEMM, attention, memory, overhead, optimizer, eager host); the collectives, the TP call, the
sync skew and the frameworks' per-call costs are ``microbench_comm``.

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

from clustersim.simulator.calibration.torch_backend import micro_passes, stats
from clustersim.simulator.calibration.torch_backend.gpt import GPT, lm_loss
from clustersim.simulator.calibration.torch_backend.specs import GPTConfig, TimingRecipe


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
    covers, and its Adam loop ran per parameter tensor; ``fit_compute.host_fit`` reads the per-layer slopes)."""
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
