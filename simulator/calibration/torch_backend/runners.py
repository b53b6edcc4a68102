"""What one rank runs: real training steps of the small GPT under a parallel plan, timed.

Owns turning a ``BackendPlan`` into a module and a step function (DDP, FSDP2 and TP applied by
``parallelize``; ``torch.distributed.pipelining`` GPipe and 1F1B here), timing steps with the
CPU run delay the OS imposed, and the rank's entry point
(``python -m clustersim.simulator.calibration.torch_backend.runners TASKS OUT``).
It does not spawn processes (``launch``) nor fit anything (``clustersim.simulator.calibration.fit``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

from clustersim.simulator.calibration.torch_backend import microbench
from clustersim.simulator.calibration.torch_backend.gpt import GPT, build_stage, lm_loss
from clustersim.simulator.calibration.torch_backend.parallelize import apply_fsdp, apply_tp, device, make_mesh, synchronize
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
        loss = lm_loss(wrapped(tokens), targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize()
        return float(loss.detach()) * weight, weight

    return step


def pipeline_step(plan: BackendPlan, cfg: GPTConfig, mesh: DeviceMesh, seed: int) -> Step:
    """PP with torch.distributed.pipelining (GPipe or 1F1B), one stage per rank."""
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

    return step


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


def time_steps(step: Step, timing: TimingRecipe) -> tuple[list[float], list[float], list[float]]:
    """(seconds per step, run delay per step, global loss of each warm-up step), after warm-up.

    Each step is timed from a common barrier; time and delay are the largest over the ranks.
    """
    losses = [global_loss(*step()) for _ in range(timing.warmup)]
    times, delays = [], []
    for _ in range(timing.repeats):
        dist.barrier()
        start, delay = time.perf_counter(), run_delay()
        step()
        times.append(time.perf_counter() - start)
        delays.append(run_delay() - delay)
    t = torch.tensor([times, delays], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t[0].tolist(), t[1].tolist(), losses


def trace_step(step: Step, name: str, folder: str) -> None:
    """One extra step under torch.profiler, written as a Chrome trace per rank."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    prof.export_chrome_trace(str(Path(folder) / f"{name}.rank{dist.get_rank()}.json"))


def run_plan(plan: BackendPlan, cfg: GPTConfig, timing: TimingRecipe, seed: int = 0) -> StepRecord:
    """Build, warm up and time one plan on all ranks of the default group."""
    world = dist.get_world_size()
    if plan.world_size != world:
        raise ValueError(f"plan {plan.name}: dp*tp*pp = {plan.world_size} != world size {world}")
    mesh = make_mesh(plan)
    step = pipeline_step(plan, cfg, mesh, seed) if plan.pp > 1 else flat_step(plan, cfg, mesh, seed)
    times, delays, losses = time_steps(step, timing)
    if timing.profile_dir:
        trace_step(step, plan.name, timing.profile_dir)
    return StepRecord(plan=plan, model=cfg, world_size=world, backend=dist.get_backend(),
                      device=device().type, step_times=tuple(times), run_delays=tuple(delays),
                      warmup_losses=tuple(losses))


def run_task(task: dict[str, object]) -> dict[str, object]:
    """Dispatch one task of the launcher's list."""
    timing = TimingRecipe(**task.get("timing", {}))  # type: ignore[arg-type]  # a JSON section of the launcher's task, keyed by field name
    match task["kind"]:
        case "step":
            plan = BackendPlan(**task["plan"])  # type: ignore[arg-type]  # JSON section of the task, keyed by field name
            cfg = GPTConfig(**task["model"])  # type: ignore[arg-type]  # JSON section of the task, keyed by field name
            return {"kind": "step", **run_plan(plan, cfg, timing).to_dict()}
        case "compute":
            return {"kind": "compute", **microbench.compute_suite(task, timing)}
        case "collectives":
            return {"kind": "collectives", **microbench.collective_suite(task, timing)}
    raise ValueError(f"unknown task kind {task['kind']!r}; use step, compute or collectives")


def main(argv: list[str]) -> int:
    """Rank entry point: run every task in TASKS, rank 0 writes the results to OUT."""
    tasks = json.loads(Path(argv[0]).read_text())
    timing_threads = int(tasks[0].get("timing", {}).get("threads_per_rank", 1)) if tasks else 1
    torch.set_num_threads(timing_threads)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(device())
    dist.init_process_group(backend=backend)
    try:
        results = [run_task(t) for t in tasks]
        if dist.get_rank() == 0:
            Path(argv[1]).write_text(json.dumps(results, indent=1))
        dist.barrier()  # no rank tears its connections down while another still uses them
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
