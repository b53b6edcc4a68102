"""``clustersim scale``: a scaling-efficiency report (the best plan at every GPU count), with intervals.

Owns the command, the scaling table and the 80 % interval band of each row (``with_interval``).
Loaded when the command runs (``cli.lazy``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from clustersim import files
from clustersim.simulator.bounds import GPU_LIMIT
from clustersim.simulator.intervals import INTERVALS_PATH, interval_for, model_kind
from clustersim.simulator.profile import load_profile
from clustersim.simulator.cli.options import gpu_counts, output_dir
from clustersim.simulator.scenario import MAX_GPUS, apply_overrides, load_scenario, read_yaml

console = Console(width=None if sys.stdout.isatty() else 140)


def with_interval(row: dict[str, Any], kind: str, fitted: tuple[float, float] | None = None) -> dict[str, Any]:
    """A scaling row with the 80 % prediction interval of its throughput per GPU (the report's band),
    from the held-out residuals of its regime (``simulator.intervals``), or, for a profile fitted on
    a user's runs, the held-out interval of that fit (``fitted``: measured = predicted x [low, high]);
    rows without a step keep none."""
    step = row.get("step_time_s")
    if not isinstance(step, float) or not step > 0:
        return row
    if fitted is not None:
        per_gpu = float(row["tokens_per_s_per_gpu"])
        return {**row, "tokens_per_s_per_gpu_low": per_gpu / fitted[1], "tokens_per_s_per_gpu_high": per_gpu / fitted[0],
                "interval_extrapolated": False}
    if not INTERVALS_PATH.exists():
        return row
    iv = interval_for(step, kind, str(row.get("accelerator", "")), int(row["num_gpus"]))
    per_gpu = float(row["tokens_per_s_per_gpu"])
    return {**row, "tokens_per_s_per_gpu_low": per_gpu * step / iv.high_s,
            "tokens_per_s_per_gpu_high": per_gpu * step / iv.low_s, "interval_extrapolated": iv.extrapolated}


def scale_table(rows: list[dict[str, Any]], title: str = "scaling") -> Table:
    """Tokens/s/GPU, MFU, TFLOP/s/GPU, memory and plan per (series, GPUs), sorted by series then GPUs."""
    table = Table(title=title)
    for col in ("series", "GPUs", "plan", "step s", "tokens/s/GPU", "MFU", "TFLOP/s/GPU", "mem GiB", "status"):
        table.add_column(col, justify="left" if col in ("series", "plan", "status") else "right")
    for r in sorted(rows, key=lambda r: (str(r.get("series")), int(r.get("num_gpus") or 0))):
        ok = r.get("status") == "ok"
        mem = f"{r['peak_memory_gib']:.1f}/{r['hbm_capacity_gib']:.0f}" if ok else "-"
        table.add_row(str(r.get("series")), f"{r.get('num_gpus')}", str(r.get("plan_label", "")),
                      f"{r['step_time_s']:.3f}" if ok else "-", f"{r['tokens_per_s_per_gpu']:,.0f}" if ok else "-",
                      f"{r['mfu'] * 100:.1f}%" if ok else "-", f"{r['tflops_per_gpu']:.0f}" if ok else "-", mem,
                      "ok" if ok else str(r.get("error", ""))[:60])
    return table


def register(app: typer.Typer) -> None:
    """Add ``scale`` to ``app``."""

    @app.command("scale")
    def scale_cmd(
        scenario: Path = typer.Argument(..., help="Scenario YAML: model, training, cluster preset."),
        gpus: str = typer.Option("64,128,256,512,1024", "--gpus", help="Comma-separated GPU counts."),
        out: Path = typer.Option(Path("report"), "--out", help="Output directory (created)."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field."),
        cost_per_gpu_hour: Optional[float] = typer.Option(None, "--cost-per-gpu-hour", help="$ per GPU-hour."),
        force: bool = typer.Option(False, "--force", help="Run even above the work limits (GPUs, engine events)."),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile YAML (default: the accelerator's bundled profile)."),
    ) -> None:
        """Scaling-efficiency report (strong scaling: fixed global batch): the best plan at every scale vs naive DP replicas."""
        import pandas as pd  # heavy (pandas, matplotlib): imported when the command runs
        from rich.progress import Progress

        from clustersim.reports.report import write_scaling_report
        from clustersim.simulator.sweep import scaling_rows

        counts = gpu_counts("--gpus", gpus, MAX_GPUS if force else GPU_LIMIT)
        output_dir("--out", out)
        base = apply_overrides(read_yaml(scenario), set_)
        if calibration:
            load_profile(calibration)  # a bad profile is one clear error before any point runs
            base["calibration"] = str(calibration.resolve())
        sc = load_scenario(scenario, set_, force=force)  # validate the scenario once, with a clear error, before the sweep
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("simulating scales", total=None)
            rows = scaling_rows(base, counts, progress=lambda i, n: bar.update(task, completed=i, total=n))
        from clustersim.simulator.fitted_interval import read_interval

        fitted = read_interval(calibration) if calibration else None  # a user's cluster: calibrate fit --runs
        rows = [with_interval(row, model_kind(sc.model.layer_pattern, sc.model.is_moe), fitted) for row in rows]
        title = (f"{sc.model.name} on {sc.cluster.accelerator.name} ({sc.cluster.name}), {min(counts):,}-{max(counts):,} GPUs: "
                 f"strong scaling at global batch {sc.training.global_batch_size} x {sc.training.seq_len} tokens")
        page = files.replace_dir(out, lambda folder: write_scaling_report(  # the old report goes only as a whole
            pd.DataFrame(rows), folder, title=title, cost_per_gpu_hour=cost_per_gpu_hour))
        console.print(scale_table(rows, title))
        console.print(f"wrote {page} and its figures and tables in {out}")
