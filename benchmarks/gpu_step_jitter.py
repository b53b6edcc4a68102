"""Pass-to-pass jitter of one GPU's compute (issue 14): the input of the dynamic max over ranks.

A synchronous data-parallel step waits at every collective for the slowest rank's pass; the
simulator's ``sync_jitter_cv`` is the coefficient of variation of one rank's pass time. This
runs the same fixed chunk of bf16 GEMMs (a stand-in for a layer stack's forward and backward) many
times back to back on one GPU and times each chunk with CUDA events, then prints its median, cv,
p99/median and max/median, the first-vs-last drift (clocks settling under sustained power), and
the expected maximum of N independent draws from the measured distribution (N = 8 ... 1024,
by resampling with a seeded numpy Generator). Usage::

    python3 benchmarks/gpu_step_jitter.py OUT.csv [--passes 400]

Writes one row per timed chunk (size, index, seconds). One GPU cannot show what differs between
GPUs (static variability) or what the network adds; it is the floor of the per-pass jitter.
"""

from __future__ import annotations

import argparse
import csv
import statistics

import numpy as np
import torch


def run(out: str, passes: int) -> None:
    dev = torch.device("cuda")
    rows = open(out, "w", newline="")
    w = csv.writer(rows)
    w.writerow(["chunk", "gemms", "m", "index", "seconds"])
    rng = np.random.default_rng(0)
    for name, m, gemms in (("4ms", 4096, 8), ("35ms", 8192, 32)):
        a = torch.randn(m, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

        def chunk() -> None:
            for _ in range(gemms):
                a @ b
        for _ in range(20):
            chunk()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(passes)]
        for s, e in events:
            s.record()
            chunk()
            e.record()
        torch.cuda.synchronize()
        t = np.array([s.elapsed_time(e) * 1e-3 for s, e in events])
        for i, x in enumerate(t):
            w.writerow([name, gemms, m, i, f"{x:.6e}"])
        med = float(np.median(t))
        k = max(1, passes // 8)
        line = (f"{name}: median {med * 1e3:.3f} ms, cv {t.std() / t.mean():.4f}, p99/median "
                f"{np.quantile(t, 0.99) / med:.4f}, max/median {t.max() / med:.4f}, "
                f"last/first eighth {statistics.median(t[-k:]) / statistics.median(t[:k]):.4f}; E[max of N]/mean:")
        for n in (8, 64, 512, 1024):
            draws = rng.choice(t, size=(2000, n), replace=True)
            line += f" N={n} {draws.max(axis=1).mean() / t.mean():.4f}"
        print(line, flush=True)
    rows.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--passes", type=int, default=400)
    args = p.parse_args()
    run(args.out, args.passes)
