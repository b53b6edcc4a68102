"""``clustersim validate --cross-validate family``: the out-of-sample report and its files.

Owns the pipeline of the option (one sensitivity pass or a cached one, the family folds, the
coverage of the intervals), the files it writes into ``--cv-dir`` and the tables it prints. The
protocol is ``clustersim.simulator.calibration.fit_crossval``, the intervals
``clustersim.simulator.intervals``; ``clustersim.simulator.cli.validate`` calls it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from clustersim.files import write_atomic
from clustersim.simulator.calibration.fit_crossval import CrossValidation, FoldFit, cross_validate_families
from clustersim.simulator.calibration.fit_defaults import sensitivities
from clustersim.simulator.interval_fit import coverage_by_family, interval_table, write_intervals
from clustersim.simulator.calibration import transferred_coverage, transferred_table
from clustersim.simulator.profile import PROFILE_DIR, CalibrationProfile, load_profile
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.network import Fidelity

INTERVALS_HEADER = (
    "Prediction intervals of the step time, per regime (model kind / GPU generation): split-conformal\n"
    "bounds on measured / predicted from the held-out residuals of `clustersim validate --cross-validate\n"
    "family` (simulator/calibration/fit_crossval.py, intervals.py) on workloads/data/published_runs.csv.\n"
    "ratio_80 / ratio_90: [low, high] multipliers of a prediction. Method and coverage: docs/VALIDATION.md.")


def run_cross_validation(console: Console, errors: Console, table: pd.DataFrame, fidelity: Fidelity, workers: int,
                         progress: bool, out_dir: Path, sens_csv: Path | None, hold_shared: bool = False,
                         by: str = "family", rounds: int = 1) -> CrossValidation:
    """Sensitivities (cached or one pass), the folds, coverage; files into ``out_dir``; tables printed.
    ``by`` "gpu": leave-one-GPU-type-out, its own table and files (``_write_gpu``): no intervals nor
    coverage, which are calibrated on held-out families."""
    profiles = {p.stem: load_profile(p) for p in sorted(PROFILE_DIR.glob("*.yaml"))}
    start = time.perf_counter()
    with Progress(console=errors, disable=not progress, transient=True) as bar:
        if sens_csv is not None:
            if not sens_csv.exists():
                raise ClusterSimError(f"--sensitivities {sens_csv} does not exist; pass a fit_sensitivities.csv")
            sens = pd.read_csv(sens_csv)
        else:
            task = bar.add_task("sensitivities", total=len(table))
            sens = sensitivities(table, profiles, fidelity=fidelity, workers=workers,
                                 progress=lambda d, _t: bar.update(task, completed=d))
        t_sens = time.perf_counter() - start
        task2 = bar.add_task("held-out re-simulation", total=int((sens.status == "ok").sum()))
        cv = cross_validate_families(table, sens, profiles, fidelity=fidelity, workers=workers,
                                     progress=lambda d, _t: bar.update(task2, completed=d),
                                     reuse=_fit_run(sens_csv), on_folds=lambda fr, folds: _write_folds(out_dir, fr, folds),
                                     hold_shared=hold_shared, by=by, rounds=rounds, round_progress=pass_ticker(bar, "fold fit"))
    if by == "gpu":
        moved = transferred_coverage(cv.rows)
        _write_gpu(out_dir, cv, moved, sens if sens_csv is None else None)
        _print_gpu(console, cv, moved, t_sens, time.perf_counter() - start - t_sens, out_dir)
        return cv
    coverage = coverage_by_family(cv.rows)
    _write(out_dir, cv, coverage, sens if sens_csv is None else None)
    _print(console, cv, coverage, t_sens, time.perf_counter() - start - t_sens, out_dir)
    return cv


def pass_ticker(bar: Progress, prefix: str) -> Callable[[str, int, int], None]:
    """A ``progress(label, done, total)`` callback drawing one bar per simulation pass (label) on ``bar``."""
    tasks: dict[str, TaskID] = {}

    def tick(label: str, done: int, total: int) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(f"{prefix}: {label}", total=total)
        bar.update(tasks[label], completed=done)
    return tick


def _fit_run(sens_csv: Path | None) -> tuple[dict[str, CalibrationProfile], dict[int, float]] | None:
    """The profiles and per-row predictions of the ``--fit-profiles`` run that wrote ``sens_csv``."""
    if sens_csv is None or not (sens_csv.parent / "fit_rows.csv").exists():
        return None
    fitted = {p.stem: load_profile(p) for p in sorted(sens_csv.parent.glob("*.yaml"))}
    rows = pd.read_csv(sens_csv.parent / "fit_rows.csv")
    return fitted, dict(zip(rows.row_id.astype(int), rows.base.astype(float)))


def _write_folds(out_dir: Path, first_order: pd.DataFrame, folds: Sequence[FoldFit]) -> None:
    """``cv_first_order.csv`` and ``cv_notes.txt`` as soon as the folds are fitted (before the re-simulation)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "cv_first_order.csv", first_order.to_csv(index=False))
    write_atomic(out_dir / "cv_notes.txt", _notes(folds))


def _notes(folds: Sequence[FoldFit]) -> str:
    return "".join(f"[{f.family or 'all families (in-sample)'}] {n}\n" for f in folds for n in f.notes)


def _write(out_dir: Path, cv: CrossValidation, coverage: pd.DataFrame, sens: pd.DataFrame | None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, frame in (("cv_rows", cv.rows), ("cv_families", cv.by_family), ("cv_coverage", coverage),
                        ("cv_params", cv.params)):
        write_atomic(out_dir / f"{name}.csv", frame.to_csv(index=False))
    if sens is not None:
        write_atomic(out_dir / "fit_sensitivities.csv", sens.to_csv(index=False))
    write_atomic(out_dir / "cv_notes.txt", _notes(cv.folds))
    write_intervals(interval_table(cv.rows), out_dir / "intervals.yaml", header=INTERVALS_HEADER)


TRANSFERRED_HEADER = (
    "Prediction interval of the step time on a GPU type whose profile no row of that type fitted (H800, H20,\n"
    "GH200 at H100's, A800 at A100's, H200 at the copy of H100's): split-conformal bounds on measured / predicted\n"
    "from the leave-one-GPU-type-out residuals of `clustersim validate --cross-validate gpu` (each held-out type\n"
    "one unit; simulator/calibration/intervals_transferred.py transferred_table) on workloads/data/published_runs.csv. gpu_types: the\n"
    "types fitted on their own rows. Method and coverage: docs/VALIDATION.md.")


def _write_gpu(out_dir: Path, cv: CrossValidation, coverage: pd.DataFrame, sens: pd.DataFrame | None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, frame in (("cv_rows", cv.rows), ("cv_gpus", cv.by_family), ("cv_params", cv.params),
                        ("cv_coverage", coverage)):
        write_atomic(out_dir / f"{name}.csv", frame.to_csv(index=False))
    if sens is not None:
        write_atomic(out_dir / "fit_sensitivities.csv", sens.to_csv(index=False))
    write_atomic(out_dir / "cv_notes.txt", _notes(cv.folds))
    write_intervals(transferred_table(cv.rows, coverage=coverage), out_dir / "intervals_transferred.yaml",
                    header=TRANSFERRED_HEADER)


def _print_gpu(console: Console, cv: CrossValidation, coverage: pd.DataFrame, t_sens: float, t_cv: float,
               out_dir: Path) -> None:
    t = Table(title="step-time error by held-out GPU type (MAPE %; the held-out type from its donor's fit x cited "
                    "ratios; in-sample: the fit on every row)")
    for col in ("held-out GPU type", "rows", "in-sample", "out-of-sample", "median |err| out", "bias out"):
        t.add_column(col, justify="left" if col == "held-out GPU type" else "right")
    for r in cv.by_family.to_dict("records"):
        t.add_row(str(r["family"]), str(r["rows"]), f"{r['mape_in_sample']:.2f}", f"{r['mape_out_of_sample']:.2f}",
                  f"{r['median_abs_out']:.1f}", f"{r['bias_out']:+.1f}")
    console.print(t)
    for f in cv.folds[1:]:
        console.print("".join(f"  {n}" for n in f.notes if n.startswith(f"{f.family}: no training row")))
    every = coverage[coverage.fold == "all"]
    console.print("coverage of the transferred interval, each type scored on the others' bounds: " + ", ".join(
        f"{lv:.0%} -> {100 * c:.1f} %" for lv, c in zip(every.level, every.coverage)))
    console.print(f"sensitivities {t_sens:.0f} s, folds and held-out re-simulation {t_cv:.0f} s; files in {out_dir}")


def _print(console: Console, cv: CrossValidation, coverage: pd.DataFrame, t_sens: float, t_cv: float,
           out_dir: Path) -> None:
    t = Table(title="step-time error by held-out publication family (MAPE %; floor: the least MAPE any prediction "
                    "from the rows' inputs can reach where a scenario is measured more than once)")
    for col in ("family", "rows", "in-sample", "out-of-sample", "median |err| out", "bias out", "floor"):
        t.add_column(col, justify="left" if col == "family" else "right")
    for r in cv.by_family.to_dict("records"):
        t.add_row(str(r["family"]), str(r["rows"]), f"{r['mape_in_sample']:.2f}", f"{r['mape_out_of_sample']:.2f}",
                  f"{r['median_abs_out']:.1f}", f"{r['bias_out']:+.1f}", f"{r['floor_mape']:.2f}")
    console.print(t)
    c = Table(title="interval coverage on held-out families")
    for col in ("level", "rows", "covered %", "extrapolated rows", "widening validated / extrapolated (all)",
                "median hi/lo"):
        c.add_column(col, justify="right")
    for r in coverage[coverage.family == "all"].to_dict("records"):
        c.add_row(f"{r['level']:.0%}", str(r["rows"]), f"{100 * r['coverage']:.1f}", str(r["extrapolated_rows"]),
                  f"x{r['widening_validated']:.2f} / x{r['widening_extrapolated']:.2f}", f"{r['median_width']:.2f}")
    console.print(c)
    params = ", ".join(f"{r['gpu_type']} {r['own_params']}" for r in cv.params.to_dict("records"))
    console.print(f"fitted parameters per GPU type (own; plus {cv.params.shared_params.iloc[0]} shared): {params}")
    oom = int(cv.rows.predicted_oom.sum())
    console.print(f"published plans predicted out of memory (simulated with the check lifted): {oom} of {len(cv.rows)}")
    console.print(f"in-sample predictions: {cv.in_sample_from}")
    console.print(f"sensitivities {t_sens:.0f} s, folds and held-out re-simulation {t_cv:.0f} s; files in {out_dir}")
