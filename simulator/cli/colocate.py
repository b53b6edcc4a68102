"""``clustersim colocate``: two or more scenarios' jobs side by side on one cluster.

Owns the command and its tables. The shared cluster is the first scenario's cluster section
grown to hold every job on whole servers (whole NVLink domains where one spans several servers);
every other scenario must describe the same cluster (its ``num_gpus`` aside). The work is
``clustersim.simulator.step.colocate``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

import typer

from clustersim.simulator.cli import output
from clustersim.simulator.cli.options import OptionError, choice, output_file
from clustersim.simulator.cli.plain import Grid, Printer
from clustersim.simulator.scenario import Scenario, apply_overrides, load_scenario, read_yaml
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.step import Colocation, Job, Result, colocate_jobs
from clustersim.topologies import Cluster, load_cluster
from clustersim.topologies.colocate import JobPlacement, job_block, joint_size

console = Printer(width=None if sys.stdout.isatty() else 140)


def cluster_section(path: Path, overrides: list[str]) -> dict[str, Any]:
    """The ``cluster`` mapping of a scenario file after ``--set``."""
    section = apply_overrides(read_yaml(path), overrides).get("cluster")
    return dict(section) if isinstance(section, Mapping) else {}


def same_cluster(first: tuple[Path, Mapping[str, Any]], other: tuple[Path, Mapping[str, Any]]) -> None:
    """Every key of the two cluster sections but ``num_gpus`` agrees, else an ``OptionError`` naming it."""
    (p0, c0), (p1, c1) = first, other
    for key in sorted((set(c0) | set(c1)) - {"num_gpus"}):
        if c0.get(key) != c1.get(key):
            raise OptionError(f"{p1}: cluster.{key} = {c1.get(key)!r} but {p0} has {c0.get(key)!r}; jobs that share a "
                              "cluster need the same cluster section (num_gpus may differ)")


def shared_cluster(section: Mapping[str, Any], sizes: list[int]) -> Cluster:
    """The cluster ``section`` describes, with devices for every job on whole blocks (a block's
    size, an NVLink domain, can grow with the cluster: built until it holds them)."""
    joint = load_cluster({**section, "num_gpus": sum(sizes)})
    for _ in range(4):
        need = joint_size(sizes, job_block(joint))
        if need <= joint.num_gpus:
            return joint
        joint = load_cluster({**section, "num_gpus": need})
    return joint  # job_views names the shortfall


def colocation_table(result: Colocation, plans: Mapping[str, str]) -> Grid:
    """Each job's step alone and beside the others, and what each traffic class lost."""
    table = Grid(title=f"{len(result.jobs)} jobs on {result.num_gpus} GPUs of {result.cluster} ({result.placement}; "
                       f"{result.iterations} iterations{'' if result.converged else ', NOT converged'})", show_header=True)
    for col in ("job", "GPUs", "plan", "step alone", "step shared", "slowdown", "if bursts align",
                "lost to sharing pp / dp / ep"):
        table.add_column(col, justify="left" if col in ("job", "plan") else "right")
    for o in result.jobs:
        lost = o.shared.fabric.get("lost_to_sharing_s", {})
        table.add_row(o.name, str(o.alone.num_gpus), plans[o.name], f"{o.alone.step_time:.4f} s", f"{o.shared.step_time:.4f} s",
                      f"{o.slowdown * 100:+.2f}%", f"{o.aligned.step_time:.4f} s ({o.slowdown_aligned * 100:+.2f}%)",
                      " / ".join(f"{lost.get(k, 0.0):.4f}" for k in ("pp", "dp", "ep")) + " s")
    return table


def shared_links_table(result: Colocation) -> Grid:
    """The busiest links two or more jobs use, with each job's time-averaged utilisation."""
    table = Grid(title="links the jobs share (utilisation of capacity, time-averaged over each job's step)", show_header=True)
    table.add_column("link")
    for o in result.jobs:
        table.add_column(o.name, justify="right")
    for link in result.shared_links:
        table.add_row(link["link"], *(f"{link[f'utilisation {o.name}'] * 100:.1f}%" for o in result.jobs))
    if not result.shared_links:
        table.add_row("(none: no link carries two jobs' stream traffic)", *("" for _ in result.jobs))
    return table


def beside(main: tuple[Path, Scenario], others: list[Path], overrides: list[str], placement: JobPlacement,
           profile: CalibrationProfile | None, force: bool) -> tuple[Result, str, dict[str, Any]]:
    """``main``'s step beside the jobs of ``others`` on one cluster (``simulate --co-tenant``):
    its shared Result, a line with its step alone, shared and with the bursts aligned, and the
    whole colocation as JSON."""
    path, sc = main
    loaded = [dataclasses.replace(sc, profile=profile or sc.profile),
              *(load_scenario(p, overrides, force=force) for p in others)]
    sections = [(p, cluster_section(p, overrides)) for p in (path, *others)]
    for other in sections[1:]:
        same_cluster(sections[0], other)
    joint = shared_cluster(sections[0][1], [s.plan.world_size for s in loaded])
    out = colocate_jobs(_jobs(loaded), joint, placement)
    me = out.jobs[0]
    line = (f"beside {', '.join(o.name for o in out.jobs[1:])} ({placement} on {out.num_gpus} GPUs, {out.iterations} "
            f"iterations{'' if out.converged else ', NOT converged'}): alone {me.alone.step_time:.4f} s, shared "
            f"{me.shared.step_time:.4f} s ({me.slowdown * 100:+.2f}%), bursts aligned {me.aligned.step_time:.4f} s "
            f"({me.slowdown_aligned * 100:+.2f}%)")
    return me.shared, line, out.to_dict()


def _jobs(scenarios: list[Scenario]) -> list[Job]:
    names = [sc.name for sc in scenarios]
    return [Job(name=n if names.count(n) == 1 else f"{n} ({i + 1})", model=sc.model, training=sc.training, plan=sc.plan,
                profile=sc.profile) for i, (n, sc) in enumerate(zip(names, scenarios))]


def register(app: typer.Typer) -> None:
    """Add ``colocate`` to ``app``."""

    @app.command("colocate")
    def colocate_cmd(
        scenarios: list[Path] = typer.Argument(..., help="Two or more scenario YAMLs: the jobs, each on its own GPUs."),
        placement: str = typer.Option("packed", "--placement", help="packed (each job's servers together) or "
                                      "interleaved (one server, or NVLink domain, of each job in turn)."),
        set_: list[str] = typer.Option([], "--set", help="Override a field of every scenario, e.g. --set training.seq_len=4096."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the outcome as JSON ('-': standard output)."),
        force: bool = typer.Option(False, "--force", help="Run even above the work limits (GPUs, engine events)."),
    ) -> None:
        """Jobs side by side on one cluster: each one's step alone and with the others' traffic."""
        if len(scenarios) < 2:
            raise OptionError(f"colocate: {len(scenarios)} scenario given; give two or more")
        chosen: JobPlacement = choice("--placement", placement, ("packed", "interleaved"))
        output_file("--json", json_out)
        loaded = [load_scenario(p, set_, force=force) for p in scenarios]
        sections = [(p, cluster_section(p, set_)) for p in scenarios]
        for other in sections[1:]:
            same_cluster(sections[0], other)
        joint = shared_cluster(sections[0][1], [sc.plan.world_size for sc in loaded])
        result = colocate_jobs(_jobs(loaded), joint, chosen)
        to_stdout = json_out is not None and str(json_out) == output.STDOUT
        if not to_stdout:
            plans = {j.name: sc.plan.describe() for j, sc in zip(result.jobs, loaded)}
            console.print(colocation_table(result, plans))
            console.print(shared_links_table(result))
        if json_out:
            say = output.err_console if to_stdout else console.console
            output.emit_json(output.stamped(result.to_dict()), json_out, say())
