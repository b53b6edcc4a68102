"""Splice the cited GPU-to-GPU variability into an existing ``fit_sensitivities.csv``.

    .venv/bin/python benchmarks/variability_sensitivities.py OLD/fit_sensitivities.csv OUT_DIR [--workers 1]
        [--field gpu_variability_cv|sync_jitter_cv] [--cv CV] [--jitter-law constant|pass_length]

``benchmarks/cv_variability.py measured`` sets ``gpu_variability_cv = profile.GPU_VARIABILITY_CV_MEASURED``
in every fold's profiles; a sensitivity pass taken without it linearises every row at a step time
without the wait for the job's slowest GPU, so each fold's fit cannot absorb the wait. Use the
spliced file as ``--sensitivities`` of that run. Instead of a fresh pass (fifteen
simulations per row) this simulates each row's base once with the constant set, at the bundled
profiles with the current code (``fit_defaults.sensitivities`` with no parameter), and writes
OUT_DIR/fit_sensitivities.csv = the old file with, per ``ok`` row, r = (base with the constant) /
(old base): the base and the compute parameters' columns (GEMM points, attention, memory, kernel
overhead, experts, FP8, FP4: the wait is a fraction of compute, so it scales with them) multiplied by r, the
others (link, jitter) shifted by the base's change (their perturbation moves communication or the
jitter's own wait, which the static wait does not scale). Rows not ``ok`` in both are left as they
were. ``--field sync_jitter_cv`` splices the per-pass jitter instead (default cv
``profile.SYNC_JITTER_CV_MEASURED``, 0.0209, one H200), for ``benchmarks/cv_override.validate_with(...,
sync_jitter_cv=0.0209)``: each fold's fit then sees every row's step with the jitter's exact wait
(the jit column's secant from 0 to 0.1 overstates the wait at 0.0209 by 3-10 %, more at more ranks).
Not part of the test run (one validation pass: minutes).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from clustersim.files import write_atomic
from clustersim.simulator.calibration.fit_defaults import sensitivities
from clustersim.simulator.calibration.fit_params import PARAMS
from clustersim.simulator.calibration.validate import load_runs
from clustersim.simulator.profile import GPU_VARIABILITY_CV_MEASURED, PROFILE_DIR, SYNC_JITTER_CV_MEASURED, load_profile

SHIFTED = ("link", "jit")
"""Columns moved by the base's change, not scaled: their perturbation is not compute."""


def splice(old: pd.DataFrame, base_with: pd.Series) -> pd.DataFrame:
    """``old`` with each ok row's columns moved to the base ``base_with`` (row_id -> seconds)."""
    out = old.copy()
    new = old.row_id.map(base_with)
    ok = old.status.eq("ok") & new.notna() & (old.base > 0)
    ratio = (new / old.base).where(ok, 1.0)
    for col in [c for c in PARAMS if c in old.columns and c not in SHIFTED]:
        out[col] = old[col] * ratio
    for col in [c for c in SHIFTED if c in old.columns]:
        out[col] = old[col] + (old.base * ratio - old.base)
    out["base"] = old.base * ratio
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--field", choices=("gpu_variability_cv", "sync_jitter_cv"), default="gpu_variability_cv")
    ap.add_argument("--cv", type=float, default=None, help="the field's value (default: its measured constant)")
    ap.add_argument("--jitter-law", choices=("constant", "pass_length"), default="constant",
                    help="sync_jitter_law of the profiles the bases are simulated at")
    ap.add_argument("--bases", type=Path, default=None, help="bases_with_<field>.csv of an earlier run")
    args = ap.parse_args()
    if args.cv is None:
        args.cv = GPU_VARIABILITY_CV_MEASURED if args.field == "gpu_variability_cv" else SYNC_JITTER_CV_MEASURED
    bases = "bases_with_variability.csv" if args.field == "gpu_variability_cv" else f"bases_with_{args.field}.csv"
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.bases is not None:
        new = pd.read_csv(args.bases).set_index("row_id")
    else:
        profiles = {p.stem: load_profile(p).replace(**{args.field: args.cv},
                                                     sync_jitter_law=args.jitter_law) for p in sorted(PROFILE_DIR.glob("*.yaml"))}
        t0 = time.perf_counter()
        new = sensitivities(load_runs(), profiles, (), workers=args.workers).set_index("row_id")
        print(f"bases of {len(new)} rows with {args.field} = {args.cv} ({args.jitter_law}) in {time.perf_counter() - t0:.0f} s")
        write_atomic(args.out / bases, new.to_csv())
    if not args.old.exists():
        print(f"{args.old} not there yet: bases written, rerun with --bases")
        return
    old = pd.read_csv(args.old)
    merged = splice(old, new.base.where(new.status.eq("ok")))
    write_atomic(args.out / "fit_sensitivities.csv", merged.to_csv(index=False))
    rel = (merged.base / old.base - 1)[old.status.eq("ok")] * 100
    print(f"base moved: mean {rel.mean():+.2f} %, min {rel.min():+.2f} %, max {rel.max():+.2f} %")


if __name__ == "__main__":
    main()
