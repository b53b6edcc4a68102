"""Out-of-sample residuals of a cross-validation run by family, GPU type, regime and precision recipe.

    .venv/bin/python benchmarks/cv_residuals.py CV_DIR [CV_DIR_AFTER]

Reads ``cv_rows.csv`` (``clustersim validate --cross-validate family --cv-dir``) and, with two
directories, prints both side by side: MAPE and bias (signed mean, %) of the held-out error per
held-out family, per GPU type, per dense/MoE/hybrid regime, per (GPU type, regime, precision recipe)
of the Megatron-Bridge rows; rows beyond 40 %, plans predicted out of memory, and the interval
coverage (``cv_coverage.csv``). The precision recipe is ``validate_rules.precision_of``'s label.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from clustersim.simulator.calibration.validate import load_runs
from clustersim.simulator.calibration.validate_rules import SkipRow, precision_of


def _recipe(row: dict[str, object]) -> str:
    try:
        precision, label = precision_of(row, [])
    except SkipRow:
        return "?"
    return label or precision


def _load(cv_dir: Path) -> pd.DataFrame:
    rows = pd.read_csv(cv_dir / "cv_rows.csv")
    runs = load_runs()
    recipe = {int(r["row_id"]): _recipe({str(k): v for k, v in r.items()}) for r in runs.to_dict("records")}
    return rows.assign(recipe=rows.row_id.map(recipe))


def _stats(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    g = frame.groupby(by).error_out_pct
    return pd.DataFrame({"rows": g.size(), "mape": g.apply(lambda e: e.abs().mean()), "bias": g.mean()}).round(2)


def report(dirs: list[Path]) -> None:
    frames = [_load(d) for d in dirs]
    for by in (["family"], ["group"], ["regime"]):
        print(pd.concat([_stats(f, by) for f in frames], axis=1, keys=[d.name for d in dirs]).to_string(), "\n")
    mb = [f[f.family == "megatron-bridge"] for f in frames]
    print(pd.concat([_stats(f, ["group", "regime", "recipe"]) for f in mb], axis=1,
                    keys=[d.name for d in dirs]).to_string(), "\n")
    for d, f in zip(dirs, frames):
        cov = pd.read_csv(d / "cv_coverage.csv")
        cov = cov[cov.family == "all"]
        print(f"{d.name}: all {f.error_out_pct.abs().mean():.2f} %, in-sample {f.error_in_pct.abs().mean():.2f} %, "
              f"beyond 40 %: {int((f.error_out_pct.abs() > 40).sum())}, predicted OOM: {int(f.predicted_oom.sum())}, "
              "coverage " + ", ".join(f"{r.level:.0%} {100 * r.coverage:.1f}" for r in cov.itertuples()))


if __name__ == "__main__":
    report([Path(a) for a in sys.argv[1:]])
