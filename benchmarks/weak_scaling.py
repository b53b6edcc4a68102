"""Weak scaling: the bundled weak-scaling series re-predicted, predicted growth against published.

    .venv/bin/python benchmarks/weak_scaling.py [--jitter CV ...] [--cv-dir DIR] [--ecmp adaptive|hash] [--overlap F]
        [--variability CV] [--latency path|nccl] [--jitter-law constant|pass_length] [--cited] [--decompose]

A series is one source, model, GPU type, per-GPU batch and parallel shape at >= 3 GPU counts
spanning >= 4x (``fidelity_sharing._weak_series``, all MosaicML llm-foundry tables). For each
``--jitter`` value (``sync_jitter_cv`` set on the default profile of the row's GPU type) and, with
``--cv-dir``, at the value the mosaicml fold fitted (``cv_notes.txt`` of
``clustersim validate --cross-validate family``: fitted without any MosaicML row), prints the growth in step time from the smallest to the largest count,
published and predicted, and whether the prediction is within a factor of 2. ``--variability``
sets ``gpu_variability_cv`` (static GPU-to-GPU speed variability over the job's GPUs; ``measured``:
``profile.GPU_VARIABILITY_CV_MEASURED``) on every profile; ``--latency`` sets ``collective_latency``
(``nccl``: NCCL's tuning model of latency and protocol, ``network.nccl_tuning``); ``--jitter-law``
sets ``sync_jitter_law`` (``pass_length``: the ``--jitter`` cv read as a 53.6 ms pass's, scaled per pass
by its length, ``step.jitter.pass_jitter_cv``). ``--cited``
starts from the fit's cited constants (``fit_params.with_cited_constants``: overlap slowdown,
flash2 factor), as every cross-validation fold's profile carries them;
``--overlap`` and ``--variability`` then override them only where given. ``--decompose`` prints
the predicted step at the smallest and largest count split into the Result's breakdown (compute,
exposed DP: communication and the waits for the slowest rank/GPU, optimizer, ...) and the wait's
share (``step.jitter``) of it.

Not part of the test run (a few minutes: two rows per series and value).
"""

from __future__ import annotations

import argparse
import os
import math
import time
from pathlib import Path

from clustersim.simulator.profile import GPU_VARIABILITY_CV_MEASURED, CalibrationProfile, default_profile
from clustersim.simulator.calibration.fit_params import with_cited_constants
from clustersim.simulator.calibration.validate import (SYSTEM_OF_PART, load_runs, part_of_row, scenario_for_row,
                                                       validate_row)
from clustersim.simulator.step import simulate_step
from clustersim.simulator.step.jitter import variability_wait_fraction

import fidelity_sharing  # the series definition, one place


def _profile(row: dict[str, object], cv: float, args: argparse.Namespace) -> CalibrationProfile:
    """The row's default profile (with the fit's cited constants under ``--cited``) and the fields set."""
    stem = SYSTEM_OF_PART[part_of_row(row)][1]
    prof = default_profile(stem)
    fields: dict[str, object] = {"sync_jitter_cv": cv, "ecmp_routing": args.ecmp, "collective_latency": args.latency,
                                 "sync_jitter_law": args.jitter_law}
    if args.cited:
        prof = with_cited_constants(prof, stem)
    if args.overlap is not None or not args.cited:
        f = args.overlap or 0.0
        fields["overlap_slowdown"] = {"all_gather": f, "reduce_scatter": f}
    if args.variability is not None or not args.cited:
        fields["gpu_variability_cv"] = _variability(args.variability)
    return prof.replace(**fields)


def _variability(value: str | None) -> float:
    return GPU_VARIABILITY_CV_MEASURED if value == "measured" else float(value or 0.0)


def _predict(row: dict[str, object], cv: float, cache: dict, args: argparse.Namespace) -> tuple[float, float]:
    """(predicted, measured) step time of ``row`` at ``_profile``; with ``--decompose`` its breakdown printed."""
    prof = _profile(row, cv, args)
    rec = validate_row(row, profile=prof, fidelity="flow", cache=cache)
    if rec["status"] != "ok":
        return float("nan"), float("nan")
    if args.decompose:
        _print_breakdown(row, rec, prof, cache)
    return float(rec["predicted_step_time_s"]), float(rec["measured_step_time_s"])


def _print_breakdown(row: dict[str, object], rec: dict, prof: CalibrationProfile, cache: dict) -> None:
    """The simulated plan's step split by the Result's breakdown (ms), and the static wait's share."""
    sc = scenario_for_row(row, cache, prof)
    res = simulate_step(sc.model, sc.training, sc.cluster, rec["_plan"], profile=prof, fidelity="flow")
    parts = " ".join(f"{k} {v * 1e3:.1f}" for k, v in res.breakdown.items() if abs(v) >= 5e-5)
    wait = variability_wait_fraction(rec["_plan"].world_size, prof.gpu_variability_cv)
    print(f"    {int(row['num_gpus']):4d} GPUs {rec['plan']}: step {res.step_time * 1e3:.1f} ms = {parts} ms "
          f"(static variability wait {wait * 100:.2f} % of compute)")


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
    ap.add_argument("--overlap", type=float, default=None, help="profile overlap_slowdown (both kinds); default 0")
    ap.add_argument("--variability", default=None, help="profile gpu_variability_cv, or 'measured'; default 0")
    ap.add_argument("--latency", choices=("path", "nccl"), default="path", help="profile collective_latency")
    ap.add_argument("--jitter-law", choices=("constant", "pass_length"), default="constant",
                    help="profile sync_jitter_law (pass_length: the cv per pass from its length, step.jitter)")
    ap.add_argument("--cited", action="store_true", help="start from the fit's cited constants (as the folds)")
    ap.add_argument("--decompose", action="store_true", help="print each end's breakdown")
    ap.add_argument("--runs", type=Path, default=None,
                    help="a runs CSV (default: the bundled table), e.g. workloads/data/published_runs_dgxc.csv")
    args = ap.parse_args()
    print(f"cited constants {args.cited}, jitter law {args.jitter_law}, gpu_variability_cv {args.variability}, ecmp {args.ecmp}, "
          f"overlap {args.overlap}, latency {args.latency}")
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    table = load_runs(args.runs)
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
    skipped = 0
    for ids in series:
        a, b = by_id[ids[0]], by_id[ids[-1]]
        cells, published = [], float("nan")
        ends = [(_predict(a, cv, cache, args), _predict(b, cv, cache, args)) for cv in values]
        if math.isnan(ends[0][0][0]) or math.isnan(ends[0][1][0]):
            skipped += 1  # an end the validator skips (no plan printed, no preset)
            continue
        for cv, ((pa, ma), (pb, mb)) in zip(values, ends):
            published, grow = (mb / ma - 1) * 100, (pb / pa - 1) * 100
            ok = grow > 0 and published / 2 <= grow <= published * 2
            within[cv] += ok
            cells.append(f"cv {cv:.3f}: {grow:+6.2f} %{' *' if ok else '  '}")
        print(f"{a['model']!s:10s} {a['gpu_type']!s:5s} {int(a['num_gpus']):4d} -> {int(b['num_gpus']):4d}: "
              f"published {published:+5.1f} % | " + " | ".join(cells))
    n = len(series) - skipped
    print(f"series {len(series)}, {skipped} with an end the validator skips")
    print("within a factor of 2 (*): " + ", ".join(f"cv {cv:.3f}: {k}/{n}" for cv, k in within.items()))
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
