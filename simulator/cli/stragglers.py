"""``clustersim stragglers``: the step-time distribution under compute jitter and slow devices.

Full mode (every DP replica simulated, the slowest rank gating each synchronous collective) up to
``--full-limit`` GPUs; beyond it the vectorised closed form of ``clustersim.simulator.longrun.stragglers`` over the
symmetric step's compute and communication time. Prints p50/p99/max and the ranks that wait least
(the stragglers: everyone else waits for them).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from clustersim.simulator.profile import load_profile
from clustersim.simulator.step import simulate_step as simulate
from clustersim.simulator.bounds import GPU_LIMIT
from clustersim.simulator.cli.options import int_range, real_range
from clustersim.simulator.scenario import load_scenario
from clustersim.simulator.longrun import (
    StepTimeDistribution,
    StragglerSpec,
    SymmetricStep,
    step_time_distribution,
)

console = Console(width=None if sys.stdout.isatty() else 140)


def distribution_table(dist: StepTimeDistribution, title: str, top: int = 5) -> Table:
    """Percentiles of the step time and the ranks that waited least."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in (("no-straggler step", dist.base_step_time), ("mean", dist.mean), ("p50", dist.p50),
                        ("p99", dist.p99), ("max", dist.max)):
        table.add_row(name, f"{value:.4f} s ({value / dist.base_step_time - 1:+.1%})")
    order = np.argsort(dist.rank_wait_time)[:top]
    table.add_row("least-waiting ranks (stragglers)", ", ".join(f"{int(r)} ({dist.rank_wait_time[r]:.3f} s)" for r in order))
    return table


def register(app: typer.Typer) -> None:
    """Add ``stragglers`` to ``app``."""

    @app.command("stragglers")
    def stragglers_cmd(
        scenario: Path = typer.Argument(..., help="Scenario YAML."),
        steps: int = typer.Option(20, "--steps", help="Steps to draw."),
        jitter_cv: float = typer.Option(0.02, "--jitter-cv", help="Per-step, per-device compute jitter (coefficient of variation)."),
        slow_fraction: float = typer.Option(0.0, "--slow-fraction", help="Fraction of devices that are persistently slow."),
        slow_factor: float = typer.Option(1.0, "--slow-factor", help="Compute time multiplier of a slow device."),
        seed: int = typer.Option(0, "--seed", help="Seed of the numpy Generator."),
        full_limit: int = typer.Option(256, "--full-limit", help="Largest GPU count simulated in full mode."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field."),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile YAML (default: the scenario's or the accelerator's bundled profile)."),
    ) -> None:
        """Step-time distribution (p50, p99, max) and per-rank wait with stragglers."""
        int_range("--steps", steps, 1, 100_000)
        real_range("--jitter-cv", jitter_cv, 0.0, 10.0)
        real_range("--slow-fraction", slow_fraction, 0.0, 1.0)
        real_range("--slow-factor", slow_factor, 1.0, 1000.0)
        int_range("--full-limit", full_limit, 1, GPU_LIMIT)
        sc = load_scenario(scenario, set_)
        if calibration is not None:
            sc = dataclasses.replace(sc, profile=load_profile(calibration))
        spec = StragglerSpec(jitter_cv=jitter_cv, slow_device_fraction=slow_fraction, slow_device_factor=slow_factor)
        rng = np.random.default_rng(seed)
        if sc.cluster.num_gpus <= full_limit:
            dist = step_time_distribution(sc, spec, steps, rng)
            how = "full mode"
        else:
            base = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile, seed=sc.seed)
            compute = base.breakdown["compute"]
            dist = step_time_distribution(SymmetricStep(compute_time=compute, comm_time=base.step_time - compute,
                                                        num_ranks=base.num_gpus), spec, steps, rng)
            how = "closed form over the symmetric step"
        console.print(distribution_table(dist, f"{sc.model.name} on {sc.cluster.num_gpus} GPUs, {steps} steps ({how})"))
