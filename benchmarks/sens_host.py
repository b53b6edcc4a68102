"""Add the ``host`` column (``host_launch_time`` sensitivity) to an existing fit_sensitivities.csv.

    .venv/bin/python benchmarks/sens_host.py IN.csv OUT.csv [--workers N] [--moe-only]

The full sensitivity pass (``fit_defaults.sensitivities`` with every ``fit_params.PARAMS``)
simulates each row at the bundled profiles and once per perturbed parameter. A table taken before
``host`` was a parameter lacks that column; this runs the same function on the same rows with the
parameter list ("host",) only, so each row is simulated at its base (re-tuned plan) and at
host_launch_time + ``HOST_LAUNCH_PROBE``, and writes IN with the column added. The check that the
code path is the pass's own: every ok row's recomputed ``base`` must equal IN's ``base`` (relative
1e-9) and its status must agree; otherwise nothing is written (exit 1), since then the profiles or
the simulator differ from the ones IN was taken at. ``--moe-only`` simulates only the MoE rows
(``num_experts`` > 1 or arch_type moe) and gives every other row host = base: at f67468c none of
the 358 simulated non-MoE rows moves at the probe (the host binds only between a MoE dispatcher's
syncs, or where a whole pass's launches outlast its kernels, which no dense row reaches at 25 us);
the base check then covers the MoE rows only. Not part of the test run (minutes).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

from clustersim.simulator.calibration.fit_defaults import sensitivities
from clustersim.simulator.calibration.validate import load_runs
from clustersim.simulator.profile import PROFILE_DIR, load_profile


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: sens_host.py IN.csv OUT.csv [--workers N] [--moe-only]", file=sys.stderr)
        return 2
    src, dst = argv[0], argv[1]
    workers = int(argv[argv.index("--workers") + 1]) if "--workers" in argv else 1
    old = pd.read_csv(src)
    profiles = {p.stem: load_profile(p) for p in sorted(PROFILE_DIR.glob("*.yaml"))}
    runs = load_runs()
    ok_ids = set(old.row_id[old.status == "ok"].astype(int))
    subset = runs[runs.row_id.astype(int).isin(ok_ids)]
    if "--moe-only" in argv:
        experts = pd.to_numeric(subset.num_experts, errors="coerce").fillna(1.0)
        subset = subset[(subset.arch_type.astype(str).str.lower() == "moe") | (experts > 1)]
    start = time.perf_counter()
    new = sensitivities(subset, profiles, ("host",), workers=workers,
                        progress=lambda d, t: print(f"\r{d}/{t}", end="", file=sys.stderr, flush=True))
    print(f"\n{len(new)} rows simulated in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    merged = old.merge(new[["row_id", "status", "base", "host"]], on="row_id", how="left", suffixes=("", "_new"))
    ok = (merged.status == "ok") & merged.status_new.notna()
    bad_status = ok & (merged.status_new != "ok")
    diff = np.abs(merged.base_new - merged.base) / merged.base
    bad_base = ok & ~(diff <= 1e-9)
    if bad_status.any() or bad_base.any():
        print(f"{int(bad_status.sum())} rows changed status, {int(bad_base.sum())} rows' base differs "
              f"(largest {float(diff[ok].max()):.3g}): IN was not taken at these profiles/this simulator; nothing written",
              file=sys.stderr)
        return 1
    print(f"base reproduced on all {int(ok.sum())} ok rows (largest relative difference {float(diff[ok].max()):.2e}); "
          f"host moves {int((ok & (merged.host - merged.base > 1e-9 * merged.base)).sum())} rows", file=sys.stderr)
    merged["host"] = merged.host.where(ok, merged.base)  # rows not simulated (skipped, or --moe-only): no move
    merged.drop(columns=["status_new", "base_new"]).to_csv(dst, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
