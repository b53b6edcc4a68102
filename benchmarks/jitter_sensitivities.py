"""Add the ``jit`` (``sync_jitter_cv``) sensitivity to an existing ``fit_sensitivities.csv``.

    .venv/bin/python benchmarks/jitter_sensitivities.py OLD/fit_sensitivities.csv OUT_DIR [--workers 2]

The cross-validation (``clustersim validate --cross-validate family --sensitivities CSV``) reuses
sensitivities taken before a model change and re-simulates every prediction with the current code
(docs/VALIDATION.md, "Results"). A new fitted field needs its own column: this runs the project's
``fit_defaults.sensitivities`` for ``("jit",)`` only, at the bundled profiles with the current code
(two simulations per row instead of the full pass's fifteen), and writes OUT_DIR/fit_sensitivities.csv
= the old file plus ``jit`` = old base + (step time with cv raised by ``JITTER_STEP`` - base, both
simulated now), i.e. the slope measured now on the old linearisation point. Rows not ``ok`` in both
get ``jit`` = base (no sensitivity). Not part of the test run (minutes).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from clustersim.files import write_atomic
from clustersim.simulator.calibration.fit_defaults import sensitivities
from clustersim.simulator.profile import PROFILE_DIR, load_profile
from clustersim.simulator.calibration.validate import load_runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    old = pd.read_csv(args.old)
    profiles = {p.stem: load_profile(p) for p in sorted(PROFILE_DIR.glob("*.yaml"))}
    t0 = time.perf_counter()
    new = sensitivities(load_runs(), profiles, ("jit",), workers=args.workers).set_index("row_id")
    print(f"jit sensitivities of {len(new)} rows in {time.perf_counter() - t0:.0f} s")
    ok = new.status.eq("ok")
    slope = (new.jit - new.base).where(ok, 0.0)
    merged = old.copy()
    merged["jit"] = merged.base + merged.row_id.map(slope).fillna(0.0)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "fit_sensitivities.csv", merged.to_csv(index=False))
    rel = (slope[ok] / new.base[ok] * 100)
    print(f"step time added by cv +0.1: mean {rel.mean():.2f} %, min {rel.min():.2f} %, max {rel.max():.2f} %")


if __name__ == "__main__":
    main()
