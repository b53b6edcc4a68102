"""Benchmark: whole ``clustersim`` commands, this tree against an older checkout, side by side.

Each command runs in a fresh process; old and new alternate run by run so both see the same
machine load, which is printed before and after (``os.getloadavg``). Per command and tree: the
median wall seconds and median CPU seconds (user + system of the child, from ``os.wait4``: less
sensitive to the other processes on the machine than wall time) of ``--repeats`` runs, the peak
RSS, and the new/old ratio of both medians. Both trees run with a bytecode cache (each in its own
``PYTHONPYCACHEPREFIX``, filled by one warm-up run; as an installed package runs), or, with
``--no-bytecode``, compiling every module on every start (``PYTHONDONTWRITEBYTECODE``).

Rows: the CLI import time (``python -X importtime``, the CLI module's cumulative figure) and the
heavy libraries it loads; ``--help``; ``simulate`` of the small example (llama3-70b on 64 H100);
llama3-70b on 64 H100 with 8 and with 8,192 micro-batches (seq 2k, tp8 pp8 dp1; the ratio of the two
whole commands' wall medians is printed: issue 18 wants it within 2x); llama3-405b on
16,384 H100 (tp8 pp16 dp128, GBS 2,048 x 8k), static and with time-shared flows (``--fabric-sharing flows``:
issue 18 wants it under 1.5 s); ``collective --kind all_to_all`` on 16,384 GPUs.
Not part of the test run.

    .venv/bin/python benchmarks/bench_cli_startup.py --old /tmp/base [--repeats 5] [--only 405b] [--skip flows]

``--old`` is a checkout of the same layout with its own ``.venv`` (``.venv/bin/python``).
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
MODULE = "clustersim.simulator.cli.app"
SCENARIOS = {
    "70b-8mb": ("llama3-70b", "{seq_len: 2048, global_batch_size: 8, precision: bf16}", 64,
                "{tp: 8, pp: 8, dp: 1, micro_batch: 1, schedule: 1f1b, sp: true, zero: 1, recompute: selective}"),
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


def _env(cache: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPATH")}
    if cache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MB, exit status) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def _import_s(python: str, env: dict[str, str], cwd: Path) -> tuple[float, list[str]]:
    """Cumulative import seconds of the CLI module and the heavy libraries it loaded."""
    code = f"import sys, {MODULE}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([python, "-X", "importtime", "-c", code], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True)
    line = [ln for ln in out.stderr.splitlines() if ln.rstrip().endswith(f"| {MODULE}")][-1]
    return int(line.split("|")[1]) / 1e6, out.stdout.split()


def _row(label: str, runs: dict[str, list[tuple[float, float, float, int]]]) -> dict[str, float]:
    med = {t: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs), max(r[2] for r in rs),
               max(abs(r[3]) for r in rs)) for t, rs in runs.items()}
    cells = "  ".join(f"{t} {w:6.2f} s wall {c:6.2f} s cpu {m:5.0f} MB rc {rc}" for t, (w, c, m, rc) in med.items())
    ratio = (f"  new/old wall {med['new'][0] / med['old'][0]:.2f} cpu {med['new'][1] / med['old'][1]:.2f}"
             if len(med) == 2 else "")
    print(f"{label:44s} {cells}{ratio}", flush=True)
    return {t: w for t, (w, _, _, _) in med.items()}


def _loop_s() -> float:
    """Seconds of a fixed pure-Python loop in a fresh process (median of 3): a reference for the host's
    speed, since the hosts this runs on differ by up to 2x in it from one session to the next."""
    code = "import time\nt = time.perf_counter()\ns = 0\nfor i in range(10_000_000):\n    s += i\nprint(time.perf_counter() - t)"
    return statistics.median(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                  check=True).stdout) for _ in range(3))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, default=Path("/tmp/base"), help="older checkout with its own .venv")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-bytecode", action="store_true", help="compile every module on every start")
    ap.add_argument("--only", default="", help="run only the commands whose label contains this text")
    ap.add_argument("--skip", default=None, help="leave out the commands whose label contains this text "
                    "(e.g. 'flows' against a tree without time-shared flows)")
    args = ap.parse_args()
    trees = {"new": (sys.executable, ROOT)}
    if (args.old / ".venv/bin/python").exists():
        trees = {"old": (str(args.old / ".venv/bin/python"), args.old), **trees}
    print(f"host speed: {_loop_s():.2f} s for a 10M-iteration Python loop (the same code's command times "
          "scale with it from one host to the next)", flush=True)
    print(f"load average (1, 5, 15 min) before: {os.getloadavg()}, {os.cpu_count()} CPUs; "
          f"bytecode cache: {not args.no_bytecode}; {args.repeats} runs per tree, alternating", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        envs = {t: _env(None if args.no_bytecode else folder / f"pyc-{t}") for t in trees}
        for t, (python, cwd) in trees.items():  # warm-up: fill the bytecode caches
            subprocess.run([python, "-c", f"import {MODULE}"], env=envs[t], cwd=cwd, check=True)
        imports: dict[str, list[float]] = {t: [] for t in trees}
        for _ in range(args.repeats):
            for t, (python, cwd) in trees.items():
                imports[t].append(_import_s(python, envs[t], cwd)[0])
        for t, (python, cwd) in trees.items():
            print(f"{t} import {MODULE}: median {statistics.median(imports[t]):.3f} s, min {min(imports[t]):.3f} s, "
                  f"loads {_import_s(python, envs[t], cwd)[1]}")
        if len(trees) == 2:
            print(f"import new/old: median {statistics.median(imports['new']) / statistics.median(imports['old']):.2f}")
        commands = {
            "--help": ["--help"],
            "simulate examples/llama3_70b_h100.yaml": ["simulate", str(ROOT / "examples/llama3_70b_h100.yaml")],
            "simulate 70b 64 H100, 8 micro-batches": ["simulate", str(_scenario(folder, "70b-8mb"))],
            "simulate 70b 64 H100, 8,192 micro-batches": ["simulate", str(_scenario(folder, "70b-8192mb"))],
            "simulate 405b 16,384 H100": ["simulate", str(_scenario(folder, "405b-16k"))],
            "simulate 405b 16,384 H100, flows": ["simulate", str(_scenario(folder, "405b-16k")), "--fabric-sharing", "flows"],
            "collective --gpus 16384 --kind all_to_all": ["collective", "--gpus", "16384", "--kind", "all_to_all"],
        }
        walls: dict[str, dict[str, float]] = {}
        for label, argv in commands.items():
            if args.only not in label or (args.skip and args.skip in label):
                continue
            runs: dict[str, list[tuple[float, float, float, int]]] = {t: [] for t in trees}
            for _ in range(args.repeats):
                for t, (python, cwd) in trees.items():
                    runs[t].append(_run([python, "-m", "clustersim.simulator.cli", *argv], envs[t], cwd))
            walls[label] = _row(label, runs)
        few, many = (walls.get(f"simulate 70b 64 H100, {n} micro-batches") for n in ("8", "8,192"))
        if few and many:  # issue 18: the whole command's wall time flat from 8 to 8,192 micro-batches within 2x
            print("  ".join(f"{t} command wall 8,192 / 8 micro-batches {many[t] / few[t]:.2f}" for t in few))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
