"""The held-out figure of the Megatron-Bridge MoE and hybrid rows in seconds, not a sensitivity pass.

    .venv/bin/python benchmarks/cv_moe_probe.py SENS.csv CV_ROWS.csv [--regimes moe,hybrid] [--out OUT.csv]

Every MoE and hybrid row of the bundled table is in the Megatron-Bridge family, so when that family
is held out, its fold is fitted on the other families' rows only, whose sensitivities a change that
touches nothing but the MoE path (routed experts, dispatch, the fused grouped MLP) leaves as they
are. This script fits that one fold from SENS.csv (the ``fit_sensitivities.csv`` of a pass of the
tree before the change, ``clustersim validate --fit-profiles DIR``) exactly as ``clustersim validate
--cross-validate family`` does (``fit_crossval.fit_fold``) and re-simulates the rows of the given
regimes at it with the working tree's code: for such a change, the same held-out predictions as a
fresh pass and cross-validation would give (checked: main's own rows of CV_ROWS.csv come back to
the last digit). It says nothing about the other families' rows (a fresh pass does); a change that
moves a dense row needs the pass. Prints each row's error, then MAPE, bias and rows beyond 40 %,
before (CV_ROWS.csv's ``error_out_pct``) and after. Not part of the test run (15-30 s).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from clustersim.simulator.calibration.fit_crossval import fit_fold
from clustersim.simulator.calibration.fit_defaults import profile_key
from clustersim.simulator.calibration.validate import family_of, load_runs, validate_row
from clustersim.simulator.profile import PROFILE_DIR, CalibrationProfile, load_profile

FAMILY = "megatron-bridge"


def fold_profiles(sens_csv: Path) -> dict[str, CalibrationProfile]:
    """The held-out Megatron-Bridge fold's profiles, fitted from the stored sensitivities."""
    profiles = {p.stem: load_profile(p) for p in sorted(PROFILE_DIR.glob("*.yaml"))}
    sens = pd.read_csv(sens_csv)
    ok = sens[sens.status == "ok"].reset_index(drop=True)
    fam = ok.source_id.astype(str).map(family_of).to_numpy()
    return dict(fit_fold(ok, profiles, fam != FAMILY, family=FAMILY).profiles)


def _summary(name: str, errors: np.ndarray) -> str:
    return (f"{name}: rows {len(errors)}, MAPE {np.abs(errors).mean():.2f} %, bias {errors.mean():+.2f} %, "
            f"beyond 40 % {int((np.abs(errors) > 40).sum())}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sensitivities", type=Path)
    ap.add_argument("cv_rows", type=Path)
    ap.add_argument("--regimes", default="moe,hybrid")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    profs = fold_profiles(args.sensitivities)
    cv = pd.read_csv(args.cv_rows)
    cv = cv[(cv.family == FAMILY) & cv.regime.isin(args.regimes.split(","))]
    runs = {int(r["row_id"]): {str(k): v for k, v in r.items()} for r in load_runs().to_dict("records")}
    records = []
    for r in cv.to_dict("records"):
        row = runs[int(r["row_id"])]
        key = profile_key(str(row["gpu_type"]), list(profs))
        if key is None:
            print(f"row {r['row_id']}: no profile for gpu_type {row['gpu_type']!r}", file=sys.stderr)
            return 2
        rec = validate_row(row, profile=profs[key], cache={})
        records.append({"row_id": r["row_id"], "regime": r["regime"], "gpu_type": row["gpu_type"],
                        "model": row["model"], "measured_s": r["measured_s"], "before_pct": r["error_out_pct"],
                        "after_pct": rec["error_pct"], "held_out_s": rec["predicted_step_time_s"]})
        print(f"{r['row_id']:>4} {str(row['model'])[:22]:22s} {row['gpu_type']:6s} "
              f"{r['error_out_pct']:+7.1f} -> {rec['error_pct']:+7.1f} %", flush=True)
    out = pd.DataFrame(records)
    for regime, g in out.groupby("regime"):
        print(_summary(f"{regime} before", g.before_pct.to_numpy(float)))
        print(_summary(f"{regime} after ", g.after_pct.to_numpy(float)))
    if args.out is not None:
        out.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
