"""The measurement campaign: which plans and microbenchmarks to run, and the folder it writes.

Owns the standard plans (DP with DDP, FSDP2, TP, TP+SP, PP GPipe, PP 1F1B, a 1-rank baseline and
an FSDP x TP mix), the microbenchmark shapes derived from the model (the GEMMs, attention and
tensor sizes the plans run, plus a generic sweep), and writing the results folder:

    meta.json            model, timing recipe, host, plans
    micro_w{N}.json      compute and collective microbenchmarks run on N concurrent ranks (the
                         compute and collective entries: the median of their passes, one per
                         interleaved step pass or MICRO_PASSES before the steps (MICRO_PLACEMENTS),
                         each kept under compute.passes and collectives.passes)
    steps.json           one StepRecord per plan (median over its interleaved passes' medians, spread,
                         every timed step and the pass it ran in)

It runs ranks through ``launch`` and never imports torch itself. It does not fit (``clustersim.simulator.calibration.fit``).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from clustersim.files import write_atomic
from clustersim.simulator.calibration.torch_backend.launch import launch
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig, StepRecord, TimingRecipe, record_from_dict

SMALL_GPT = GPTConfig(num_layers=4, hidden_size=256, num_heads=8, seq_len=128, vocab_size=1024)
"""The default model of ``calibrate measure``: ~3.4M parameters, each plan times in seconds."""

TINY_GPT = GPTConfig(num_layers=2, hidden_size=128, num_heads=4, seq_len=64, vocab_size=512)
"""The CI model: a step in tens of milliseconds on one core."""

HOLDOUT_GPT = GPTConfig(num_layers=3, hidden_size=320, num_heads=10, seq_len=96, vocab_size=1024)
"""The out-of-sample model: other layers (3: an uneven 2 + 1 pipeline split), width and sequence
than ``SMALL_GPT``, predicted with the profile fitted on ``SMALL_GPT``'s microbenchmarks."""

MICRO_PASSES = 3
"""Passes of the compute microbenchmarks and of the collective sweep per launch, one after the
other: the profile is fitted on each entry's median over the passes (a disturbance of the host that
lasts a few seconds slows one pass) and the passes' spread is the profile's own confidence
(``FitReport.passes``, ``FitReport.intervals``). Three: the
median survives one disturbed pass, and the range of three covers the median of the passes'
distribution with probability 1 - 2 / 2^3 = 75 %."""

MICRO_PLACEMENTS: tuple[str, ...] = ("interleaved", "first")
"""Where a launch times its microbenchmarks. ``interleaved`` (the default): one pass of the compute
suite and of the collective sweep as one more block of every interleaved pass over the plans
(``runners.time_interleaved``), in the same launch, threads and time windows as the steps; as
many microbenchmark passes as step passes. ``first``: ``micro_passes`` passes back to back before
any plan is built (the protocol before; issue 21's quiet rounds with it predicted every plan fast,
the 2-rank plans by 10-30 %, the single rank by 8-19 % without drift correction: the
microbenchmarks saw a faster host than the steps)."""

MICRO_OPERANDS: tuple[str, ...] = ("both", "hot", "cold")
"""Which operands the GEMM, attention and memory microbenchmarks run on (``--micro-operands``).
``hot``: one operand set, repeated call after call (it stays in the core's caches; the protocol
before). ``cold``: the calls cycle through operand sets carved one after the other out of a
buffer of ``micro_working_set`` bytes, the data a rank's kernels touch in one step of the
launch's largest plan, so each call finds its operands as a training step does (issue 21: every
plan, the single rank included, predicted 21-27 % fast; ``benchmarks/torch_cold_gemm.py``
measured cold/hot GEMM time 1.0-1.47). ``both`` (the default): each shape hot then cold in the
same pass, so ``calibrate check --micro-operands hot|cold`` predicts the same steps with either
(an A/B under the same load). Recorded in meta.json and in the compute section."""

def layer_activations(cfg: GPTConfig, plan: BackendPlan) -> int:
    """Elements one block of ``cfg`` keeps per micro-batch on a rank of ``plan``: per token the
    two norms' outputs, the attention output projected back and the MLP output (h each, whole on
    every TP rank), the q, k, v and attention outputs (4 h / tp) and the MLP's inner activation
    before and after the GELU (2 f / tp)."""
    h, f, tp = cfg.hidden_size, cfg.ffn_hidden_size, plan.tp
    return plan.micro_batch * cfg.seq_len * (4 * h + (4 * h + 2 * f) // tp)


def working_set_bytes(cfg: GPTConfig, plan: BackendPlan) -> int:
    """Bytes (fp32) a rank of ``plan`` touches in one step's forward and backward: the weights
    and gradients of its largest pipeline stage's blocks (4 h^2 + 2 h f each, over tp) and of the
    embedding and output layer (v h each, over tp; both on a 1-stage plan, one on each end stage
    else), and the activations of the micro-batches in flight at once (all of them under GPipe,
    up to ``pp`` under 1F1B, one without pipelining) plus the logits (v / tp per token). FSDP's
    weights count whole: its blocks compute on gathered weights. A closed form of the model, not
    a measurement; ``micro_working_set`` takes the launch's largest."""
    h, v, tp, pp = cfg.hidden_size, cfg.vocab_size, plan.tp, plan.pp
    layers = -(-cfg.num_layers // pp)  # the largest stage
    params = layers * (4 * h * h + 2 * h * cfg.ffn_hidden_size) // tp + (2 if pp == 1 else 1) * v * h // tp
    in_flight = 1 if pp == 1 else plan.micro_batches if plan.schedule == "gpipe" else min(pp, plan.micro_batches)
    acts = in_flight * (layers * layer_activations(cfg, plan) + plan.micro_batch * cfg.seq_len * v // tp)
    return 4 * (2 * params + acts)


def micro_working_set(cfg: GPTConfig, plans: Sequence[BackendPlan]) -> int:
    """The working set the cold microbenchmarks of one launch cycle through: the largest of its
    plans' (``working_set_bytes``; one pass of the microbenchmarks serves every plan of the
    launch, and the largest bounds what the steps evict), 0 without plans."""
    return max((working_set_bytes(cfg, p) for p in plans), default=0)


COLLECTIVE_KINDS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
COLLECTIVE_SIZES: tuple[int, ...] = tuple(4 ** i * 1024 for i in range(0, 7))
"""1 KiB to 4 MiB, a factor 4 apart (bytes per rank buffer, nccl-tests convention)."""


def standard_plans(world_size: int, global_batch: int = 8, micro_batches: int = 4) -> list[BackendPlan]:
    """The plans measured on ``world_size`` ranks (1: baseline; 2: six plans; 4: the FSDP x TP mix)."""
    g, m = global_batch, micro_batches
    match world_size:
        case 1:
            return [BackendPlan(name="single", data_parallel="none", global_batch=g)]
        case 2:
            return [
                BackendPlan(name="dp2-ddp", dp=2, global_batch=g),
                BackendPlan(name="dp2-fsdp", dp=2, data_parallel="fsdp", global_batch=g),
                BackendPlan(name="tp2", tp=2, data_parallel="none", global_batch=g),
                BackendPlan(name="tp2-sp", tp=2, sp=True, data_parallel="none", global_batch=g),
                BackendPlan(name="pp2-gpipe", pp=2, data_parallel="none", global_batch=g, micro_batches=m),
                BackendPlan(name="pp2-1f1b", pp=2, schedule="1f1b", data_parallel="none", global_batch=g,
                            micro_batches=m),
            ]
        case 4:
            return [BackendPlan(name="dp2-fsdp-tp2-sp", dp=2, tp=2, sp=True, data_parallel="fsdp", global_batch=g)]
    raise ValueError(f"world_size {world_size}: standard plans exist for 1, 2 and 4 ranks")


def gemm_shapes(cfg: GPTConfig, plans: Sequence[BackendPlan], sweep: bool = True) -> list[list[int]]:
    """(m, n, k) of every linear the plans run, plus (``sweep``) m from 64 to 2048 rows by n x n
    squares from 64 to 1024 (wide enough for other models than the one measured)."""
    h, f, v = cfg.hidden_size, cfg.ffn_hidden_size, cfg.vocab_size
    shapes = {(m, n, n) for m in (64, 256, 1024, 2048) for n in (64, 128, 256, 512, 1024)} if sweep else set()
    for p in plans:
        t = p.micro_batch * cfg.seq_len
        shapes |= {(t, h // p.tp, h), (t, h, h // p.tp), (t, f // p.tp, h), (t, h, f // p.tp), (t, v // p.tp, h)}
    return [list(s) for s in sorted(shapes)]


def attention_shapes(cfg: GPTConfig, plans: Sequence[BackendPlan], sweep: bool = True) -> list[list[int]]:
    """(batch, heads, seq, head_dim) of the attention each plan runs, plus (``sweep``) batches 1-16."""
    d = cfg.hidden_size // cfg.num_heads
    shapes = {(b, cfg.num_heads, cfg.seq_len, d) for b in (1, 4, 16)} if sweep else set()
    shapes |= {(p.micro_batch, cfg.num_heads // p.tp, cfg.seq_len, d) for p in plans}
    return [list(s) for s in sorted(shapes)]


def memory_sizes(cfg: GPTConfig, plans: Sequence[BackendPlan], sweep: bool = True) -> list[int]:
    """Element counts of the activations the plans touch, plus (``sweep``) 2^16 to 2^22."""
    sizes = {1 << e for e in range(16, 23, 2)} if sweep else set()
    for p in plans:
        t = p.micro_batch * cfg.seq_len
        sizes |= {t * cfg.hidden_size, t * cfg.ffn_hidden_size // p.tp}
    return sorted(sizes)


def tp_message_bytes(cfg: GPTConfig, plans: Sequence[BackendPlan]) -> int:
    """Bytes of the largest TP all-reduce the plans issue (micro-batch tokens x hidden, fp32);
    1 MiB when no plan runs TP (``microbench_comm.tp_call_entry`` times it)."""
    sizes = [p.micro_batch * cfg.seq_len * cfg.hidden_size * 4 for p in plans if p.tp > 1]
    return max(sizes) if sizes else 1 << 20


def check_passes(micro_passes: int, micro_placement: str = "first", micro_operands: str = "both") -> None:
    """A clear error for a pass count below 1, an unknown placement or unknown operands (before
    anything is written)."""
    if micro_passes < 1:
        raise CalibrationError(f"microbenchmark passes = {micro_passes}: run at least 1 pass of the "
                               "microbenchmarks (--micro-passes 1 or more)")
    if micro_placement not in MICRO_PLACEMENTS:
        raise CalibrationError(f"microbenchmark placement = {micro_placement!r} is unknown; use one of "
                               f"{', '.join(MICRO_PLACEMENTS)} (--micro-placement)")
    if micro_operands not in MICRO_OPERANDS:
        raise CalibrationError(f"microbenchmark operands = {micro_operands!r} are unknown; use one of "
                               f"{', '.join(MICRO_OPERANDS)} (--micro-operands)")


def tasks_for(cfg: GPTConfig, plans: Sequence[BackendPlan], timing: TimingRecipe, world_size: int,
              collective_sizes: Sequence[int] = COLLECTIVE_SIZES, sweep: bool = True,
              micro_passes: int = MICRO_PASSES, micro_placement: str = "interleaved",
              micro_operands: str = "both") -> list[dict[str, object]]:
    """One launch's tasks. ``micro_placement="first"``: compute microbenchmarks and (world > 1)
    collectives, ``micro_passes`` passes of each, then every plan: one "steps" task timing them in
    interleaved passes (``timing.step_passes`` > 1 and several plans), else one "step" task per
    plan, one after the other. ``"interleaved"``: one "steps" task whose every pass also runs one
    pass of the microbenchmarks (``MICRO_PLACEMENTS``; ``micro_passes`` is then not used).

    ``sweep=False`` benchmarks only the shapes the plans run (fast, for CI). ``micro_operands``:
    hot, cold (cycled through ``micro_working_set`` bytes) or both (``MICRO_OPERANDS``).
    """
    check_passes(micro_passes, micro_placement, micro_operands)
    params = 12 * cfg.hidden_size ** 2 * cfg.num_layers  # 4h^2 attention + 8h^2 MLP per layer
    micro: list[dict[str, object]] = [{
        "kind": "compute", "timing": asdict(timing), "gemm_shapes": gemm_shapes(cfg, plans, sweep),
        "attention_shapes": attention_shapes(cfg, plans, sweep), "memory_sizes": memory_sizes(cfg, plans, sweep),
        "optimizer_params": params, "passes": micro_passes, "micro_operands": micro_operands,
        "working_set_bytes": micro_working_set(cfg, plans),
    }]
    if world_size > 1:
        micro.append({"kind": "collectives", "timing": asdict(timing), "kinds": list(COLLECTIVE_KINDS),
                      "sizes": list(collective_sizes), "passes": micro_passes,
                      "tp_message_bytes": tp_message_bytes(cfg, plans)})
    steps: dict[str, object] = {"kind": "steps", "timing": asdict(timing), "plans": [asdict(p) for p in plans],
                                "model": asdict(cfg)}
    if micro_placement == "interleaved":  # the microbenchmarks one more block of every pass
        return [{**steps, "micro": {str(t["kind"]): t for t in micro}}]
    tasks = micro
    if timing.step_passes > 1 and len(plans) > 1:  # interleaved passes over the plans (``runners.time_interleaved``)
        tasks.append(steps)
        return tasks
    tasks += [{"kind": "step", "timing": asdict(timing), "plan": asdict(p), "model": asdict(cfg)} for p in plans]
    return tasks


def host_cores() -> int:
    """Cores this process may run on (its affinity set where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def host_info() -> dict[str, object]:
    """What a reader needs to judge the numbers: cores, platform, Python, load when measuring."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else []
    return {"cores": host_cores(), "memory_bytes": memory, "platform": platform.platform(),
            "python": platform.python_version(), "load_average": load}


def measure(out_dir: str | os.PathLike[str], cfg: GPTConfig, plans: Sequence[BackendPlan],
            timing: TimingRecipe, *, timeout: float = 600.0,
            collective_sizes: Sequence[int] = COLLECTIVE_SIZES, sweep: bool = True,
            micro_passes: int = MICRO_PASSES, micro_placement: str = "interleaved",
            micro_operands: str = "both") -> list[StepRecord]:
    """Run every plan (grouped by world size, one launch each) and write the results folder."""
    check_passes(micro_passes, micro_placement, micro_operands)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    host = host_info()
    worlds = sorted({p.world_size for p in plans})
    timings = {w: timing.for_world(w, host_cores()) for w in worlds}
    meta = {"model": asdict(cfg), "timing": asdict(timing), "host": host, "plans": [asdict(p) for p in plans],
            "micro_passes": micro_passes, "micro_placement": micro_placement,
            "micro_operands": micro_operands,
            "working_set_bytes": {str(w): micro_working_set(cfg, [p for p in plans if p.world_size == w])
                                  for w in worlds},
            "timing_per_world": {str(w): asdict(t) for w, t in timings.items()}}
    write_atomic(out / "meta.json", json.dumps(meta, indent=1))
    records: list[StepRecord] = []
    for world in worlds:
        group = [p for p in plans if p.world_size == world]
        t = timings[world]
        results = launch(tasks_for(cfg, group, t, world, collective_sizes, sweep, micro_passes, micro_placement,
                                   micro_operands),
                         world, timeout=timeout, threads=t.threads_per_rank, log_dir=out / "logs" / f"w{world}")
        micro = micro_sections(results)
        write_atomic(out / f"micro_w{world}.json", json.dumps(micro, indent=1))
        records += [record_from_dict(r) for r in _step_results(results)]
        # written after every launch: a failure at a larger world keeps what was measured
        write_atomic(out / "steps.json", json.dumps([r.to_dict() for r in records], indent=1))
    return records


def micro_sections(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The "compute" and "collectives" sections of one launch's results: their own tasks' (placement
    "first") or the interleaved "steps" task's (placement "interleaved")."""
    out: dict[str, Any] = {}
    for r in results:
        if r["kind"] in ("compute", "collectives"):
            out[r["kind"]] = r
        for kind in ("compute", "collectives"):
            if r["kind"] == "steps" and kind in r:
                out[kind] = {"kind": kind, **r[kind]}
    return out


def _step_results(results: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The step records of one launch's results: one per "step" task, every one of a "steps" task."""
    out: list[Mapping[str, Any]] = []
    for r in results:
        if r["kind"] == "step":
            out.append(r)
        elif r["kind"] == "steps":
            out += r["records"]
    return out


def census(cfg: GPTConfig, plans: Sequence[BackendPlan], *, timeout: float = 300.0) -> list[dict[str, object]]:
    """What one real step of each plan puts on the wire, per rank (``runners.census_plan``): one
    launch per world size, one thread per rank (nothing is timed, so the load does not matter)."""
    out: list[dict[str, object]] = []
    timing = asdict(TimingRecipe(threads_per_rank=1, pin_cores=False))
    for world in sorted({p.world_size for p in plans}):
        tasks = [{"kind": "census", "timing": timing, "plan": asdict(p), "model": asdict(cfg)}
                 for p in plans if p.world_size == world]
        out += launch(tasks, world, timeout=timeout, threads=1)
    return out


def load_steps(folder: str | os.PathLike[str]) -> list[StepRecord]:
    """The step records of a results folder."""
    return [record_from_dict(d) for d in json.loads((Path(folder) / "steps.json").read_text())]
