"""The ``clustersim calibrate`` sub-app: measure, fit (microbenchmarks, or ``--runs`` imported runs), check, import-runs.

Owns the commands' options and the files they write; the tables they print are
``clustersim.simulator.cli.calibrate_tables``. It does not measure
(``clustersim.simulator.calibration.torch_backend``), fit (``clustersim.simulator.calibration.fit``, ``clustersim.simulator.calibration.fit_runs``) nor simulate
(``clustersim.simulator.step.simulate``). ``clustersim.simulator.cli.app`` calls ``register(app)``; torch is needed only by
``measure`` and is never imported here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from clustersim.files import write_atomic
from clustersim.simulator.cli.calibrate_tables import _check_table, _fit_table, _held_out_table, _summary_lines
from clustersim.simulator.cli.options import output_file
from clustersim.simulator.profile import CalibrationProfile, load_profile, save_profile
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.calibration import (
    HOLDOUT_GPT,
    MICRO_PASSES,
    MICRO_OPERANDS,
    MICRO_PLACEMENTS,
    OPERANDS_DEFAULT,
    SMALL_GPT,
    STATISTICS,
    TINY_GPT,
    GPTConfig,
    TimingRecipe,
    census,
    check,
    check_passes,
    compare,
    fit_profile,
    fit_profiles,
    host_cores,
    load_steps,
    measure,
    measured_tally,
    misordered,
    passes,
    standard_plans,
    summary,
    torch_available,
)

MODELS = {"small": SMALL_GPT, "tiny": TINY_GPT, "holdout": HOLDOUT_GPT}
"""GPT presets of ``calibrate measure --model``."""


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` sub-app (measure, fit, check, import-runs) to ``app``."""
    sub = typer.Typer(no_args_is_help=True, help="Measure this machine with PyTorch, fit a profile, check it.")
    sub.command("measure")(measure_command)
    sub.command("fit")(fit_command)
    sub.command("check")(check_command)
    sub.command("census")(census_command)
    sub.command("import-runs")(import_runs_command)
    app.add_typer(sub, name="calibrate")


def _console() -> Console:
    return Console(width=140)


def _model(name: str, layers: int | None, hidden: int | None, heads: int | None, seq: int | None) -> GPTConfig:
    if name not in MODELS:
        raise CalibrationError(f"--model {name!r} unknown; use one of {sorted(MODELS)}")
    base = MODELS[name]
    return GPTConfig(num_layers=layers or base.num_layers, hidden_size=hidden or base.hidden_size,
                     num_heads=heads or base.num_heads, seq_len=seq or base.seq_len, vocab_size=base.vocab_size)


def measure_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the measurements.")],
    model: Annotated[str, typer.Option(help="GPT preset: small, holdout (the out-of-sample size) or tiny.")] = "small",
    ranks: Annotated[str, typer.Option(help="Comma-separated world sizes: 1 (baseline), 2 (six plans), 4 (mix).")] = "1,2,4",
    layers: Annotated[Optional[int], typer.Option(help="Override the GPT's layers.")] = None,
    hidden: Annotated[Optional[int], typer.Option(help="Override the GPT's hidden size.")] = None,
    heads: Annotated[Optional[int], typer.Option(help="Override the GPT's heads.")] = None,
    seq: Annotated[Optional[int], typer.Option(help="Override the sequence length.")] = None,
    global_batch: Annotated[int, typer.Option(help="Sequences per step.")] = 8,
    micro_batches: Annotated[int, typer.Option(help="Pipeline micro-batches.")] = 4,
    warmup: Annotated[int, typer.Option(help="Minimum untimed warm-up steps (more until the step time settles).")] = 2,
    repeats: Annotated[int, typer.Option(help="Minimum timed steps (and samples per microbenchmark).")] = 10,
    repeats_max: Annotated[int, typer.Option(help="Cap on timed steps (and samples per microbenchmark).")] = 40,
    ci_width: Annotated[float, typer.Option(help="Repeat until the median's 95% interval is within this "
                                            "fraction of it (or the cap).")] = 0.05,
    budget: Annotated[float, typer.Option(help="Seconds of timed steps per plan before repeating stops.")] = 20.0,
    threads: Annotated[int, typer.Option(help="torch threads per rank (0: the cores split over the ranks).")] = 0,
    pin: Annotated[bool, typer.Option(help="Bind each rank to its own cores (Linux).")] = True,
    trace: Annotated[Optional[Path], typer.Option(help="Also write a torch.profiler trace per plan here.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before the ranks of one launch are killed.")] = 900.0,
    quick: Annotated[bool, typer.Option(help="Benchmark only the shapes the plans run (no sweeps).")] = False,
    micro_passes: Annotated[int, typer.Option(help="Passes of the compute microbenchmarks and the collective sweep, "
                                              "one after the other: the profile takes each entry's median, and "
                                              "the range of the passes' fits is its own interval.")] = MICRO_PASSES,
    step_passes: Annotated[int, typer.Option(help="Interleaved passes over the plans of one world size: each pass "
                                             "times a block of every plan in turn (order rotated), each plan's "
                                             "step time is its passes' median, so host drift hits every plan "
                                             "alike; 1: the plans one after the other.")] = 3,
    rewarm: Annotated[int, typer.Option(help="Untimed steps of a plan before each of its interleaved blocks.")] = 1,
    micro_placement: Annotated[str, typer.Option(help="interleaved: one pass of the microbenchmarks as one more "
                                                 "block of every step pass (as many passes as the steps'; "
                                                 "--micro-passes unused); first: --micro-passes passes before "
                                                 "any step (the protocol before).")] = MICRO_PLACEMENTS[0],
    micro_operands: Annotated[str, typer.Option(help="Operands of the GEMM, attention and memory microbenchmarks: "
                                                "hot (one set, repeated: in cache), cold (cycled through the "
                                                "bytes a rank touches in one step of the largest plan), or both "
                                                "(each shape hot then cold in the same passes; calibrate check "
                                                "--micro-operands picks).")] = MICRO_OPERANDS[0],
) -> None:
    """Run real training steps and microbenchmarks with PyTorch on this machine (gloo/NCCL)."""
    check_passes(micro_passes, micro_placement, micro_operands)
    if not torch_available():
        raise CalibrationError("calibrate measure needs torch; install the extra: pip install 'clustersim[torch]'")
    cfg = _model(model, layers, hidden, heads, seq)
    worlds = [int(r) for r in ranks.split(",") if r.strip()]
    plans = [p for w in worlds for p in standard_plans(w, global_batch, micro_batches)]
    timing = TimingRecipe(warmup=warmup, warmup_max=max(10, warmup), repeats=repeats,
                          repeats_max=max(repeats_max, repeats), ci_width=ci_width, budget_s=budget,
                          threads_per_rank=threads, pin_cores=pin, profile_dir=str(trace or ""),
                          step_passes=step_passes, rewarm=rewarm)
    records = measure(out, cfg, plans, timing, timeout=timeout, sweep=not quick, micro_passes=micro_passes,
                      micro_placement=micro_placement, micro_operands=micro_operands)
    table = Table(title=f"measured step times ({out})")
    for col in ("plan", "ranks", "threads", "median ms", "95% CI ms", "CI width %", "spread %", "passes",
                "pass spread %", "steps", "load"):
        table.add_column(col, justify="left" if col == "plan" else "right")
    for r in records:
        lo, hi = r.ci
        table.add_row(r.plan.name, str(r.world_size), str(r.threads_per_rank), f"{r.median * 1e3:.1f}",
                      f"{lo * 1e3:.1f}-{hi * 1e3:.1f}", f"{r.ci_width * 100:.1f}", f"{r.spread * 100:.0f}",
                      str(len(r.pass_medians)), f"{r.pass_spread * 100:.0f}",
                      f"{r.warmup_steps}+{len(r.step_times)}", f"{r.load_average:.1f}")
    _console().print(table)
    busy = max((r.load_average - r.world_size for r in records), default=0.0)
    cores = host_cores()
    if busy > 0.5 * cores:
        _console().print(f"warning: other processes kept about {busy:.1f} of this host's {cores} cores busy while "
                         "measuring (load average less the ranks); the step times and microbenchmarks carry their "
                         "CPU time; measure on a quiet machine for the headline figures")


def fit_command(
    folder: Annotated[Optional[Path], typer.Argument(help="Folder written by calibrate measure.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Profile YAML to write.")] = Path("profile.yaml"),
    world_size: Annotated[Optional[int], typer.Option(help="Fit the microbenchmarks of this many ranks (default: largest).")] = None,
    runs: Annotated[Optional[Path], typer.Option("--runs", help="Fit on imported runs (import-run folders) under this folder instead.")] = None,
    hold_out: Annotated[Optional[str], typer.Option("--hold-out", help="With --runs: keep this family out and predict it at the end.")] = None,
    micro_operands: Annotated[Optional[str], typer.Option(help="Fit on the compute microbenchmarks measured on hot "
                                                          "or cold operands (calibrate measure --micro-operands; "
                                                          f"default {OPERANDS_DEFAULT} where recorded).")] = None,
) -> None:
    """Fit a calibration profile: from microbenchmarks (FOLDER), or from imported runs (--runs DIR)."""
    if runs is not None:
        return fit_runs_command(runs, out, hold_out)
    if folder is None:
        raise CalibrationError("calibrate fit: give a calibrate measure FOLDER, or --runs DIR of imported runs")
    report = fit_profile(folder, world_size=world_size, operands=micro_operands)
    save_profile(report.profile, out)
    _console().print(_fit_table(report))
    _console().print(f"wrote {out}; use it with --calibration {out}")


def fit_runs_command(root: Path, out: Path, hold_out: Optional[str]) -> None:
    from clustersim.simulator.calibration.fit_logs import evaluations, families_of, fit_on_runs
    from clustersim.simulator.fitted_interval import interval_path
    from clustersim.simulator.calibration.fit_logs import load_runs as load_logged_runs
    from clustersim.simulator.calibration.fit_logs import write_report  # heavy (pandas): imported when the command runs

    """``calibrate fit --runs``: leave-one-family-out fit on imported runs; profile and report written."""
    runs = load_logged_runs(root)
    with Progress(console=_console(), transient=True) as bar:
        task = bar.add_task("fitting (each step simulates every run)", total=evaluations(runs, hold_out))
        fit = fit_on_runs(runs, hold_out=hold_out, progress=lambda n: bar.advance(task, n))
    save_profile(fit.profile, out)
    write_report(fit, out)
    fams = ", ".join(f"{k} ({v})" for k, v in sorted(families_of(runs).items()))
    _console().print(_held_out_table(fit, fit.held_out, f"leave-one-family-out predictions; families: {fams}"))
    lo, hi = fit.interval
    _console().print(f"out-of-sample median |error| {fit.out_of_sample_error * 100:.1f}% (in-sample {fit.in_sample_error * 100:.1f}%, "
                     f"base profiles {fit.before_error * 100:.1f}%); interval of a prediction: measured = predicted x "
                     f"[{lo:.3f}, {hi:.3f}] ({(lo - 1) * 100:+.1f}% .. {(hi - 1) * 100:+.1f}%)")
    if fit.check:
        _console().print(_held_out_table(fit, fit.check, f"held-out family {hold_out!r}, predicted by the final fit"))
    _console().print(f"compute scale {fit.compute_scale:.3f}, link scale {fit.link_scale:.3f}; wrote {out} and "
                     f"{interval_path(out)} (watch reads the interval from it)")


DRIFT_PARTS: tuple[str, ...] = ("both", "compute", "none")
"""What ``calibrate check --drift`` moves the profile by."""

DRIFT_DEFAULT = "compute"
"""The default of ``calibrate check --drift``: the compute rates only. The latency half does not
follow the host: in the lead's three quiet rounds of the fourth stop its factor swung 0.78-1.74
between the plans of one round while the compute factor stayed 0.86-0.97, and with the plans
timed in interleaved passes (every plan in the same time windows, so a host drift moves all
alike) its factor still ranged 1.04-2.00 (clipped) over the 2-rank plans of one round at load 7-11
(compute 1.03-1.29): it reads the state the plan's own step leaves gloo's threads in, not the
host's. On that round the three variants gave Spearman 0.82 (both), 0.96 (compute), 0.77 (none)."""


def check_command(
    folder: Annotated[Path, typer.Argument(help="Folder written by calibrate measure.")],
    calibration: Annotated[Optional[Path], typer.Option(help="Profile from calibrate fit (default: fit it now).")] = None,
    micro: Annotated[Optional[Path], typer.Option(help="Fit the profiles on this other measure folder's "
                                                  "microbenchmarks (out of sample: another model's campaign).")] = None,
    statistic: Annotated[str, typer.Option(help="Measured step statistic: median, best, or uncontended "
                                           "(median with the time the OS withheld a CPU removed).")] = "median",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the rows as JSON.")] = None,
    drift: Annotated[str, typer.Option(help="Move the profile by the host's drift between the microbenchmarks and "
                                       "each plan, by the drift probes measured with both: both (compute rates and "
                                       "per-call latencies), compute (rates only; the default: the latency "
                                       "probe reads the plan's own state, not the host's) or none (as fitted; "
                                       "also for folders without probes).")] = DRIFT_DEFAULT,
    micro_operands: Annotated[Optional[str], typer.Option(help="Fit on the compute microbenchmarks measured on hot "
                                                          "operands (in cache) or cold ones (measure "
                                                          "--micro-operands cold or both); default "
                                                          f"{OPERANDS_DEFAULT} where recorded, else what was.")] = None,
) -> None:
    """Simulate every measured plan with the microbenchmark-only profile; print the error per plan and the ranking."""
    if statistic not in STATISTICS:
        raise CalibrationError(f"--statistic {statistic!r}: use one of {list(STATISTICS)}")
    if calibration is not None and micro is not None:
        raise CalibrationError("calibrate check: give --calibration or --micro, not both")
    output_file("--json", json_out)
    source = micro or folder
    reports = {} if calibration else fit_profiles(source, operands=micro_operands)
    profiles = load_profile(calibration) if calibration else {n: r.profile for n, r in reports.items()}
    if not profiles:
        raise CalibrationError(f"folder {source} has no micro_w*.json microbenchmarks; give a folder written by "
                               "`clustersim calibrate measure --out DIR`")
    records = load_steps(folder)
    if drift not in DRIFT_PARTS:
        raise CalibrationError(f"--drift {drift!r}: use one of {list(DRIFT_PARTS)}")
    # a reference without its all-reduce figure leaves the latency as fitted (``check.drift``)
    references = {n: {**r.probe, **({"allreduce_s": 0.0} if drift == "compute" else {})}
                  for n, r in reports.items() if r.probe} if drift != "none" else {}
    rows = check(records, profiles, next(s for s in STATISTICS if s == statistic),
                 passes={n: r.passes for n, r in reports.items() if len(r.passes) > 1} or None,
                 references=references or None)
    _console().print(_check_table(rows, records, statistic, source))
    s = summary(rows)
    for line in _summary_lines(rows, s, records, from_file=calibration is not None):
        _console().print(line)
    if json_out:
        doc = {"statistic": statistic, "profile_from": str(calibration or source), "micro_operands": sorted({r.operands for r in reports.values()}),
               "rows": [{**r.__dict__, "error": r.error} for r in rows], "summary": s,
               "misordered": [m.__dict__ for m in misordered(rows)]}
        write_atomic(json_out, json.dumps(doc, indent=2))


def census_command(
    model: Annotated[str, typer.Option(help="GPT preset: small, holdout or tiny.")] = "small",
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the census (every call of every rank) as JSON.")] = None,
    replay: Annotated[Optional[Path], typer.Option(help="Compare a census written by --out before instead of "
                                                   "running one (no torch needed).")] = None,
) -> None:
    """Count the collectives one real step of every 2-rank plan issues and compare them with the simulator's.

    Exit 1 when a plan issues a call the simulator does not price, or the other way round."""
    output_file("--out", out)
    if replay is not None:
        if not replay.exists():
            raise CalibrationError(f"--replay {replay}: no such file; give a file written by calibrate census --out")
        censuses = json.loads(replay.read_text())
    else:
        if not torch_available():
            raise CalibrationError("calibrate census needs torch; install the extra: pip install 'clustersim[torch]'")
        censuses = census(_model(model, None, None, None, None), standard_plans(2))
    table = Table(title="collective calls of one step (rank 0): real vs the simulator's lowering")
    for col in ("plan", "real calls", "real MB", "mismatches", "pipeline passes (rank 0)"):
        table.add_column(col, justify="left" if col in ("plan", "pipeline passes (rank 0)") else "right")
    bad = []
    for c in censuses:
        found = compare(c)
        bad += found
        tally = measured_tally(c["ranks"][0], int(c["world_size"]))
        order = " ".join(f"{k}{mb}" for k, mb in passes(c).get(0, []))
        table.add_row(str(c["plan"]["name"]), str(sum(tally.values())),
                      f"{sum(size * n for (_, size), n in tally.items()) / 1e6:.2f}", str(len(found)), order)
    _console().print(table)
    for m in bad:
        _console().print(f"{m.plan} rank {m.rank}: {m.kind} of {m.size:.0f} B: {m.measured} real, {m.simulated} priced")
    if out:
        write_atomic(out, json.dumps(censuses, indent=1))
        _console().print(f"wrote {out}")
    if bad:
        raise typer.Exit(1)


def import_runs_command(
    csv: Annotated[Path, typer.Argument(help="CSV with the columns of published_runs.csv.")],
    out: Annotated[Path, typer.Option("--out", help="Profile YAML to write.")],
    holdout: Annotated[float, typer.Option(help="Fraction of rows held out of the fit.")] = 0.3,
    seed: Annotated[int, typer.Option(help="Seed of the train/held-out split.")] = 0,
    base: Annotated[Optional[Path], typer.Option(help="Profile to start from (default: generic defaults).")] = None,
) -> None:
    """Fit a profile from measured step times; report the error on the held-out rows separately."""
    from clustersim.simulator.calibration.fit_runs import EVALUATIONS, fit_runs  # heavy (pandas/matplotlib): imported when the command runs

    start = load_profile(base) if base else CalibrationProfile()
    with Progress(console=_console(), transient=True) as bar:
        task = bar.add_task("fitting (each step simulates every row)", total=EVALUATIONS)
        result = fit_runs(csv, start, holdout=holdout, rng=np.random.default_rng(seed),
                          progress=lambda n: bar.advance(task, n))
    save_profile(result.profile, out)
    table = Table(title=f"fit on {result.train_rows} rows, {result.holdout_rows} held out")
    for col in ("rows", "median |error| before %", "median |error| after %"):
        table.add_column(col, justify="right")
    for name in ("train", "holdout"):
        table.add_row(name, f"{result.before[name] * 100:.1f}", f"{result.after[name] * 100:.1f}")
    _console().print(table)
    _console().print(f"compute scale {result.compute_scale:.3f}, link scale {result.link_scale:.3f}; wrote {out}")
