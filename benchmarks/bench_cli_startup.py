"""Benchmark: whole ``clustersim`` commands, this tree against an older checkout, side by side.

Each command runs in a fresh process (median wall seconds of ``--repeats`` runs, peak RSS of
the child from ``os.wait4``), alternating old and new so both see the same machine load, which
is printed first (``os.getloadavg``). Rows: ``--help``; the CLI import time (``python -X
importtime``, the CLI module's cumulative figure) and which heavy libraries it loads; ``simulate``
of the small example (llama3-70b on 64 H100); llama3-70b on 64 H100 with 8,192 micro-batches
(seq 2k, GBS 8,192, tp8 pp8 dp1); llama3-405b on 16,384 H100 (tp8 pp16 dp128, GBS 2,048 x 8k);
``collective --kind all_to_all`` on 16,384 GPUs. Not part of the test run.

    .venv/bin/python benchmarks/bench_cli_startup.py --old /tmp/old [--repeats 3] [--skip-old-slow]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "dask", "pyarrow", "torch", "networkx")
SCENARIOS = {
    "70b-8192mb": ("llama3-70b", "{seq_len: 2048, global_batch_size: 8192, precision: bf16}", 64,
                   "{tp: 8, pp: 8, dp: 1, micro_batch: 1, schedule: 1f1b, sp: true, zero: 1, recompute: selective}"),
    "405b-16k": ("llama3-405b", "{seq_len: 8192, global_batch_size: 2048, precision: bf16}", 16384,
                 "{tp: 8, pp: 16, dp: 128, micro_batch: 1, schedule: 1f1b, sp: true, zero: 1, recompute: full}"),
}


def _scenario(folder: Path, key: str) -> Path:
    model, training, gpus, plan = SCENARIOS[key]
    path = folder / f"{key}.yaml"
    path.write_text(f"name: {key}\nmodel: {model}\ntraining: {training}\n"
                    f"cluster: {{preset: dgx-h100, num_gpus: {gpus}}}\nplan: {plan}\n")
    return path


def _tree(name: str, old: Path | None) -> tuple[list[str], dict[str, str], str]:
    """(command prefix, environment, CLI module) of the old checkout or this tree."""
    env = dict(os.environ)
    if name == "old":
        env["PYTHONPATH"] = str(old)
        return [sys.executable, "-m", "simulator.cli"], env, "simulator.cli"
    return [sys.executable, "-m", "clustersim.simulator.cli"], env, "clustersim.simulator.cli.app"


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit status) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def _import_s(module: str, env: dict[str, str], cwd: Path) -> tuple[float, list[str]]:
    """Cumulative import seconds of ``module`` and the heavy libraries it loaded."""
    code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True)
    line = [ln for ln in out.stderr.splitlines() if ln.rstrip().endswith(f"| {module}")][-1]
    return int(line.split("|")[1]) / 1e6, out.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, default=Path("/tmp/old"), help="older checkout (flat simulator/ layout)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-old-slow", action="store_true", help="run the old tree once on its slow cases")
    args = ap.parse_args()
    trees = ["old", "new"] if args.old.exists() else ["new"]
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in trees:
            prefix, env, module = _tree(name, args.old)
            cwd = args.old if name == "old" else ROOT
            secs = statistics.median(_import_s(module, env, cwd)[0] for _ in range(args.repeats))
            print(f"{name:3s} import {module}: {secs:.3f} s, loads {_import_s(module, env, cwd)[1]}")
        commands = {
            "--help": ["--help"],
            "simulate examples/llama3_70b_h100.yaml": ["simulate", str(ROOT / "examples/llama3_70b_h100.yaml")],
            "simulate llama3-70b 64 H100, 8,192 micro-batches": ["simulate", str(_scenario(folder, "70b-8192mb"))],
            "simulate llama3-405b 16,384 H100": ["simulate", str(_scenario(folder, "405b-16k"))],
            "collective --gpus 16384 --kind all_to_all": ["collective", "--gpus", "16384", "--kind", "all_to_all"],
        }
        print(f"{'command':52s} {'tree':4s} {'wall_s':>8s} {'rss_MB':>7s} {'rc':>3s}")
        for label, argv in commands.items():
            for name in trees:
                prefix, env, _ = _tree(name, args.old)
                slow = name == "old" and args.skip_old_slow and ("8,192" in label or "all_to_all" in label)
                cwd = args.old if name == "old" else ROOT  # `python -m simulator.cli` resolves from the cwd
                runs = [_run(prefix + argv, env, cwd) for _ in range(1 if slow else args.repeats)]
                wall = statistics.median(r[0] for r in runs)
                print(f"{label:52s} {name:4s} {wall:8.2f} {max(r[1] for r in runs):7.0f} {runs[-1][2]:3d}", flush=True)


if __name__ == "__main__":
    main()
