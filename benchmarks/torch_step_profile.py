"""Where one real training step of the torch backend spends its time, op class by op class, next
to what the simulator prices for the same plan (issue 21: every plan, the single rank included,
predicted 21-27 % fast with the microbenchmarks interleaved into the steps).

Each rank of ``PLAN`` runs as the backend runs it (``launch.rank_env`` threads, ``runners.set_threads``
affinity and inter-op threads, ``runners.build_step``), warms up, times ``STEPS`` steps without
the profiler, then runs ``STEPS`` steps under ``torch.profiler`` (CPU). Every profiler event's self
time is put in one class (``op_class``: GEMM, attention, softmax/cross-entropy, LayerNorm, GELU,
embedding, elementwise, Adam, zero_grad, autograd engine, communication), and in the phase its
outermost ancestor says (forward, backward under ``autograd::engine``, optimizer). What no event
covers (the step's wall time less its top-level events) is Python between ops.

The simulator's side: the plan predicted with the profile fitted on ``FOLDER``'s microbenchmarks
(``calibrate fit``'s profile, microbenchmarks only), every op of the lowering priced by
``step.compute.op_time`` forward and backward and put in the same classes, the optimizer and the
step overhead; the sum against ``simulate_step``'s whole step (the rest: communication and
scheduling). Nothing is fitted to the steps here. Ratios survive some load; the load is printed.

    .venv/bin/python benchmarks/torch_step_profile.py FOLDER [PLAN] [STEPS] [MODEL] [THREADS]
        FOLDER: a ``calibrate measure`` folder of the same model (its micro_w{N}.json)
        PLAN: single (default), dp2-ddp, tp2, ... (``measure.standard_plans``)
        MODEL: small (default) or holdout; THREADS: per rank (0: the backend's split of the cores)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from clustersim.simulator.calibration.torch_backend.launch import free_port, rank_env
from clustersim.simulator.calibration.torch_backend.measure import HOLDOUT_GPT, SMALL_GPT, standard_plans
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig, TimingRecipe

CLASSES: tuple[str, ...] = ("gemm", "attention", "softmax_xent", "layernorm", "gelu", "embedding", "elementwise",
                            "adam", "zero_grad", "autograd_engine", "comm", "dtensor", "python_gaps")
"""The classes the step's self time is put in (and the simulator's prices)."""

RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("comm", ("gloo:", "c10d::", "c10d_functional::", "wait_tensor", "record_param_comms", "nccl:", "_allgather_base",
              "allreduce", "_reduce_scatter")),
    ("dtensor", ("PythonSubclass", "Redistribute", "TorchTensor", "DistributedDataParallel", "FSDP", "fsdp")),
    ("attention", ("scaled_dot_product", "flash_attention")),
    ("softmax_xent", ("softmax", "nll_loss", "cross_entropy")),
    ("layernorm", ("layer_norm",)),
    ("gelu", ("gelu",)),
    ("embedding", ("embedding", "index_select")),
    ("gemm", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")),
    ("zero_grad", ("zero_grad",)),
    ("adam", ("Optimizer.step", "_foreach", "adam")),
    ("autograd_engine", ("autograd::engine", "AccumulateGrad", "Backward0", "Backward1")),
)
"""Substrings of a profiler event's name that decide its class, first match wins; else elementwise."""


def op_class(name: str) -> str:
    """The class of a profiler event by its name (``RULES``; aten ops not named there: elementwise)."""
    low = name.lower()
    for cls, keys in RULES:
        if any(k.lower() in low for k in keys):
            return cls
    return "elementwise"


def phase_of(chain: Iterable[str]) -> str:
    """fwd, bwd or opt from the names of an event and its ancestors (outermost last)."""
    names = list(chain)
    if any(n.startswith("Optimizer.") for n in names):
        return "opt"
    if any(n.startswith("autograd::engine") for n in names):
        return "bwd"
    return "fwd"


def rank_main(plan_d: dict[str, Any], model_d: dict[str, Any], steps: int, out: str, threads: int = 0) -> None:
    """One rank: threads as the backend sets them, build the plan's step, time and profile it."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from clustersim.simulator.calibration.torch_backend import runners

    plan, cfg = BackendPlan(**plan_d), GPTConfig(**model_d)
    world = int(os.environ["WORLD_SIZE"])
    timing = TimingRecipe(threads_per_rank=threads).for_world(world, os.cpu_count() or 1)
    runners.set_threads(timing, int(os.environ["RANK"]))
    dist.init_process_group("gloo")
    step = runners.build_step(plan, cfg)
    for _ in range(4):
        step()
    plain = [runners.timed_step(step)[0] for _ in range(steps)]
    load = os.getloadavg()[0]
    per_step: list[dict[str, float]] = []
    counts: dict[str, float] = defaultdict(float)
    names: dict[str, float] = defaultdict(float)
    walls, gaps = [], []
    for _ in range(steps):
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            step()
            walls.append(time.perf_counter() - start)
        main_thread = threading_main(prof)
        mine: dict[str, float] = defaultdict(float)
        top = 0.0
        for e in prof.events():
            if e.thread != main_thread:
                continue
            chain, p = [e.name], e.cpu_parent
            while p is not None:
                chain.append(p.name)
                p = p.cpu_parent
            if e.cpu_parent is None:
                top += e.cpu_time_total * 1e-6
            key = f"{phase_of(chain)}/{op_class(e.name)}"
            mine[key] += e.self_cpu_time_total * 1e-6
            counts[key] += 1.0 / steps
            names[e.name] += e.self_cpu_time_total * 1e-6 / steps
        per_step.append(mine)
        gaps.append(walls[-1] - top)
    if dist.get_rank() == 0:
        keys = sorted({k for m in per_step for k in m})
        Path(out).write_text(json.dumps({
            "plan": plan.name, "world": world, "threads": torch.get_num_threads(), "load": load,
            "plain_s": statistics.median(plain), "profiled_s": statistics.median(walls),
            "self_s": {k: statistics.median([m.get(k, 0.0) for m in per_step]) for k in keys},
            "calls": dict(counts), "python_gaps_s": statistics.median(gaps),
            "top_names": sorted(names.items(), key=lambda kv: -kv[1])[:40]}, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def threading_main(prof: Any) -> int:
    """The thread id most events ran on (the rank's main thread; gloo's own threads left out)."""
    tally: dict[int, int] = defaultdict(int)
    for e in prof.events():
        tally[e.thread] += 1
    return max(tally, key=lambda t: tally[t])


def run_ranks(plan: BackendPlan, cfg: GPTConfig, steps: int, threads: int = 0) -> dict[str, Any]:
    """Spawn the plan's ranks (as ``launch.launch`` does) running ``rank_main``; rank 0's figures."""
    port = free_port()
    world = plan.world_size
    threads = TimingRecipe(threads_per_rank=threads).for_world(world, os.cpu_count() or 1).threads_per_rank
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "out.json")
        args = [sys.executable, __file__, "--rank", json.dumps(plan.__dict__), json.dumps(cfg.__dict__), str(steps), out,
                str(threads)]
        procs = [subprocess.Popen(args, env=rank_env(r, world, port, threads)) for r in range(world)]
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            raise SystemExit(f"a rank failed: {codes}")
        return dict(json.loads(Path(out).read_text()))


SIM_CLASS = {"embedding": "embedding", "attn_norm": "layernorm", "mlp_norm": "layernorm", "final_norm": "layernorm",
             "qkv": "gemm", "attn_out": "gemm", "mlp_fc1": "gemm", "mlp_fc2": "gemm", "output": "gemm",
             "attn_core": "attention", "attn_residual": "elementwise", "mlp_residual": "elementwise",
             "mlp_act": "gelu", "loss": "softmax_xent"}
"""The lowering's op names (``workloads``' dense layer) in the classes above."""


def simulated(folder: str, plan: BackendPlan, cfg: GPTConfig) -> dict[str, Any]:
    """The simulator's price of the plan by class (``op_time`` of each op of rank 0's stage, every
    micro-batch, forward and backward), with the profile fitted on ``folder``'s microbenchmarks."""
    from clustersim.simulator.calibration.fit import fit_profile
    from clustersim.simulator.calibration.torch_backend import check
    from clustersim.simulator.profile import machine_cluster
    from clustersim.simulator.step.compute import op_time, optimizer_time
    from clustersim.simulator.step.host import eager_excess
    from clustersim.simulator.step.partition import partition_plan

    fitted = fit_profile(folder, world_size=plan.world_size).profile
    prof = check.plan_profile(plan, fitted)
    cluster = machine_cluster(prof, plan.world_size, time_shared=True)
    model, training = check.model_spec(cfg), check.training_spec(cfg, plan)
    pplan = check.parallel_plan(plan, overlap=False)
    acc = cluster.accelerator
    part = partition_plan(model, training, pplan)
    micro = plan.micro_batches
    out: dict[str, float] = defaultdict(float)
    ops = 0
    for ch in part.stages[0].chunks:
        for op in ch.ops:
            cls = SIM_CLASS.get(op.name, "elementwise")
            out[f"fwd/{cls}"] += micro * op_time(op, acc, prof, training.precision, "fwd")
            out[f"bwd/{cls}"] += micro * (op_time(op, acc, prof, training.precision, "bwd_input")
                                          + op_time(op, acc, prof, training.precision, "bwd_weight"))
            ops += 3
        layer_ops = [o for o in ch.ops if o.name in LAYER_OPS]
        per_layer = [layer_ops[i:i + len(LAYER_OPS)] for i in range(0, len(layer_ops), len(LAYER_OPS))]
        host = eager_excess(per_layer, prof.eager_layer_overhead, prof.kernel_overhead)
        out["fwd/eager_host"] += micro * host.fwd
        out["bwd/eager_host"] += micro * host.bwd
    eager_opt = prof.eager_layer_overhead.get("optimizer", 0.0) * sum(len(ch.layers) for ch in part.stages[0].chunks)
    step = check.predict(_record(plan, cfg), fitted)
    return {"by_class": dict(out), "kernel_overhead_s": prof.kernel_overhead, "op_passes": ops * micro,
            "step_overhead_s": prof.step_overhead, "optimizer_efficiency": prof.optimizer_efficiency,
            "step_s": step,
            "optimizer_s": optimizer_time(_local_params(cfg, plan), acc, prof) + eager_opt}


LAYER_OPS: tuple[str, ...] = ("attn_norm", "qkv", "attn_core", "attn_out", "attn_residual", "mlp_norm", "mlp_fc1",
                              "mlp_act", "mlp_fc2", "mlp_residual")
"""The ops of one block in the lowering, in order."""


def _local_params(cfg: GPTConfig, plan: BackendPlan) -> float:
    """Parameters rank 0 holds (the whole model on one rank; the plans' shards otherwise)."""
    h, f, v, layers = cfg.hidden_size, cfg.ffn_hidden_size, cfg.vocab_size, cfg.num_layers
    per_layer = 4 * h * h + 2 * h * f + 4 * h
    total = layers * per_layer + 2 * v * h + 2 * h
    return total / plan.world_size if plan.world_size > 1 and plan.data_parallel != "ddp" else float(total)


def _record(plan: BackendPlan, cfg: GPTConfig) -> Any:
    from clustersim.simulator.calibration.torch_backend.specs import StepRecord
    return StepRecord(plan=plan, model=cfg, world_size=plan.world_size, backend="gloo", device="cpu",
                      step_times=(1.0,))


def table(real: dict[str, Any], sim: dict[str, Any]) -> None:
    """Measured self time and simulated price per phase/class, in ms, with their ratio."""
    keys = sorted(set(real["self_s"]) | set(sim["by_class"]), key=lambda k: (k.split("/")[0], k))
    print(f"plan {real['plan']}: {real['world']} rank(s) x {real['threads']} thread(s), load {real['load']:.2f}")
    print(f"step unprofiled {real['plain_s'] * 1e3:.1f} ms, under the profiler {real['profiled_s'] * 1e3:.1f} ms; "
          f"simulated {sim['step_s'] * 1e3:.1f} ms")
    print(f"{'phase/class':28s} {'measured ms':>12s} {'calls':>7s} {'simulated ms':>13s} {'ratio':>7s}")
    for k in keys:
        m, s = real["self_s"].get(k, 0.0) * 1e3, sim["by_class"].get(k, 0.0) * 1e3
        ratio = f"{m / s:7.2f}" if s > 0 else "      -"
        print(f"{k:28s} {m:12.2f} {real['calls'].get(k, 0):7.0f} {s:13.2f} {ratio}")
    print(f"{'python gaps':28s} {real['python_gaps_s'] * 1e3:12.2f}")
    m_all = sum(real["self_s"].values()) + real["python_gaps_s"]
    s_all = sum(sim["by_class"].values()) + sim["optimizer_s"] + sim["step_overhead_s"]
    print(f"{'total (sim: + optimizer)':28s} {m_all * 1e3:12.2f} {'':7s} {s_all * 1e3:13.2f} {m_all / s_all:7.2f}")
    print(f"simulated optimizer {sim['optimizer_s'] * 1e3:.2f} ms, step overhead {sim['step_overhead_s'] * 1e3:.2f} ms, "
          f"kernel overhead {sim['kernel_overhead_s'] * 1e6:.1f} us x {sim['op_passes']} op passes")
    print("top self-time names (ms):")
    for name, v in real["top_names"][:25]:
        print(f"  {name:60s} {v * 1e3:8.2f}")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--rank":
        rank_main(json.loads(argv[1]), json.loads(argv[2]), int(argv[3]), argv[4], int(argv[5]))
        return 0
    folder = argv[0]
    name = argv[1] if len(argv) > 1 else "single"
    steps = int(argv[2]) if len(argv) > 2 else 5
    cfg = HOLDOUT_GPT if len(argv) > 3 and argv[3] == "holdout" else SMALL_GPT
    threads = int(argv[4]) if len(argv) > 4 else 0
    plan = next(p for w in (1, 2) for p in standard_plans(w) if p.name == name)
    real = run_ranks(plan, cfg, steps, threads)
    sim = simulated(folder, plan, cfg)
    table(real, sim)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
