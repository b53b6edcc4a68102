"""The ``clustersim goodput`` subcommand: a scenario in, the goodput of a long run out.

Owns the command's options, the table it prints, the JSON it writes and the goodput-against-
interval plot. It simulates one step of the scenario with ``clustersim.simulator.step.simulate.simulate`` (step time,
tokens per step, checkpoint bytes) and hands the rest to ``clustersim.simulator.longrun.goodput`` and the
run's energy, GPU-hours, cost and emissions to ``clustersim.simulator.longrun.energy``; it computes
nothing else itself. ``clustersim.simulator.cli.app`` calls ``register(app)``. With ``--run`` (an
``import-run`` folder) the step time is the one the job's log measured, and the MTBF and restart
time default to what its log saw (``imported_runs.measured_long_run``).

Defaults that are assumptions, not facts: detection 2 min, restart 10 min, a 200 Gbit/s
front-end link per node for checkpoint writes. Facts: the per-GPU interruption rate and the
storage bandwidth of the Llama 3 405B run (cited below).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Sequence

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from clustersim.units import GBIT
from clustersim.files import write_atomic, write_json
from clustersim.simulator.step import simulate_step as simulate, step_energy
from clustersim.simulator.longrun import (
    CAUSES,
    CheckpointSpec,
    FailureSpec,
    IntervalSweep,
    LongRunError,
    LongRunResult,
    LongRunSpec,
    RunEnergy,
    checkpoint_cost,
    interval_grid,
    run_energy,
    simulate_long_run,
    sweep_intervals,
    system_mtbf,
)
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.calibration import MeasuredLongRun, measured_long_run
from clustersim.simulator.profile import load_profile
from clustersim.simulator.scenario import load_scenario
from clustersim.topologies.power import FacilitySpec, power_spec
from clustersim.simulator.bounds import check_long_run
from clustersim.simulator.cli.options import output_file
from clustersim.simulator.scenario import LongRunOptions, validate_options
from clustersim.simulator.cli.output import fail

HOUR = 3600.0
# Llama 3 paper ("The Llama 3 Herd of Models", sec. 3.3.4): 419 unexpected interruptions in 54 days
# on 16,384 H100 -> one interruption per 16,384 * 54 * 24 / 419 = 50,677 GPU-hours.
LLAMA3_GPU_MTBF_HOURS = 16384 * 54 * 24 / 419
# Tectonic: 2 TB/s sustained (Llama 3 paper, sec. 3.3.1) = 16,000 Gbit/s.
TECTONIC_GBPS = 2e12 / GBIT


def register(app: typer.Typer) -> None:
    """Add the ``goodput`` command to the clustersim app."""
    app.command("goodput")(goodput_command)


def _failure_spec(mtbf_hours: float | None, mtbf_gpu_hours: float | None, mtbf_node_hours: float | None,
                  mtbf_link_hours: float | None, options: dict[str, Any]) -> FailureSpec:
    """Component MTBFs in hours -> seconds; with none given, the Llama 3 per-GPU rate."""
    given = [mtbf_hours, mtbf_gpu_hours, mtbf_node_hours, mtbf_link_hours]
    if all(h is None for h in given):
        mtbf_gpu_hours = LLAMA3_GPU_MTBF_HOURS
    to_s = [math.inf if h is None else h * HOUR for h in (mtbf_hours, mtbf_gpu_hours, mtbf_node_hours, mtbf_link_hours)]
    return FailureSpec(system_mtbf=to_s[0], mtbf_gpu=to_s[1], mtbf_node=to_s[2], mtbf_link=to_s[3], **options)


def _parse_interval(text: str) -> float | None:
    """'auto' -> None (the best simulated interval); else minutes -> seconds."""
    if text.strip().lower() == "auto":
        return None
    try:
        minutes = float(text)
    except ValueError:
        raise LongRunError(f"--checkpoint-interval must be 'auto' or minutes > 0, got {text!r}") from None
    if not minutes > 0:
        raise LongRunError(f"--checkpoint-interval must be 'auto' or minutes > 0, got {text!r}")
    return minutes * 60.0


def _save_plot(sweep: IntervalSweep, path: Path) -> None:
    from clustersim.reports.curves import plot_goodput_curve  # heavy (pandas/matplotlib): imported when the command runs
    from clustersim.reports.plots import png_bytes

    ax = plot_goodput_curve(sweep.intervals, sweep.goodput_mean, sweep.goodput_ci_half, sweep.band,
                            young_s=sweep.young, daly_s=sweep.daly)
    write_atomic(path, png_bytes(ax))


def _save_json(doc: dict[str, Any], path: Path) -> None:
    write_json(path, doc, default=float)


def results_table(spec: LongRunSpec, chosen: LongRunResult, sweep: IntervalSweep) -> Table:
    """The rich table the command prints."""
    table = Table(title=f"goodput over {spec.days:g} days x {spec.repetitions} runs", show_header=False)
    low, high = chosen.goodput_ci95
    rows = [("step time", f"{spec.step_time:.3f} s"), ("GPUs", f"{spec.num_gpus}"),
            ("checkpoint per device", f"{spec.state_bytes_per_device / 1e9:.3f} GB"),
            ("checkpoint stall / persist / restore",
             f"{chosen.cost.blocking_time:.1f} / {chosen.cost.persist_time:.1f} / {chosen.cost.restore_time:.1f} s"),
            ("system MTBF", f"{chosen.system_mtbf / HOUR:.2f} h"),
            ("checkpoint interval", f"{chosen.checkpoint_interval / 60:.1f} min"),
            ("goodput mean [95% CI]", f"{chosen.goodput_mean:.4f} [{low:.4f}, {high:.4f}]"),
            ("goodput p5 / p50 / p95", f"{chosen.goodput_p5:.4f} / {chosen.goodput_p50:.4f} / {chosen.goodput_p95:.4f}"),
            ("failures per run", f"{chosen.failures_mean:.1f}"),
            ("tokens trained", f"{chosen.tokens_mean:.4g}"), ("cost", f"{chosen.cost_mean:,.0f}")]
    rows += [(f"lost hours: {cause}", f"{chosen.lost_hours[cause]:.1f} h") for cause in CAUSES]
    rows += [("best interval (simulated)", f"{sweep.best.checkpoint_interval / 60:.1f} min"),
             ("optimum band (95%)", f"{sweep.band[0] / 60:.1f} - {sweep.band[1] / 60:.1f} min"),
             ("Young / Daly", f"{sweep.young / 60:.1f} / {sweep.daly / 60:.1f} min")]
    for label, value in rows:
        table.add_row(label, value)
    return table


def energy_rows(run: RunEnergy, facility: FacilitySpec) -> list[tuple[str, str]]:
    """The run's energy, GPU-hours, money and emissions, each mean [95% CI] over the histories."""
    def fmt(est: Any, digits: str) -> str:
        return f"{est.mean:{digits}} [{est.ci95[0]:{digits}}, {est.ci95[1]:{digits}}]"
    rows = [(f"run of {run.tokens:.4g} useful tokens", f"PUE {facility.pue:.2f}"),
            ("  energy kWh [95% CI]", fmt(run.energy_kwh, ",.0f")),
            ("  kWh per M useful tokens", fmt(run.energy_kwh_per_million_tokens, ".4g")),
            ("  GPU-hours [95% CI]", fmt(run.gpu_hours, ",.0f")), ("  cost [95% CI]", fmt(run.money, ",.0f"))]
    if facility.grid_kg_per_kwh > 0:
        rows.append(("  t CO2eq [95% CI]", fmt(replace(run.kg_co2, mean=run.kg_co2.mean / 1e3,
                                                      ci95=(run.kg_co2.ci95[0] / 1e3, run.kg_co2.ci95[1] / 1e3)), ",.1f")))
    return rows


def _long_run_spec(scenario: Any, days: float, repetitions: int) -> LongRunSpec:
    """Simulate one step of the scenario and describe the job for the long run."""
    return _long_run(scenario, days, repetitions)[0]


def _long_run(scenario: Any, days: float, repetitions: int) -> tuple[LongRunSpec, Any]:
    """The long-run description of the scenario and its simulated step (the step's ``Result``)."""
    step = simulate(scenario.model, scenario.training, scenario.cluster, scenario.plan,
                    profile=scenario.profile, seed=scenario.seed)
    return LongRunSpec(days=days, step_time=step.step_time, tokens_per_step=step.tokens_per_step,
                       num_gpus=step.num_gpus, gpus_per_node=scenario.cluster.gpus_per_node,
                       state_bytes_per_device=step.checkpoint_bytes_per_device,
                       checkpoint_interval=step.step_time, cost_per_gpu_hour=scenario.cluster.cost_per_gpu_hour,
                       repetitions=repetitions), step


def run_goodput(spec: LongRunSpec, checkpoint: CheckpointSpec, failures: FailureSpec, seed: int,
                interval: float | None, force: bool = False) -> tuple[LongRunResult, IntervalSweep]:
    """The sweep (best interval) and the result at the chosen interval, on the same histories;
    refused before any draw when the expected failure draws exceed ``bounds.DRAW_LIMIT``."""
    cost = checkpoint_cost(checkpoint, state_bytes_per_device=spec.state_bytes_per_device,
                           num_gpus=spec.num_gpus, gpus_per_node=spec.gpus_per_node)
    mtbf = system_mtbf(failures, spec.num_gpus, spec.gpus_per_node)
    grid = interval_grid(spec, cost.blocking_time, mtbf)
    check_long_run(days=spec.days, system_mtbf_s=mtbf, repetitions=spec.repetitions, intervals=len(grid) + 1,
                   force=force)
    sweep = sweep_intervals(spec, checkpoint, failures, np.random.default_rng(seed),
                            intervals=grid + ([interval] if interval is not None else []))
    if interval is None:
        return sweep.best, sweep
    # same seed, same spawned streams: the same failure histories as the sweep
    return simulate_long_run(replace(spec, checkpoint_interval=interval), checkpoint, failures,
                             np.random.default_rng(seed)), sweep


def _measured(ctx: typer.Context, run: MeasuredLongRun, spec: LongRunSpec, mtbfs: list[float | None],
              times: dict[str, float]) -> tuple[LongRunSpec, float | None, dict[str, float], list[str]]:
    """An imported run's measured step time, and its log's interruption rate and restart time
    where the options were left at their defaults (``--run``)."""
    notes = [f"step time {run.step_time_s:.3f} s: measured steady median of {run.source} "
             f"(simulated {spec.step_time:.3f} s)"]
    spec = replace(spec, step_time=run.step_time_s, checkpoint_interval=run.step_time_s)
    mtbf = mtbfs[0]
    if all(h is None for h in mtbfs) and run.mtbf_hours is not None:
        mtbf = run.mtbf_hours
        notes.append(f"system MTBF {mtbf:.2f} h: the interruptions the log saw (one log: a small sample)")
    elif run.mtbf_hours is None:
        notes.append(f"the log saw no interruption in {run.hours or 0:.1f} h: the MTBF options (default the Llama 3 rate) apply")
    # by name: typer vendors its own click, whose ParameterSource is not click's
    defaults = all(getattr(ctx.get_parameter_source(k), "name", "") == "DEFAULT" for k in ("detection_min", "restart_min"))
    if defaults and run.restart_min is not None:
        times = {"detection_min": 0.0, "restart_min": run.restart_min}
        notes.append(f"restart {run.restart_min:.1f} min (detection included): measured between the log's records")
    return spec, mtbf, times, notes


def goodput_command(
    ctx: typer.Context,
    scenario_file: Annotated[Path, typer.Argument(help="Scenario YAML (model, training, cluster, plan).")],
    days: Annotated[float, typer.Option(help="Wall-clock days per simulated run.")] = 30.0,
    mtbf_hours: Annotated[float | None, typer.Option(help="Cluster-level MTBF (h) of job interruptions.")] = None,
    mtbf_gpu_hours: Annotated[float | None, typer.Option(help="MTBF per GPU (h); default: Llama 3 rate.")] = None,
    mtbf_node_hours: Annotated[float | None, typer.Option(help="MTBF per node's host parts (h).")] = None,
    mtbf_link_hours: Annotated[float | None, typer.Option(help="MTBF per scale-out link (h).")] = None,
    distribution: Annotated[str, typer.Option(help="exponential or weibull.")] = "exponential",
    weibull_shape: Annotated[float, typer.Option(help="Weibull shape (<1 infant mortality).")] = 1.0,
    checkpoint_interval: Annotated[str, typer.Option(help="'auto' or minutes between checkpoints.")] = "auto",
    storage_gbps: Annotated[float, typer.Option(help="Storage aggregate write Gbit/s.")] = TECTONIC_GBPS,
    node_write_gbps: Annotated[float, typer.Option(help="Per-node write Gbit/s.")] = 200.0,
    asynchronous: Annotated[bool, typer.Option("--async/--sync", help="Asynchronous checkpoints.")] = False,
    sharded: Annotated[bool, typer.Option("--sharded/--gathered", help="Sharded checkpoint files.")] = True,
    detection_min: Annotated[float, typer.Option(help="Minutes to detect a failure.")] = 2.0,
    restart_min: Annotated[float, typer.Option(help="Minutes to relaunch the job.")] = 10.0,
    reschedule_min: Annotated[float, typer.Option(help="Minutes to swap in a spare node.")] = 5.0,
    spare_nodes: Annotated[int, typer.Option(help="Idle spare nodes.")] = 0,
    repair_hours: Annotated[float, typer.Option(help="Hours until a failed node is back.")] = 0.0,
    repetitions: Annotated[int, typer.Option(help="Monte Carlo runs per interval.")] = 100,
    seed: Annotated[int | None, typer.Option(help="Seed; default: the scenario's.")] = None,
    plot: Annotated[Path | None, typer.Option(help="PNG of goodput against interval.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="JSON summary file.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Scenario override, e.g. plan.tp=4.")] = None,
    tokens: Annotated[float | None, typer.Option(help="Useful tokens of the run to price; default: one run's.")] = None,
    pue: Annotated[float, typer.Option(help="Facility PUE (1 = IT energy only).")] = 1.0,
    price_per_kwh: Annotated[float, typer.Option(help="Electricity price per kWh (owner pricing).")] = 0.0,
    capex_per_gpu: Annotated[float, typer.Option(help="Capital cost per GPU, amortised (owner pricing).")] = 0.0,
    life_years: Annotated[float, typer.Option(help="Years over which capex is amortised.")] = 4.0,
    grid_g_per_kwh: Annotated[float, typer.Option(help="Grid intensity, g CO2eq per kWh.")] = 0.0,
    force: Annotated[bool, typer.Option("--force", help="Run even above the work limits (failure draws).")] = False,
    calibration: Annotated[Path | None, typer.Option("--calibration", help="Calibration profile YAML (default: the scenario's or the accelerator's bundled profile).")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run", help="An import-run folder: its measured step time, and its log's MTBF and restart time unless given.")] = None,
) -> None:
    """Goodput distribution, best checkpoint interval and lost hours over a long run."""
    try:
        failures = _failures_checked(locals())  # the command's options by name, before any other local
        output_file("--plot", plot)
        output_file("--json", json_out)
        interval = _parse_interval(checkpoint_interval)
        scenario = _scenario(scenario_file, set_ or [], force, calibration)
        spec, step = _long_run(scenario, days, repetitions)
        notes: list[str] = []
        if run_dir is not None:
            times = {"detection_min": detection_min, "restart_min": restart_min}
            spec, mtbf_hours, times, notes = _measured(ctx, measured_long_run(run_dir), spec,
                                                       [mtbf_hours, mtbf_gpu_hours, mtbf_node_hours, mtbf_link_hours], times)
            detection_min, restart_min = times["detection_min"], times["restart_min"]
            failures = _failures_checked(locals())  # again, with the log's MTBF and restart time
        facility = FacilitySpec(pue=pue, price_per_kwh=price_per_kwh, capex_per_gpu=capex_per_gpu,
                                life_years=life_years, grid_kg_per_kwh=grid_g_per_kwh / 1e3)
        checkpoint = CheckpointSpec(write_bandwidth_per_node=node_write_gbps * GBIT,
                                    storage_bandwidth=storage_gbps * GBIT, asynchronous=asynchronous, sharded=sharded)
        chosen, sweep = run_goodput(spec, checkpoint, failures, scenario.seed if seed is None else seed, interval, force)
        run = _price_run(step, scenario, spec, chosen, facility, tokens, spare_nodes)
    except (ClusterSimError, ValueError) as exc:
        fail(exc)
    _report(Console(), spec, chosen, sweep, run, facility, plot, json_out, notes)


_CHECKED = ("days", "mtbf_hours", "mtbf_gpu_hours", "mtbf_node_hours", "mtbf_link_hours", "distribution",
            "weibull_shape", "storage_gbps", "node_write_gbps", "detection_min", "restart_min", "reschedule_min",
            "spare_nodes", "repair_hours", "repetitions")
"""The options ``LongRunOptions`` checks (each error names its option)."""


def _failures_checked(options: dict[str, Any]) -> FailureSpec:
    """Check the long-run options, then the failure model they describe (minutes and hours -> s)."""
    validate_options(LongRunOptions, {k: options[k] for k in _CHECKED}, "goodput")
    o = options
    timing = dict(distribution=o["distribution"], weibull_shape=o["weibull_shape"],
                  detection_time=o["detection_min"] * 60, restart_time=o["restart_min"] * 60,
                  reschedule_time=o["reschedule_min"] * 60, spare_nodes=o["spare_nodes"],
                  repair_time=o["repair_hours"] * HOUR)
    return _failure_spec(o["mtbf_hours"], o["mtbf_gpu_hours"], o["mtbf_node_hours"], o["mtbf_link_hours"], timing)


def _scenario(path: Path, overrides: list[str], force: bool, calibration: Path | None) -> Any:
    """The scenario with its overrides, and the calibration profile when one is given."""
    scenario = load_scenario(path, overrides, force=force)
    return replace(scenario, profile=load_profile(calibration)) if calibration is not None else scenario


def _price_run(step: Any, scenario: Any, spec: LongRunSpec, chosen: LongRunResult, facility: FacilitySpec,
               tokens: float | None, spare_nodes: int) -> RunEnergy:
    """Energy, GPU-hours, cost and emissions of the run (default: the tokens one simulated run trains)."""
    power = power_spec(scenario.cluster.accelerator)
    return run_energy(step_energy(step, scenario.cluster, power, facility), spec, chosen,
                      chosen.tokens_mean if tokens is None else tokens, facility, power,
                      spare_gpus=spare_nodes * spec.gpus_per_node, cluster_price=spec.cost_per_gpu_hour,
                      limit_w=scenario.cluster.accelerator.power_limit_w)


def _report(console: Console, spec: LongRunSpec, chosen: LongRunResult, sweep: IntervalSweep, run: RunEnergy,
            facility: FacilitySpec, plot: Path | None, json_out: Path | None, notes: Sequence[str] = ()) -> None:
    """Print the table (goodput, then the run's energy and cost with their 95% CI); write the files."""
    table = results_table(spec, chosen, sweep)
    for label, value in energy_rows(run, facility):
        table.add_row(label, value)
    console.print(table)
    for note in notes:
        console.print(f"note: {note}")
    if plot is not None:
        _save_plot(sweep, plot)
        console.print(f"wrote {plot}")
    if json_out is not None:
        _save_json({"step_time_s": spec.step_time, "state_bytes_per_device": spec.state_bytes_per_device,
                    "days": spec.days, "result": chosen.to_dict(), "sweep": sweep.to_dict(),
                    "energy": run.to_dict()}, json_out)
        console.print(f"wrote {json_out}")
