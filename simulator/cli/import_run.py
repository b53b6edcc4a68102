"""``clustersim import-run ARGS LOG``: a job's configuration and training log -> an imported run folder.

Owns the command's options and its table. With a ``calibrate measure`` folder as ARGS (and no
LOG) every measured plan becomes a run folder, so this machine's runs and a cluster's logs take
the same fit path. Reading, checking and writing are ``clustersim.simulator.calibration.imported_runs``'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clustersim.simulator.calibration import ImportedRun, import_measured, import_run, write_run
from clustersim.simulator.errors import CalibrationError, OutOfMemoryError
from clustersim.simulator.scenario import Scenario
from clustersim.simulator.step import simulate_step as simulate

console = Console(width=None if sys.stdout.isatty() else 140)


def run_table(run: ImportedRun, sc: Scenario, predicted: float | None, out: Path | None = None) -> Table:
    """The steady-state step, its marks and what the import ignored or assumed."""
    table = Table(title=f"{run.name}: {run.framework} on {run.provenance['num_gpus']}x {sc.cluster.accelerator.name} "
                        f"({sc.cluster.name}) - {sc.plan.describe()}")
    table.add_column("field")
    table.add_column("value")
    s = run.stats
    table.add_row("family", run.family)
    table.add_row("steady median / p99", f"{s.median_s * 1e3:.1f} / {s.p99_s * 1e3:.1f} ms over {s.records} records")
    table.add_row("warm-up dropped", f"{s.warmup_steps} steps")
    for mark, steps in sorted(s.marked.items()):
        table.add_row(f"{mark} records (left out)", ", ".join(map(str, steps[:12])) + (" ..." if len(steps) > 12 else ""))
    if predicted is not None:
        table.add_row("predicted (default profile)", f"{predicted * 1e3:.1f} ms ({predicted / s.median_s - 1:+.1%})")
    ignored = run.provenance["ignored"]
    if ignored:
        table.add_row(f"ignored keys ({len(ignored)})", ", ".join(ignored[:15]) + (" ..." if len(ignored) > 15 else ""))
    seen = run.provenance.get("longrun")
    if seen and seen["interruptions"]:
        table.add_row("interruptions seen", f"{seen['interruptions']} in {seen['hours']:.1f} h, restart "
                      f"{seen['restart_min']:.1f} min (detection + relaunch + load), {seen['lost_steps']} steps redone")
        table.add_row("for clustersim goodput", f"--run {out or run.name}: the measured step, MTBF {seen['mtbf_hours']:.2f} h and "
                      f"restart {seen['restart_min']:.1f} min (one log: a small sample of the failure rate)")
    slow = run.provenance.get("slow_rank")
    if slow:
        table.add_row("slow rank (per-rank timings)", slow["text"])
    for note in run.provenance["notes"]:
        table.add_row("note", escape(note))  # notes quote log text such as torchrun's [rank0]: prefix
    return table


def register(app: typer.Typer) -> None:
    """Add ``import-run`` to ``app``."""

    @app.command("import-run")
    def import_run_cmd(
        args: Path = typer.Argument(..., help="Job configuration: Megatron arguments/launch script, NeMo or "
                                    "Megatron-Bridge YAML, torchtitan TOML, llm-foundry YAML; or a calibrate measure folder."),
        log: Optional[Path] = typer.Argument(None, help="The job's training log (rank 0 / last rank stdout)."),
        out: Path = typer.Option(..., "--out", help="Run folder to write (scenario.yaml, run.json)."),
        cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster preset the job ran on, e.g. dgx-h100."),
        gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs the job ran on (checked against the files)."),
        family: Optional[str] = typer.Option(None, "--family", help="Run family for cross-validation (default: the model)."),
        warmup: Optional[int] = typer.Option(None, "--warmup", help="Warm-up steps to drop (default: until within 10% of the steady median)."),
        drop_nan: bool = typer.Option(False, "--drop-nan", help="Leave NaN-loss records out instead of refusing the log."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field, e.g. --set model.vocab_size=128256."),
        predict: bool = typer.Option(True, "--predict/--no-predict", help="Also simulate the scenario with the default profile."),
    ) -> None:
        """Turn a job's configuration and log into a scenario and its measured steady-state step time."""
        if log is None:
            if not (args.is_dir() and (args / "steps.json").is_file()):
                raise CalibrationError(f"import-run {args}: give the job's LOG, or a calibrate measure folder (with steps.json)")
            for folder in import_measured(args, out):
                console.print(f"wrote {folder}")
            return
        if cluster is None:
            raise CalibrationError("--cluster missing: name the cluster preset the job ran on (clustersim presets)")
        run, sc = import_run(args, log, cluster={"preset": cluster}, gpus=gpus, family=family, warmup=warmup,
                             overrides=set_, drop_nan=drop_nan, name=out.name)
        predicted = None
        if predict:  # a plan the simulator rejects is an inconsistent job: exit 2 before anything is written
            try:
                predicted = float(simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile).step_time)
            except OutOfMemoryError as exc:
                console.print(f"[yellow]note:[/yellow] no prediction, the simulator predicts out of memory: {str(exc).splitlines()[0]}")
        write_run(run, out)
        console.print(run_table(run, sc, predicted, out))
        console.print(f"wrote {out / 'scenario.yaml'} and {out / 'run.json'}")
