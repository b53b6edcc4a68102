"""What one rank runs: real training steps of the small GPT under a parallel plan, timed.

Owns turning a ``BackendPlan`` into a module and a step function (DDP, FSDP2 and TP applied by
``parallelize``; ``torch.distributed.pipelining`` GPipe and 1F1B here), the rank's threads and
core affinity, the timing protocol (warm-up until settled, repeats until the median's interval
is narrow, ``stats``) with the CPU run delay the OS imposed, and the rank's entry point
(``python -m clustersim.simulator.calibration.torch_backend.runners TASKS OUT``).
It does not spawn processes (``launch``) nor fit anything (``clustersim.simulator.calibration.fit``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

from clustersim.simulator.calibration.torch_backend import microbench, microbench_comm, stats
from clustersim.simulator.calibration.torch_backend.gpt import GPT, build_stage, lm_loss
from clustersim.simulator.calibration.torch_backend.parallelize import (apply_fsdp, apply_tp, device, loss_backward, make_mesh,
                                                                       synchronize)
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig, StepRecord, TimingRecipe

Step = Callable[[], tuple[float, float]]
"""One training step; returns (this rank's loss x weight, weight) for the global mean loss."""


def batch(cfg: GPTConfig, sequences: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and targets; the same seed gives the same batch on every rank."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (sequences, cfg.seq_len), generator=gen)
    targets = torch.randint(0, cfg.vocab_size, (sequences, cfg.seq_len), generator=gen)
    return tokens.to(device()), targets.to(device())


def flat_step(plan: BackendPlan, cfg: GPTConfig, mesh: DeviceMesh, seed: int) -> Step:
    """DP (DDP or FSDP2), TP(+SP) and their mix: no pipeline; replica r takes slice r of the batch."""
    model = GPT(cfg, seed=seed).to(device())
    names = mesh.mesh_dim_names or ()
    if plan.tp > 1:
        apply_tp(model, mesh["tp"], plan.sp)
    wrapped: torch.nn.Module = model
    if plan.dp > 1 and plan.data_parallel == "fsdp":
        apply_fsdp(model, mesh["dp"])
    elif plan.dp > 1:
        wrapped = DistributedDataParallel(model, process_group=mesh["dp"].get_group())
    dp_rank = mesh["dp"].get_local_rank() if "dp" in names else 0
    tp_rank = mesh["tp"].get_local_rank() if "tp" in names else 0
    tokens, targets = batch(cfg, plan.global_batch, seed)
    mine = slice(dp_rank * plan.micro_batch, (dp_rank + 1) * plan.micro_batch)
    tokens, targets = tokens[mine], targets[mine]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    weight = 1.0 if tp_rank == 0 else 0.0  # TP ranks hold the same loss: count it once

    def step() -> tuple[float, float]:
        loss = loss_backward(wrapped(tokens), targets, model)
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize()
        value = loss.detach()
        return float(value.full_tensor() if isinstance(value, DTensor) else value) * weight, weight

    return step


def pipeline_step(plan: BackendPlan, cfg: GPTConfig, mesh: DeviceMesh, seed: int) -> Step:
    """PP with torch.distributed.pipelining (GPipe or 1F1B), one stage per rank."""
    return _pipeline(plan, cfg, mesh, seed)[0]


def _pipeline(plan: BackendPlan, cfg: GPTConfig, mesh: DeviceMesh, seed: int) -> tuple[Step, PipelineStage]:
    """The pipeline step and this rank's ``PipelineStage``."""
    rank, n = mesh["pp"].get_local_rank(), plan.pp
    stage_mod = build_stage(cfg, rank, n, seed=seed).to(device())
    stage = PipelineStage(stage_mod, rank, n, device(), group=mesh["pp"].get_group())
    kind = ScheduleGPipe if plan.schedule == "gpipe" else Schedule1F1B
    schedule = kind(stage, n_microbatches=plan.micro_batches, loss_fn=lm_loss)
    tokens, targets = batch(cfg, plan.global_batch, seed)
    opt = torch.optim.Adam(stage_mod.parameters(), lr=1e-3)

    def step() -> tuple[float, float]:
        losses: list[torch.Tensor] = []
        if rank == 0:
            schedule.step(tokens)
        elif rank == n - 1:
            schedule.step(target=targets, losses=losses)
        else:
            schedule.step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize()
        if not losses:
            return 0.0, 0.0
        return float(torch.stack(losses).mean()), 1.0

    return step, stage


def global_loss(weighted: float, weight: float) -> float:
    """Mean loss over the ranks that own one (DP replicas, the last stage, TP rank 0)."""
    t = torch.tensor([weighted, weight], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0] / t[1])


def run_delay() -> float:
    """Seconds this thread has waited runnable for a CPU (Linux schedstat); 0 where unavailable.

    On a shared host the OS withholds cores from the ranks; this is how long, so a step time can
    be read with the contention taken out (``StepRecord.uncontended``).
    """
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return 0.0


def _all_max(*values: float) -> list[float]:
    """``values`` replaced by their maximum over the ranks (every rank gets the same list)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t.tolist()]


def timed_step(step: Step) -> tuple[float, float, tuple[float, float]]:
    """(seconds, run delay) of one step from a common barrier, the largest over the ranks, and
    the step's (weighted loss, weight)."""
    dist.barrier()
    start, delay = time.perf_counter(), run_delay()
    out = step()
    took, waited = time.perf_counter() - start, run_delay() - delay
    took, waited = _all_max(took, waited)
    return took, waited, out


def warm_up(step: Step, timing: TimingRecipe) -> tuple[list[float], int]:
    """(global loss of each of the first ``timing.warmup`` steps, warm-up steps run): at least
    ``warmup``, until the last ``settle_window`` agree within ``settle_tolerance`` or ``warmup_max``."""
    losses: list[float] = []
    times: list[float] = []
    while True:
        took, _, out = timed_step(step)
        times.append(took)
        if len(losses) < timing.warmup:
            losses.append(global_loss(*out))
        if len(times) >= timing.warmup_max or (len(times) >= timing.warmup and stats.settled(
                times, window=timing.settle_window, tolerance=timing.settle_tolerance)):
            return losses, len(times)


def time_steps(step: Step, timing: TimingRecipe) -> tuple[list[float], list[float], list[float], int,
                                                         list[dict[str, float]]]:
    """(seconds per step, run delay per step, warm-up losses, warm-up steps, one drift probe
    sample after each timed step, ``microbench.probe_sample``), after warm-up.

    Each step is timed from a common barrier; time and delay are the largest over the ranks.
    Repeats stop at ``repeats_max``, after ``budget_s`` of timed steps, or once the median's
    95 % interval is within ``ci_width`` (past ``repeats``); all ranks see the same figures.
    """
    losses, warmed = warm_up(step, timing)
    times: list[float] = []
    delays: list[float] = []
    probes: list[dict[str, float]] = []
    while True:
        took, waited, _ = timed_step(step)
        times.append(took)
        delays.append(waited)
        probes.append(microbench.probe_sample())  # outside the timed step, in the plan's own window
        over_budget = sum(times) >= timing.budget_s and len(times) >= timing.repeats
        if over_budget or stats.enough_repeats(times, minimum=timing.repeats, maximum=timing.repeats_max,
                                               width=timing.ci_width):
            return times, delays, losses, warmed, probes


def pin_rank(rank: int, threads: int) -> list[int]:
    """Bind this process to ``threads`` cores of its own (rank r takes cores r*t .. r*t+t-1 of the
    allowed set, wrapping); the cores it may run on. Unchanged where the OS offers no affinity."""
    if not hasattr(os, "sched_setaffinity"):
        return []
    allowed = sorted(os.sched_getaffinity(0))
    mine = sorted({allowed[(rank * threads + i) % len(allowed)] for i in range(threads)})
    os.sched_setaffinity(0, mine)
    return mine


def set_threads(timing: TimingRecipe, rank: int) -> None:
    """Intra-op and inter-op threads (and core affinity) of this rank, before any torch work."""
    threads = timing.threads_per_rank or 1
    if timing.pin_cores:
        pin_rank(rank, threads)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(timing.interop_threads)


def trace_step(step: Step, name: str, folder: str) -> None:
    """One extra step under torch.profiler, written as a Chrome trace per rank."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    prof.export_chrome_trace(str(Path(folder) / f"{name}.rank{dist.get_rank()}.json"))


def run_plan(plan: BackendPlan, cfg: GPTConfig, timing: TimingRecipe, seed: int = 0) -> StepRecord:
    """Build, warm up and time one plan on all ranks of the default group."""
    world = dist.get_world_size()
    step = build_step(plan, cfg, seed)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else -1.0
    times, delays, losses, warmed, probes = time_steps(step, timing)
    if timing.profile_dir:
        trace_step(step, plan.name, timing.profile_dir)
    return StepRecord(plan=plan, model=cfg, world_size=world, backend=dist.get_backend(),
                      device=device().type, step_times=tuple(times), run_delays=tuple(delays),
                      warmup_losses=tuple(losses), warmup_steps=warmed,
                      threads_per_rank=torch.get_num_threads(), load_average=load, probes=tuple(probes))


def build_step(plan: BackendPlan, cfg: GPTConfig, seed: int = 0) -> Step:
    """The plan's training step on all ranks of the default group (its mesh, model, optimizer)."""
    world = dist.get_world_size()
    if plan.world_size != world:
        raise ValueError(f"plan {plan.name}: dp*tp*pp = {plan.world_size} != world size {world}")
    mesh = make_mesh(plan)
    return pipeline_step(plan, cfg, mesh, seed) if plan.pp > 1 else flat_step(plan, cfg, mesh, seed)


@dataclass
class _Timed:
    """One plan's figures while the interleaved passes run (appended to, then frozen in a record)."""

    step: Step
    losses: list[float]
    warmed: int
    load: float
    times: list[float] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    probes: list[dict[str, float]] = field(default_factory=list)
    index: list[int] = field(default_factory=list)


def _time_block(t: _Timed, steps: int, rewarm: int, k: int) -> None:
    """``rewarm`` untimed steps, then ``steps`` timed ones (each followed by a drift probe) of pass ``k``."""
    for _ in range(rewarm):
        t.step()
    for _ in range(steps):
        took, waited, _ = timed_step(t.step)
        t.times.append(took)
        t.delays.append(waited)
        t.probes.append(microbench.probe_sample())
        t.index.append(k)


@dataclass
class _Micro:
    """The microbenchmarks timed as one more block of every interleaved pass (``micro_placement
    = "interleaved"``): one pass of the compute suite and (``collectives`` given) one pass of the
    collective sweep per block, so the profile is fitted on figures measured in the same time
    windows, threads and launch as the steps it predicts (issue 21: fitted on microbenchmarks
    timed before every step, the profile predicted every plan fast)."""

    compute: dict[str, object]
    collectives: dict[str, object] | None
    runs: list[dict[str, object]] = field(default_factory=list)
    sweeps: list[dict[str, object]] = field(default_factory=list)
    compute_probes: list[dict[str, float]] = field(default_factory=list)
    sweep_probes: list[dict[str, float]] = field(default_factory=list)

    def block(self, timing: TimingRecipe) -> None:
        """One pass of every microbenchmark, appended to the passes so far."""
        self.runs.append(microbench.compute_pass(self.compute, timing, self.compute_probes))
        if self.collectives is not None:
            self.sweeps.append({"entries": microbench_comm.collective_entries(self.collectives, timing, self.sweep_probes)})

    def results(self, timing: TimingRecipe) -> dict[str, object]:
        """The compute and collectives sections, as ``compute_suite`` and ``collective_suite`` give them."""
        out: dict[str, object] = {"compute": microbench.compute_result(self.runs, self.compute_probes, self.compute)}
        if self.collectives is not None:
            out["collectives"] = microbench_comm.collective_result(self.collectives, timing, self.sweeps,
                                                              self.sweep_probes)
        return out


def time_interleaved(plans: Sequence[BackendPlan], cfg: GPTConfig, timing: TimingRecipe,
                     seed: int = 0, micro: _Micro | None = None) -> list[StepRecord]:
    """Every plan built and warmed up (in order), then timed in round-robin passes: pass k times
    ``stats.pass_steps`` steps of each plan, in ``stats.pass_order(len(plans), k)``, until
    ``stats.enough_passes`` (the last pass cut at ``repeats_max``). A host state that lasts a few
    seconds to a minute then falls on every plan's passes alike, not on the plans measured while
    it lasted; each record keeps the pass of every step (``StepRecord.pass_index``). With
    ``micro``, its block is one more slot of every pass's rotation (after the plans' in pass 0)."""
    timed = []
    for plan in plans:
        step = build_step(plan, cfg, seed)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else -1.0
        losses, warmed = warm_up(step, timing)
        timed.append(_Timed(step=step, losses=losses, warmed=warmed, load=load))
    per, k = stats.pass_steps(timing.repeats, timing.step_passes), 0
    while True:
        steps = min(per, timing.repeats_max - len(timed[0].times))
        for i in stats.pass_order(len(timed) + (micro is not None), k):
            if i == len(timed) and micro is not None:
                micro.block(timing)
            else:
                _time_block(timed[i], steps, timing.rewarm, k)
        k += 1
        if stats.enough_passes([t.times for t in timed], passes_done=k, min_passes=timing.step_passes,
                               minimum=timing.repeats, maximum=timing.repeats_max, width=timing.ci_width,
                               budget=timing.budget_s * len(timed)):
            break
    if timing.profile_dir:
        for plan, t in zip(plans, timed):
            trace_step(t.step, plan.name, timing.profile_dir)
    return [_record(plan, cfg, t) for plan, t in zip(plans, timed)]


def _record(plan: BackendPlan, cfg: GPTConfig, t: _Timed) -> StepRecord:
    return StepRecord(plan=plan, model=cfg, world_size=dist.get_world_size(), backend=dist.get_backend(),
                      device=device().type, step_times=tuple(t.times), run_delays=tuple(t.delays),
                      warmup_losses=tuple(t.losses), warmup_steps=t.warmed,
                      threads_per_rank=torch.get_num_threads(), load_average=t.load, probes=tuple(t.probes),
                      pass_index=tuple(t.index))


WIRE_PREFIXES: tuple[str, ...] = ("gloo:", "nccl:")
"""Profiler events of the transport itself: one per call the backend puts on the wire."""


def wire_calls(events: object) -> list[list[object]]:
    """[transport op, elements] of every transport event of a torch.profiler record, in start order.

    The transport's own events (``gloo:all_reduce``, ``gloo:send``, ...) count each call once
    however it was issued (DDP's reducer, FSDP2, DTensor's functional collectives, pipelining);
    the element count is the first input's (all-gather: the rank's shard; the backend's tensors
    are fp32). ``events``: ``prof.events()``."""
    out: list[tuple[float, str, int]] = []
    for e in events:  # type: ignore[attr-defined]  # torch.profiler's EventList, iterable of FunctionEvent
        name = str(e.name)
        if name.startswith(WIRE_PREFIXES):
            shapes = [s for s in e.input_shapes if s] or [[0]]
            numel = 1
            for d in shapes[0]:
                numel *= int(d)
            out.append((float(e.time_range.start), name.split(":", 1)[1], numel))
    return [[op, n] for _, op, n in sorted(out, key=lambda x: x[0])]


def watch_passes(stage: PipelineStage) -> list[list[object]]:
    """The pipeline passes ``stage`` runs, in order, as [F or B, micro-batch] (the list fills as
    the schedule calls the stage's ``forward_one_chunk`` and ``backward_one_chunk``)."""
    seen: list[list[object]] = []
    fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk

    def forward(mb: int, *args: object, **kwargs: object) -> object:
        seen.append(["F", mb])
        return fwd(mb, *args, **kwargs)  # type: ignore[arg-type]  # the schedule's own arguments, passed through

    def backward(mb: int, *args: object, **kwargs: object) -> object:
        seen.append(["B", mb])
        return bwd(mb, *args, **kwargs)  # type: ignore[arg-type]  # the schedule's own arguments, passed through

    setattr(stage, "forward_one_chunk", forward)  # instrument this one instance, arguments passed through
    setattr(stage, "backward_one_chunk", backward)
    return seen


def census_plan(plan: BackendPlan, cfg: GPTConfig, warmup: int = 2, seed: int = 0) -> dict[str, object]:
    """What one training step of ``plan`` puts on the wire, per rank: every transport call
    ([op, elements], in order) and, for pipelines, the passes in the order the schedule ran them.

    ``warmup`` untimed steps first (DDP rebuilds its buckets after the first), then one step
    under torch.profiler. Nothing is timed: the census does not depend on the host's load."""
    mesh = make_mesh(plan)
    passes: list[list[object]] = []
    if plan.pp > 1:
        step, stage = _pipeline(plan, cfg, mesh, seed)
    else:
        step = flat_step(plan, cfg, mesh, seed)
    for _ in range(warmup):
        step()
    if plan.pp > 1:
        passes = watch_passes(stage)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    mine = {"rank": dist.get_rank(), "calls": wire_calls(prof.events()), "passes": passes}
    everyone: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return {"plan": asdict(plan), "model": asdict(cfg), "world_size": dist.get_world_size(),
            "backend": dist.get_backend(), "ranks": everyone}


def run_task(task: dict[str, object]) -> dict[str, object]:
    """Dispatch one task of the launcher's list."""
    timing = TimingRecipe(**task.get("timing", {}))  # type: ignore[arg-type]  # a JSON section of the launcher's task, keyed by field name
    match task["kind"]:
        case "step":
            plan = BackendPlan(**task["plan"])  # type: ignore[arg-type]  # JSON section of the task, keyed by field name
            cfg = GPTConfig(**task["model"])  # type: ignore[arg-type]  # JSON section of the task, keyed by field name
            return {"kind": "step", **run_plan(plan, cfg, timing).to_dict()}
        case "steps":
            cfg = GPTConfig(**task["model"])  # type: ignore[arg-type]  # JSON section of the task, keyed by field name
            plans = [BackendPlan(**p) for p in task["plans"]]  # type: ignore[attr-defined]  # a JSON list of plan sections
            micro = dict(task.get("micro") or {})  # type: ignore[call-overload]  # the launcher's JSON section
            blocks = _Micro(compute=micro["compute"], collectives=micro.get("collectives")) if micro else None
            records = [r.to_dict() for r in time_interleaved(plans, cfg, timing, micro=blocks)]
            return {"kind": "steps", "records": records, **(blocks.results(timing) if blocks else {})}
        case "census":
            plan = BackendPlan(**task["plan"])  # type: ignore[arg-type]  # JSON section of the task, keyed by field name
            cfg = GPTConfig(**task["model"])  # type: ignore[arg-type]  # JSON section of the task, keyed by field name
            return {"kind": "census", **census_plan(plan, cfg)}
        case "compute":
            return {"kind": "compute", **microbench.compute_suite(task, timing)}
        case "collectives":
            return {"kind": "collectives", **microbench_comm.collective_suite(task, timing)}
    raise ValueError(f"unknown task kind {task['kind']!r}; use step, steps, census, compute or collectives")


def main(argv: list[str]) -> int:
    """Rank entry point: run every task in TASKS, rank 0 writes the results to OUT."""
    tasks = json.loads(Path(argv[0]).read_text())
    set_threads(TimingRecipe(**(tasks[0].get("timing", {}) if tasks else {})), int(os.environ.get("RANK", "0")))
    # On a GPU, NCCL carries the CUDA tensors (the measured collectives, the plans' traffic) and gloo
    # the CPU ones (the all-reduced timings of ``microbench._slowest``): NCCL takes no CPU tensor.
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(device())
    dist.init_process_group(backend=backend)
    try:
        results = [run_task(t) for t in tasks]
        if dist.get_rank() == 0:
            Path(argv[1]).write_text(json.dumps(results, indent=1))
        dist.barrier()  # no rank tears its connections down while another still uses them
    except BaseException:
        dist.destroy_process_group()
        raise
    # Every result is written and every rank is past the barrier: leave without the C++ teardown.
    # A rank once aborted there in the suite ("terminate called without an active exception", no
    # Python traceback: a joinable thread destroyed in the process group's or the profiler's
    # destructors), failing a run whose results were complete; the OS closes the sockets.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
