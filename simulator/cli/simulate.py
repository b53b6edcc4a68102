"""``clustersim simulate``: one training step of a scenario, its table, interval and files.

Owns the step's summary table (``result_table``), the collectives, fabric and placement tables,
and the command. Loaded when the command runs (``cli.lazy``), so ``clustersim --help`` and the
other commands import no engine.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from clustersim.simulator.cli import output
from clustersim.simulator.cli.options import choice, fabric_load_option, output_file
from clustersim.simulator.cli.plain import Grid, Printer
from clustersim.simulator.intervals import INTERVALS_PATH, interval_of
from clustersim.simulator.step import (
    CATEGORIES,
    FabricSharing,
    Result,
    StepEnergy,
    simulate_step as simulate,
    step_energy,
)
from clustersim.simulator.network import FabricLoad
from clustersim.simulator.profile import load_profile
from clustersim.simulator.plan import Placement
from clustersim.simulator.scenario import ScenarioMode, load_scenario
from clustersim.topologies.colocate import JobPlacement

console = Printer(width=None if sys.stdout.isatty() else 140)  # plain text where rich's would be (cli.plain)


COMPUTE_LABELS: dict[str, str] = {
    "gemm_ideal": "GEMM at peak FLOP/s", "gemm_efficiency_loss": "GEMM efficiency loss",
    "attention_kernel": "attention kernel", "elementwise": "memory-bound element-wise",
    "recompute": "recompute", "overhead": "launch/overhead",
}


def scenario_line(result: Result) -> str:
    """One line naming what was simulated (model size, batch, sequence, precision, cluster, profile)."""
    sc = result.scenario()
    params = float(sc["model_params"] or 0) / 1e9
    return (f"{sc['model']} ({params:.1f}B params, {sc['num_layers']} layers, hidden {sc['hidden_size']}), "
            f"GBS {sc['global_batch_size']} x seq {sc['seq_len']}, {sc['precision']}; {sc['num_gpus']}x "
            f"{sc['accelerator']} on {sc['cluster']} ({sc['fabric']}, NIC {sc['nic_bandwidth_gbps']:.0f} Gb/s); "
            f"profile {sc['profile']} (fit {sc['profile_fit_date']}); clustersim {sc['version']}, "
            f"inputs {str(sc['input_hash'])[:12]}")


def result_table(result: Result, title: str, energy: StepEnergy | None = None) -> Grid:
    """The step summary and its breakdown (compute split by where it goes; its energy, when given)."""
    table = Grid(title=title, caption=scenario_line(result), show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("share", justify="right")
    step = result.step_time
    table.add_row("step time", f"{step:.4f} s", "100.0%")
    table.add_row("tokens/s/GPU", f"{result.tokens_per_s_per_gpu:,.0f}", "")
    table.add_row("MFU (PaLM model FLOPs)", f"{result.mfu * 100:.1f}%", f"{result.tflops_per_gpu:.0f} TFLOP/s/GPU")
    table.add_row("HFU (recompute counted)", f"{result.hfu * 100:.1f}%", "")
    table.add_row("ideal compute (100% MFU)", f"{result.ideal_compute_s:.4f} s", f"{result.ideal_compute_s / step * 100:.1f}%")
    for cat in CATEGORIES:
        secs = result.breakdown[cat]
        table.add_row(f"  {cat}", f"{secs:.4f} s", f"{secs / step * 100:.1f}%")
        if cat == "compute":
            for part, label in COMPUTE_LABELS.items():
                v = result.compute_breakdown.get(part, 0.0)
                table.add_row(f"    {label}", f"{v:.4f} s", f"{v / step * 100:.1f}%")
    if energy is not None:  # step.energy: the power model integrated over the step's timeline
        table.add_row("energy per step", f"{energy.facility_j / 3.6e6:.4g} kWh", f"PUE {energy.pue:.2f}")
        table.add_row("energy per token", f"{energy.j_per_token:.4g} J", f"{energy.j_per_token / 3.6:.4g} kWh/M")
        node_w = energy.node_j / max(energy.step_time * energy.num_gpus, 1e-30)
        table.add_row("mean power per GPU", f"{energy.mean_gpu_w:.0f} W", f"node +{node_w:.0f} W/GPU")
        shares = {k: v / energy.gpu_j * 100 for k, v in energy.by_activity_j.items()} if energy.gpu_j > 0 else {}
        table.add_row("  GPU energy dense/mem/comm/wait", "/".join(f"{v:.0f}" for v in shares.values()) + " %", "")
    cap = result.hbm_capacity / 2**30
    for m in result.memory:
        table.add_row(f"memory stage {m.stage} (GiB)", f"{m.total / 2**30:.1f} / {cap:.1f} GiB",
                      f"headroom {cap - m.total / 2**30:.1f} GiB; "
                      + " ".join(f"{k[0]}{v / 2**30:.1f}" for k, v in m.parts().items()))
    return table


def fabric_table(result: Result) -> Grid:
    """The hottest links of the streams' traffic and what each traffic class lost to sharing."""
    lost = result.fabric.get("lost_to_sharing_s", {})
    streams = "pipeline sends, DP buckets, gathers" + (", EP all-to-alls" if "ep" in lost else "")
    table = Grid(title=f"fabric: hottest links ({streams}); lost to sharing "
                        + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in lost.items()))
    for col in ("link", "GB per step", "time-averaged util"):
        table.add_column(col, justify="left" if col == "link" else "right")
    for row in result.fabric.get("hottest_links", []):
        table.add_row(str(row["link"]), f"{row['bytes'] / 1e9:.2f}", f"{row['utilisation'] * 100:.1f}%")
    return table


def collectives_table(result: Result) -> Grid:
    """Every distinct collective: size, time, algorithm, bus bandwidth, busiest link."""
    table = Grid(title="collectives (all concurrent groups on the fabric)")
    for col in ("kind", "axis", "MiB", "ms", "algorithm", "busbw GB/s", "busiest link", "util"):
        table.add_column(col, justify="left" if col in ("kind", "axis", "algorithm", "busiest link") else "right")
    for c in result.collectives:
        table.add_row(str(c["kind"]), str(c["axis"]), f"{c['size_bytes'] / 2**20:.1f}", f"{c['time_s'] * 1e3:.3f}",
                      str(c["algorithm"]), f"{c['bus_bandwidth_gbs']:.0f}", str(c["busiest_link"]),
                      f"{c['busiest_link_utilisation'] * 100:.0f}%")
    return table


def placement_table(sc: Any) -> Grid:
    """Rank -> device, server and (tp, cp, dp, pp) coordinates (first 64 ranks)."""
    placement = Placement(sc.plan, sc.cluster.gpus_per_node)
    table = Grid(title=f"placement (order {sc.plan.order}, first 64 ranks)")
    rows = placement.table()
    for col in rows[0]:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    return table


def run_options(mode: str | None, sharing: str | None, background: list[str], degraded: list[str], fabric_report: bool,
                co_tenants: bool, job_placement: str) -> tuple[ScenarioMode | None, FabricSharing, JobPlacement,
                                                                FabricLoad | None]:
    """The engine mode, fabric sharing, job placement and fabric load the options ask for, checked
    together (a co-tenant implies the flows of the symmetric engine, with the other jobs as the load)."""
    modes: tuple[ScenarioMode, ...] = ("symmetric", "full")
    chosen = choice("--mode", mode, modes) if mode is not None else None
    sharings: tuple[FabricSharing, ...] = ("static", "flows")
    shared = choice("--fabric-sharing", sharing, sharings) if sharing is not None else "flows" if co_tenants else "static"
    placements: tuple[JobPlacement, ...] = ("packed", "interleaved")
    placement = choice("--job-placement", job_placement, placements)
    load = fabric_load_option(background, degraded)
    if co_tenants and (load is not None or shared != "flows" or chosen == "full"):
        output.fail(ValueError("--co-tenant runs the flows of the symmetric engine with the other jobs as the load: "
                               "drop --background, --degraded, --fabric-sharing static and --mode full"))
    if (load is not None or fabric_report) and shared != "flows":
        output.fail(ValueError("--background, --degraded and --fabric-report need --fabric-sharing flows"))
    return chosen, shared, placement, load


def register(app: typer.Typer) -> None:
    """Add ``simulate`` to ``app``."""

    @app.command("simulate")
    def simulate_cmd(
        scenario: Path = typer.Argument(..., help="Scenario YAML (see README 'Scenario format')."),
        set_: list[str] = typer.Option([], "--set", help="Override a field, e.g. --set plan.tp=4."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the Result as JSON ('-': standard output)."),
        trace: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome trace (Perfetto)."),
        mode: Optional[str] = typer.Option(None, "--mode", help="symmetric (default) or full."),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile YAML (default: the accelerator's bundled profile)."),
        show_placement: bool = typer.Option(False, "--placement", help="Print the rank -> device mapping."),
        plot: Optional[Path] = typer.Option(None, "--plot", help="Write the compute-loss waterfall as PNG."),
        force: bool = typer.Option(False, "--force", help="Run even above the work limits (GPUs, engine events)."),
        sharing: Optional[str] = typer.Option(None, "--fabric-sharing", help="static (default: priced times) or flows "
                                              "(pipeline sends, DP buckets and gathers share the links over time)."),
        background: list[str] = typer.Option([], "--background", help="Other tenants' load, CLASS=FRACTION of "
                                             "capacity, e.g. nic=0.3 (needs --fabric-sharing flows)."),
        degraded: list[str] = typer.Option([], "--degraded", help="A slow link, 'U->V'=FRACTION of capacity left, "
                                           "e.g. 'gpu0->nic0=0.25' (quoted: the shell reads >; needs --fabric-sharing flows)."),
        fabric_report: bool = typer.Option(False, "--fabric-report", help="Print the hottest links and the time each "
                                           "traffic class lost to sharing (needs --fabric-sharing flows)."),
        co_tenants: list[Path] = typer.Option([], "--co-tenant", help="Another job's scenario on the same cluster "
                                              "(repeatable): this step beside it, its traffic on the shared links "
                                              "(implies --fabric-sharing flows; clustersim colocate)."),
        job_placement: str = typer.Option("packed", "--job-placement", help="With --co-tenant: packed (each job's "
                                          "servers together) or interleaved (one server of each in turn)."),
    ) -> None:
        """Simulate one training step of a scenario."""
        chosen, shared, placement, load = run_options(mode, sharing, background, degraded, fabric_report,
                                                      bool(co_tenants), job_placement)
        for option, path in (("--json", json_out), ("--trace", trace), ("--plot", plot)):
            output_file(option, path)
        sc = load_scenario(scenario, set_, force=force)
        profile = load_profile(calibration) if calibration else sc.profile
        beside_line, colocation = None, None
        if co_tenants:
            from clustersim.simulator.cli.colocate import beside  # the colocation machinery only when asked

            result, beside_line, colocation = beside((scenario, sc), list(co_tenants), set_, placement, profile, force)
        else:
            result = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=profile,
                              mode=chosen or sc.mode, seed=sc.seed, fabric_sharing=shared, fabric_load=load)
        shown = Shown(sc=sc, result=result, energy=step_energy(result, sc.cluster), calibration=calibration,
                      beside_line=beside_line, colocation=colocation)
        to_stdout = json_out is not None and str(json_out) == output.STDOUT
        if not to_stdout:
            print_step(shown, show_placement, fabric_report)
        say = output.err_console if to_stdout else console.console  # keep standard output pure JSON; rich on first use
        write_files(shown, json_out, plot, trace, say())


@dataclasses.dataclass(frozen=True)
class Shown:
    """What ``simulate`` prints and writes: the scenario, its step, the step's energy, the interval
    inputs (the ``--calibration`` profile, for its fitted interval) and, beside co-tenants, their line."""

    sc: Any
    result: Result
    energy: StepEnergy
    calibration: Optional[Path]
    beside_line: Optional[str]
    colocation: Optional[dict[str, Any]]

    @functools.cached_property
    def interval(self) -> Any:
        """The bundled interval of the prediction (None without the bundled table)."""
        return interval_of(self.result, self.sc.model) if INTERVALS_PATH.exists() else None

    @functools.cached_property
    def fitted(self) -> Optional[dict[str, Any]]:
        """The interval of a user's fitted profile (``calibrate fit --runs``), when it has one."""
        from clustersim.simulator.fitted_interval import fitted_interval_json

        return fitted_interval_json(self.calibration, self.result.step_time)


def print_step(shown: Shown, show_placement: bool, fabric_report: bool) -> None:
    """The step's table, its interval line and the optional tables, on the terminal."""
    from clustersim.simulator.fitted_interval import fitted_interval_text

    sc, result = shown.sc, shown.result
    title = f"{sc.model.name} on {sc.cluster.num_gpus}x {sc.cluster.accelerator.name} ({sc.cluster.name}) - {sc.plan.describe()}"
    console.print(result_table(result, title, shown.energy))
    if shown.beside_line:
        console.print(shown.beside_line)
    fitted, iv = shown.fitted, shown.interval
    if fitted:
        console.print(fitted_interval_text(fitted))
    elif iv is not None:
        console.print(f"80 % interval {iv.low_s:.3g}-{iv.high_s:.3g} s ({iv.regime}"
                      f"{', EXTRAPOLATED; nearest validated: ' + iv.nearest if iv.extrapolated else ''}; docs/VALIDATION.md)")
    if result.collectives:
        console.print(collectives_table(result))
    if show_placement:
        console.print(placement_table(sc))
    if fabric_report:
        console.print(fabric_table(result))


def write_files(shown: Shown, json_out: Optional[Path], plot: Optional[Path], trace: Optional[Path], say: Any) -> None:
    """The Result as JSON (with energy, intervals and colocation), the waterfall PNG, the trace."""
    result, iv, fitted = shown.result, shown.interval, shown.fitted
    if json_out:
        output.emit_json(output.stamped({**result.to_dict(), "energy": shown.energy.to_dict(),
                                         **({"interval": dataclasses.asdict(iv)} if iv else {}),
                                         **({"fitted_interval": fitted} if fitted else {}),
                                         **({"colocation": shown.colocation} if shown.colocation else {})}), json_out, say)
    if plot:
        from clustersim.reports.waterfall import write_waterfall  # matplotlib: only when plotting

        write_waterfall(result.to_dict(), plot)
        output.said(plot, say, "compute-loss waterfall")
    if trace:
        from clustersim.simulator.step import write_trace

        write_trace(result, trace)
        output.said(trace, say, "open in https://ui.perfetto.dev")
