"""Benchmark: ``clustersim search`` as a command, and its analytical tier, this tree against an older checkout.

Per scenario (llama3-70b on 1,024 H100 at GBS 1,024 x 8k, the issue's case; llama3-70b on 1,024
H100 at GBS 128; llama3-8b on 64 H100; mixtral-8x7b on 256 H100) and tree:

- the analytical tier in-process: enumeration, plan checks and the step-time and static-memory
  bounds of every valid plan (the oldest trees: ``StepBound`` plan by plan; then
  ``search.grid.grid_bounds`` over ``ParallelPlan``s; this tree: ``search.valid_columns`` and
  ``search.grid.column_bounds`` over numpy columns), median CPU seconds and valid plans per CPU second;
- the whole command in a fresh process (old and new alternate run by run, so both see the same
  load): median wall and CPU seconds (user + system of the command and its engine workers, from
  ``os.wait4``), peak RSS (the largest process), and whether the printed tables are the old
  tree's (every line but the caption's timings).

Load averages are printed before and after. Not part of the test run.

    .venv/bin/python benchmarks/bench_search_command.py --old /tmp/base [--repeats 5] [--only 8b] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {  # label: (model, GPUs, global batch, seq)
    "llama3-70b 1024 H100 GBS 1024": ("llama3-70b", 1024, 1024, 8192),
    "llama3-70b 1024 H100 GBS 128": ("llama3-70b", 1024, 128, 8192),
    "llama3-8b 64 H100 GBS 256": ("llama3-8b", 64, 256, 8192),
    "mixtral-8x7b 256 H100 GBS 512": ("mixtral-8x7b", 256, 512, 4096),
}
TIER = """
import json, sys, time
try:  # simulator/profile.py since issue 16's faces; calibration/profile.py in older trees
    from clustersim.simulator.profile import default_profile
except ImportError:
    from clustersim.simulator.calibration.profile import default_profile
from clustersim.simulator.search import search as S
from clustersim.simulator.search.bound import StepBound
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model
model, gpus, gbs, seq = json.loads(sys.argv[1])
model, training = get_model(model), TrainingSpec(seq_len=seq, global_batch_size=gbs)
cluster = get_cluster("dgx-h100", gpus)
prof = default_profile(cluster.accelerator.name)
try:
    from clustersim.simulator.search.grid import grid_bounds
except ImportError:
    grid_bounds = None
t0 = time.process_time()
if hasattr(S, "valid_columns"):  # the plan grid as numpy columns (issue 18, third stop)
    from clustersim.simulator.search.grid import column_bounds
    plans, _ = S.valid_columns(model, training, cluster)
    g = column_bounds(StepBound(model, training, cluster, prof), plans)
else:
    plans, _ = S._valid_plans(model, training, cluster, None)
    sb = StepBound(model, training, cluster, prof)
    if grid_bounds is None:
        bounds = [(sb.step_time(p), sb.static_memory(p)) for p in plans]
    else:
        g = grid_bounds(sb, plans)
print(json.dumps([len(plans), time.process_time() - t0]))
"""


def _scenario(folder: Path, label: str) -> Path:
    model, gpus, gbs, seq = SCENARIOS[label]
    path = folder / (label.replace(" ", "_") + ".yaml")
    path.write_text(f"name: bench\nmodel: {model}\ntraining: {{seq_len: {seq}, global_batch_size: {gbs}, precision: bf16}}\n"
                    f"cluster: {{preset: dgx-h100, num_gpus: {gpus}}}\nplan: {{tp: 8, pp: 1, dp: {gpus // 8}, sp: true}}\n")
    return path


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPATH")}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    env["COLUMNS"] = "200"
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float, str]:
    """(wall s, CPU s of the process and its waited-for children, peak RSS MB, stdout)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def _table(out: str) -> list[str]:
    """The printed tables without the caption lines that carry timings (they differ run to run)."""
    lines = out.splitlines()
    start = next((i for i, ln in enumerate(lines) if "#1 is the engine's best" in ln), len(lines))
    end = next((i for i in range(start, len(lines)) if "Pareto front" in lines[i]), len(lines))
    return [ln.rstrip() for ln in lines[:start] + lines[end:]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, default=Path("/tmp/base"), help="older checkout with its own .venv")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="", help="run only the scenarios whose label contains this text")
    ap.add_argument("--workers", type=int, default=0, help="this tree's --workers (0: one per core, at most 8)")
    args = ap.parse_args()
    trees = {"old": (str(args.old / ".venv/bin/python"), args.old), "new": (sys.executable, ROOT)}
    print(f"load average (1, 5, 15 min) before: {os.getloadavg()}, {os.cpu_count()} CPUs; {args.repeats} runs per tree, "
          f"alternating; new tree --workers {args.workers or min(os.cpu_count() or 1, 8)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        envs = {t: _env(folder / f"pyc-{t}") for t in trees}
        for t, (python, cwd) in trees.items():  # warm-up: fill the bytecode caches
            subprocess.run([python, "-c", "import clustersim.simulator.cli.search"], env=envs[t], cwd=cwd, check=True)
        for label in SCENARIOS:
            if args.only not in label:
                continue
            path = _scenario(folder, label)
            tier: dict[str, list[tuple[int, float]]] = {t: [] for t in trees}
            runs: dict[str, list[tuple[float, float, float, str]]] = {t: [] for t in trees}
            for _ in range(args.repeats):
                for t, (python, cwd) in trees.items():
                    out = subprocess.run([python, "-c", TIER, json.dumps(SCENARIOS[label])], env=envs[t], cwd=cwd,
                                         capture_output=True, text=True, check=True).stdout
                    tier[t].append(tuple(json.loads(out)))  # type: ignore[arg-type]
                    extra = ["--workers", str(args.workers)] if t == "new" else []
                    runs[t].append(_run([python, "-m", "clustersim.simulator.cli", "search", str(path), *extra],
                                        envs[t], cwd))
            print(label, flush=True)
            for t in trees:
                n, cpu = tier[t][0][0], statistics.median(c for _, c in tier[t])
                wall, ccpu = statistics.median(r[0] for r in runs[t]), statistics.median(r[1] for r in runs[t])
                print(f"  {t}: analytical tier {n:,} plans {cpu:.3f} s cpu = {n / cpu:,.0f} plans/s; "
                      f"command {wall:.2f} s wall {ccpu:.2f} s cpu {max(r[2] for r in runs[t]):.0f} MB", flush=True)
            same = all(_table(r[3]) == _table(runs["old"][0][3]) for r in runs["new"])
            print(f"  new/old: tier cpu {statistics.median(c for _, c in tier['new']) / statistics.median(c for _, c in tier['old']):.2f}, "
                  f"command wall {statistics.median(r[0] for r in runs['new']) / statistics.median(r[0] for r in runs['old']):.2f} "
                  f"cpu {statistics.median(r[1] for r in runs['new']) / statistics.median(r[1] for r in runs['old']):.2f}; "
                  f"printed tables identical to old: {same}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
