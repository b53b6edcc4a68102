"""``clustersim search``: the best plans for a scenario's model on N GPUs, with both tiers' times."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from clustersim.simulator.bounds import GPU_LIMIT
from clustersim.simulator.calibration.profile import load_profile
from clustersim.simulator.scenario import load_scenario
from clustersim.simulator.search.search import SearchReport, search

console = Console(width=None if sys.stdout.isatty() else 140)


def losses(breakdown: dict[str, float], step: float, n: int = 3) -> str:
    """The ``n`` largest non-compute causes as ``tp 9% bubble 6%``."""
    parts = sorted(((v, k) for k, v in breakdown.items() if k != "compute" and v > 0), reverse=True)[:n]
    return " ".join(f"{k.replace('exposed_', '')} {v / step * 100:.0f}%" for v, k in parts)


def report_table(rep: SearchReport, title: str) -> Table:
    """The ranked plans: step time, MFU, memory, both tiers and where the time goes."""
    table = Table(title=title)
    for col in ("#", "plan", "step s", "MFU", "GiB", "analytic", "losses"):
        table.add_column(col, justify="left" if col in ("plan", "losses") else "right")
    for i, r in enumerate(rep.ranked, 1):
        if r.result is None:
            table.add_row(str(i), r.plan.describe(), "-", "-", "-", f"{r.estimate.step_time:.3f}", r.error[:40])
            continue
        res = r.result
        table.add_row(str(i), r.plan.describe(), f"{res.step_time:.3f}", f"{res.mfu * 100:.1f}%",
                      f"{res.peak_memory / 2**30:.0f}", f"{r.disagreement * 100:+.1f}%",
                      losses(dict(res.breakdown), res.step_time))
    return table


def register(app: typer.Typer) -> None:
    """Add ``search`` to ``app``."""

    @app.command("search")
    def search_cmd(
        scenario: Path = typer.Argument(..., help="Scenario YAML; its plan is ignored."),
        gpus: Optional[int] = typer.Option(None, "--gpus", help="GPU count (default: the scenario's).", min=1, max=GPU_LIMIT),
        top: int = typer.Option(5, "--top", help="How many plans to print.", min=1, max=1000),
        objective: str = typer.Option("time", "--objective", help="time or cost (needs cluster.cost_per_gpu_hour)."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field."),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile YAML."),
    ) -> None:
        """Enumerate every valid plan, rank by the analytical tier, re-price the shortlist with the engine."""
        if objective not in ("time", "cost"):
            raise typer.BadParameter("--objective must be time or cost")
        sc = load_scenario(scenario, [*set_, *([f"cluster.num_gpus={gpus}"] if gpus is not None else [])])
        profile = load_profile(calibration) if calibration else sc.profile
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("pricing plans", total=None)
            rep = search(sc.model, sc.training, sc.cluster, top=top, objective=objective, profile=profile,  # type: ignore[arg-type]
                         progress=lambda n: bar.update(task, completed=n))
        title = (f"{sc.model.name} on {sc.cluster.num_gpus}x {sc.cluster.accelerator.name}: {rep.candidates} candidates, "
                 f"{rep.valid} valid, {rep.fitting} fit; analytic tier {rep.valid / max(rep.analytic_seconds, 1e-9):,.0f} plans/s")
        console.print(report_table(rep, title))
        if not rep.ranked:
            raise ValueError("no plan fits in memory; try more GPUs, a smaller global batch or a bigger accelerator")


