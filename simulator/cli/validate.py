"""The ``clustersim validate`` subcommand: re-predict published runs and print the error.

Owns the command's options, the tables it prints (counts, MAPE, median and worst absolute error,
by source and by GPU type, skip reasons) and its exit codes (0 done, 2 bad input), and the
``--fit-profiles OUT_DIR`` pipeline's output files and report. Does not own the row mapping, the
inference rules or the statistics (``clustersim.simulator.calibration.validate``) nor the fit (``clustersim.simulator.calibration.fit_defaults``).
``clustersim.simulator.cli.app`` calls ``register(app)``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from clustersim.files import write_atomic
from clustersim.simulator.cli.options import output_dir, output_file
from clustersim.simulator.profile import PROFILE_DIR, load_profile
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.cli.output import fail

if TYPE_CHECKING:  # annotations only; the modules load when a command runs
    import pandas as pd

    from clustersim.simulator.calibration.fit_defaults import FitOutcome
    from clustersim.simulator.network import Fidelity


def register(app: typer.Typer) -> None:
    """Add the ``validate`` command to the clustersim app."""
    app.command("validate")(validate_command)


def stats_table(title: str, key: str, frame: pd.DataFrame) -> Table:
    """One row per group: rows, MAPE, median, worst absolute and mean signed error (percent)."""
    table = Table(title=title)
    for col in (key, "rows", "MAPE %", "median |err| %", "worst |err| %", "bias %"):
        table.add_column(col, justify="left" if col == key else "right")
    for rec in frame.to_dict("records"):
        table.add_row(str(rec[key]), str(rec["rows"]), *(f"{rec[k]:.1f}" for k in ("mape", "median_abs", "worst_abs", "bias")))
    return table


def _overall_line(name: str, stats: dict[str, Any]) -> str:
    return (f"{name}: {stats['rows']} rows, MAPE {stats['mape']:.2f} %, median |err| {stats['median_abs']:.1f} %, "
            f"worst |err| {stats['worst_abs']:.1f} %, bias {stats['bias']:+.1f} %")


def print_summary(console: Console, results: pd.DataFrame) -> None:
    """The summary the issue asks for: counts, overall error, by source, by GPU type, skips."""
    from clustersim.simulator.calibration.validate import error_stats, megatron_lm_rows, summarise  # heavy (pandas/matplotlib): imported when the command runs

    s = summarise(results)
    console.print(f"simulated {s['simulated']} rows, skipped {s['skipped']}")
    if s["simulated"]:
        console.print(_overall_line("all simulated rows", s["overall"]))
        meg = megatron_lm_rows(results[results.status == "ok"])
        if len(meg):
            console.print(_overall_line("Megatron-LM rows", error_stats(meg.error_pct)))
        if (fl := s["floor"]) is not None and fl.scenarios:
            console.print(
                f"repeated scenarios: {fl.repeated_rows} rows in {fl.scenarios} scenarios measured more than once "
                f"(same inputs, another release): no prediction from these inputs gets below {fl.floor_mape:.2f} % "
                f"MAPE over all rows ({fl.floor_mape_repeated:.2f} % on those rows, where the model has "
                f"{fl.model_mape_repeated:.2f} %); {fl.scenarios_beyond_40} of them leave a row beyond 40 % whatever the prediction")
        console.print(stats_table("error by source", "source_id", s["by_source"]))
        console.print(stats_table("error by GPU type", "gpu_type", s["by_gpu"]))
    if s["skipped"]:
        table = Table(title="skipped rows by reason")
        table.add_column("reason")
        table.add_column("rows", justify="right")
        for reason, count in s["skip_reasons"].items():
            table.add_row(escape(str(reason)), str(count))
        console.print(table)


def validate_command(
    runs: Annotated[Path | None, typer.Argument(
        help="CSV with the columns of published_runs.csv; default: the bundled data set.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write one row per input row here (CSV).")] = None,
    calibration: Annotated[Path | None, typer.Option(
        help="Calibration profile YAML for every row; default: the bundled profile of each GPU type.")] = None,
    fidelity: Annotated[str | None, typer.Option(help="Collective model: flow or analytic; default: the one "
                                                 "simulate uses and the bundled profiles were fitted with (flow).")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
    fit_profiles: Annotated[Path | None, typer.Option(
        "--fit-profiles", help="Refit the default profiles on the runs from the bundled ones and write them, "
        "with fit_report.csv, fit_folds.csv, fit_rows.csv and fit_sensitivities.csv, into this directory.")] = None,
    fit_rounds: Annotated[int, typer.Option(help="With --fit-profiles: rounds of simulate-and-fit. With --cross-validate: "
                                            "the same inside each fold (each later round simulates the fold's training "
                                            "rows at its previous fit).", min=1)] = 1,
    fit_only: Annotated[str | None, typer.Option(
        "--fit-only", help="With --fit-profiles: refit only these profiles (comma-separated stems, e.g. b300,gb300); "
        "the others and the shared curve shape, kernel overhead and memory efficiency stay as bundled.")] = None,
    workers: Annotated[int, typer.Option(help="With --fit-profiles or --cross-validate: simulation processes.", min=1)] = 2,
    cross_validate: Annotated[str | None, typer.Option(
        "--cross-validate", help="family: leave-one-publication-family-out, the profile fit redone in each fold; "
        "writes cv_rows.csv, cv_families.csv, cv_coverage.csv, cv_params.csv, cv_notes.txt, intervals.yaml "
        "into --cv-dir. gpu: leave-one-GPU-type-out (the held-out type from its donor's fit and the cited "
        "ratios); writes cv_rows.csv, cv_gpus.csv, cv_params.csv, cv_notes.txt.")] = None,
    cv_dir: Annotated[Path, typer.Option(help="With --cross-validate: output directory.")] = Path("cv"),
    sensitivities_csv: Annotated[Path | None, typer.Option(
        "--sensitivities", help="With --cross-validate: reuse a fit_sensitivities.csv of --fit-profiles taken at "
        "the bundled profiles (else one sensitivity pass is simulated first).")] = None,
    hold_shared: Annotated[bool, typer.Option(
        "--hold-shared", help="With --cross-validate: every fold fits each GPU type's own parameters and holds the "
        "shared curve shape, kernel overhead and memory efficiency at the bundled profiles' values (the procedure "
        "of --fit-profiles --fit-only over every GPU type).")] = False,
) -> None:
    """Re-predict published training runs and report the step-time error."""
    from clustersim.simulator.calibration.validate import load_runs, validate_runs  # heavy (pandas/matplotlib): imported when the command runs
    from clustersim.simulator.network import DEFAULT_FIDELITY

    console, errors = Console(width=None if sys.stdout.isatty() else 140), Console(stderr=True)
    try:
        if fidelity not in (None, "analytic", "flow"):
            raise ClusterSimError(f"--fidelity {fidelity!r}: use flow or analytic")
        model: Fidelity = DEFAULT_FIDELITY if fidelity is None else ("flow" if fidelity == "flow" else "analytic")
        output_file("--out", out)  # checked before the (long) computation
        if fit_profiles is not None:
            output_dir("--fit-profiles", fit_profiles)
        only = _fit_only(fit_only, fit_profiles)
        table = load_runs(runs)
        if cross_validate is not None:
            if cross_validate not in ("family", "gpu"):
                raise ClusterSimError(f"--cross-validate {cross_validate!r}: use family or gpu")
            if calibration is not None or fit_profiles is not None:
                raise ClusterSimError("--cross-validate starts from the bundled profiles; drop --calibration and --fit-profiles")
            from clustersim.simulator.cli.validate_cv import run_cross_validation  # heavy (pandas): imported when used

            run_cross_validation(console, errors, table, model, workers, progress, cv_dir, sensitivities_csv, hold_shared,
                                 by=cross_validate, rounds=fit_rounds)
            return
        if hold_shared:
            raise ClusterSimError("--hold-shared applies to --cross-validate; add it or drop --hold-shared")
        if fit_profiles is not None:
            if calibration is not None:
                raise ClusterSimError("--fit-profiles starts from the bundled profiles; drop --calibration")
            outcome = _run_fit(table, model, fit_rounds, workers, progress, errors, only)
            _write_fit(console, outcome, fit_profiles, only)
            return
        profile = load_profile(calibration) if calibration is not None else None
        with Progress(console=errors, disable=not progress, transient=True) as bar:
            task = bar.add_task("validating", total=len(table))
            results = validate_runs(table, profile=profile, fidelity=model,
                                    progress=lambda done, _total: bar.update(task, completed=done))
    except ClusterSimError as exc:
        fail(exc)
    if out is not None:
        write_atomic(out, results.to_csv(index=False))
    print_summary(console, results)


def _fit_only(value: str | None, fit_profiles: Path | None) -> tuple[str, ...] | None:
    """The profile stems ``--fit-only`` names (checked against the bundled profiles), None without it."""
    if value is None:
        return None
    if fit_profiles is None:
        raise ClusterSimError(f"--fit-only {value!r} refits profiles; add --fit-profiles OUT_DIR")
    known = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
    stems = tuple(dict.fromkeys(v.strip().lower() for v in value.split(",") if v.strip()))
    bad = [v for v in stems if v not in known]
    if bad or not stems:
        raise ClusterSimError(f"--fit-only {value!r}: {', '.join(bad) or 'no profile named'}; "
                              f"use comma-separated profile stems among {', '.join(known)}")
    return stems


def _run_fit(table: pd.DataFrame, fidelity: Fidelity, rounds: int, workers: int, progress: bool,
             errors: Console, only: tuple[str, ...] | None = None) -> FitOutcome:
    """The fit pipeline of ``clustersim.simulator.calibration.fit_defaults`` with one progress bar per simulation pass."""
    from clustersim.simulator.calibration.fit_defaults import fit_default_profiles  # heavy (pandas/matplotlib): imported when the command runs
    from clustersim.simulator.cli.validate_cv import pass_ticker

    start = {p.stem: load_profile(p) for p in sorted(PROFILE_DIR.glob("*.yaml"))}
    with Progress(console=errors, disable=not progress, transient=True) as bar:
        return fit_default_profiles(table, start, rounds=rounds, fidelity=fidelity,
                                    workers=workers, progress=pass_ticker(bar, "fit"), only=only)


def _write_fit(console: Console, outcome: FitOutcome, out_dir: Path, only: tuple[str, ...] | None = None) -> None:
    """Write the profiles (with ``only``, just those refitted) and the report files; print the report."""
    import pandas as pd  # heavy (pandas/matplotlib): imported when the command runs

    written = write_profiles_with_headers(outcome, out_dir, only)
    for name, frame in (("fit_report", outcome.report), ("fit_folds", outcome.folds), ("fit_rows", outcome.after),
                        ("fit_sensitivities", outcome.sensitivities)):
        write_atomic(out_dir / f"{name}.csv", frame.to_csv(index=False))
    table = Table(title="profile fit (MAPE %, unweighted; held-out: 2-fold refit of the first-order model)")
    for col in ("gpu type", "rows", "before", "first-order", "after (simulated)", "held-out"):
        table.add_column(col, justify="left" if col == "gpu type" else "right")
    for rec in outcome.report.to_dict("records"):
        table.add_row(str(rec["group"]), str(rec["rows"]), *(f"{rec[k]:.2f}" if pd.notna(rec[k]) else "-" for k in
                      ("mape_before", "mape_first_order", "mape_after", "mape_held_out")))
    console.print(table)
    console.print(f"wrote {written} profiles and fit_report.csv, fit_folds.csv, fit_rows.csv, fit_sensitivities.csv to {out_dir}")


def write_profiles_with_headers(outcome: FitOutcome, out_dir: Path, only: tuple[str, ...] | None = None) -> int:
    """One ``<stem>.yaml`` per profile (with ``only``, per refitted profile and per copy of one,
    ``fit_defaults.COPIES``: H200 follows a refitted H100), each with the header naming its GPU type,
    the data and the method. Returns how many were written."""
    from clustersim.simulator.calibration.fit_defaults import COPIES, PROFILE_HEADER, write_profiles  # heavy (pandas/matplotlib): imported when the command runs

    chosen = {s: p for s, p in outcome.profiles.items() if only is None or s in only or COPIES.get(s) in only}
    for stem, prof in chosen.items():
        write_profiles({stem: prof}, out_dir, header=PROFILE_HEADER.format(gpu=stem.upper()))
    return len(chosen)
