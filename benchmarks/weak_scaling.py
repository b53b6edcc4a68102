"""Weak scaling: the bundled weak-scaling series re-predicted, predicted growth against published.

    .venv/bin/python benchmarks/weak_scaling.py [--jitter CV ...] [--cv-dir DIR] [--ecmp adaptive|hash] [--overlap F]
        [--variability CV] [--latency path|nccl]

A series is one source, model, GPU type, per-GPU batch and parallel shape at >= 3 GPU counts
spanning >= 4x (``fidelity_sharing._weak_series``, all MosaicML llm-foundry tables). For each
``--jitter`` value (``sync_jitter_cv`` set on the default profile of the row's GPU type) and, with
``--cv-dir``, at the value the mosaicml fold fitted (``cv_notes.txt`` of
``clustersim validate --cross-validate family``: fitted without any MosaicML row), prints the growth in step time from the smallest to the largest count,
published and predicted, and whether the prediction is within a factor of 2. ``--variability``
sets ``gpu_variability_cv`` (static GPU-to-GPU speed variability over the job's GPUs; ``measured``:
``profile.GPU_VARIABILITY_CV_MEASURED``) on every profile; ``--latency`` sets ``collective_latency``
(``nccl``: NCCL's tuning model of latency and protocol, ``network.nccl_tuning``).

Not part of the test run (a few minutes: two rows per series and value).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from clustersim.simulator.profile import GPU_VARIABILITY_CV_MEASURED, default_profile
from clustersim.simulator.calibration.validate import SYSTEM_OF_PART, load_runs, part_of_row, validate_row

import fidelity_sharing  # the series definition, one place


def _predict(row: dict[str, object], cv: float, cache: dict, ecmp: str, overlap: float,
             variability: float = 0.0, latency: str = "path") -> tuple[float, float]:
    """(predicted, measured) step time of ``row`` at its default profile with ``sync_jitter_cv``,
    ``ecmp_routing``, ``overlap_slowdown`` (all_gather and reduce_scatter) and ``gpu_variability_cv`` set."""
    prof = default_profile(SYSTEM_OF_PART[part_of_row(row)][1]).replace(
        sync_jitter_cv=cv, ecmp_routing=ecmp, overlap_slowdown={"all_gather": overlap, "reduce_scatter": overlap},
        gpu_variability_cv=variability, collective_latency=latency)
    rec = validate_row(row, profile=prof, fidelity="flow", cache=cache)
    if rec["status"] != "ok":
        return float("nan"), float("nan")
    return float(rec["predicted_step_time_s"]), float(rec["measured_step_time_s"])


def _fold_cv(cv_dir: Path | None) -> float | None:
    """The mosaicml fold's fitted ``sync_jitter_cv`` (its line of ``cv_notes.txt``), or None."""
    if cv_dir is None:
        return None
    for line in (cv_dir / "cv_notes.txt").read_text().splitlines():
        if line.startswith("[mosaicml] sync_jitter_cv = "):
            return float(line.split("=")[1].split()[0])
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jitter", type=float, nargs="*", default=[0.0, 0.05, 0.1])
    ap.add_argument("--cv-dir", type=Path, default=None)
    ap.add_argument("--ecmp", choices=("adaptive", "hash"), default="adaptive", help="profile ecmp_routing")
    ap.add_argument("--overlap", type=float, default=0.0, help="profile overlap_slowdown (both kinds)")
    ap.add_argument("--variability", default="0", help="profile gpu_variability_cv, or 'measured'")
    ap.add_argument("--latency", choices=("path", "nccl"), default="path", help="profile collective_latency")
    args = ap.parse_args()
    variability = GPU_VARIABILITY_CV_MEASURED if args.variability == "measured" else float(args.variability)
    print(f"gpu_variability_cv {variability}, ecmp {args.ecmp}, overlap {args.overlap}, latency {args.latency}")
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    table = load_runs()
    by_id = {int(r["row_id"]): {str(k): v for k, v in r.items()} for r in table.to_dict("records")}
    values = list(args.jitter)
    fold = _fold_cv(args.cv_dir)
    if fold is not None:
        values.append(fold)
        print(f"mosaicml fold's fitted sync_jitter_cv: {fold}")
    cache: dict = {}
    t0 = time.perf_counter()
    within = dict.fromkeys(values, 0)
    series = fidelity_sharing._weak_series(table)
    for ids in series:
        a, b = by_id[ids[0]], by_id[ids[-1]]
        cells, published = [], float("nan")
        for cv in values:
            (pb, mb), (pa, ma) = (_predict(b, cv, cache, args.ecmp, args.overlap, variability, args.latency),
                                  _predict(a, cv, cache, args.ecmp, args.overlap, variability, args.latency))
            published, grow = (mb / ma - 1) * 100, (pb / pa - 1) * 100
            ok = grow > 0 and published / 2 <= grow <= published * 2
            within[cv] += ok
            cells.append(f"cv {cv:.3f}: {grow:+6.2f} %{' *' if ok else '  '}")
        print(f"{a['model']!s:10s} {a['gpu_type']!s:5s} {int(a['num_gpus']):4d} -> {int(b['num_gpus']):4d}: "
              f"published {published:+5.1f} % | " + " | ".join(cells))
    print("within a factor of 2 (*): " + ", ".join(f"cv {cv:.3f}: {n}/{len(series)}" for cv, n in within.items()))
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
