"""The ``clustersim collective`` subcommand: an nccl-tests-like sweep of one collective.

Owns the command's options, size parsing (``1KiB..16GiB`` or ``1MiB,64MiB``), the choice of
groups (``--group-size`` or ``--axis tp|dp``), the table (plain text where rich's would be: ``cli.plain``)
and the optional PNG plot. It prices
nothing itself (``clustersim.simulator.network.collectives``) and builds no cluster (``topologies.presets``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np
import typer

from clustersim.files import write_atomic
from clustersim.simulator.bounds import GPU_LIMIT
from clustersim.simulator.cli import output
from clustersim.simulator.cli.plain import Grid, Printer
from clustersim.simulator.profile import default_profile, load_profile
from clustersim.simulator.network import (
    CollectiveCost,
    CollectiveError,
    collective_kind,
    price_collective,
)
from clustersim.topologies.presets import get_cluster

if TYPE_CHECKING:  # annotations only: the CLI starts without pandas (and prints plain tables without rich)
    import pandas as pd
    from rich.console import Console

UNITS: dict[str, int] = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6,
                         "mib": 2**20, "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tib": 2**40}
"""Size suffixes (case-insensitive); KiB/MiB/GiB are binary, KB/MB/GB decimal."""


def parse_size(text: str) -> int:
    """``"64MiB"`` -> 67108864; error names the text and the accepted form."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise CollectiveError(f"--sizes: '{text}' is not a size; write e.g. 1024, 64KiB, 1MiB or 16GiB")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def parse_sizes(text: str) -> list[int]:
    """``"1KiB..16GiB"`` -> powers of two from 1 KiB to 16 GiB; ``"1MiB,8MiB"`` -> that list."""
    if ".." in text:
        lo, hi = (parse_size(t) for t in text.split("..", 1))
        if not 0 < lo <= hi:
            raise CollectiveError(f"--sizes: range {text} must go from a positive size up to a larger one")
        return [int(lo * 2**k) for k in range(int(np.floor(np.log2(hi / lo))) + 1)]
    return [parse_size(t) for t in text.split(",") if t.strip()]


def make_groups(num_gpus: int, gpus_per_node: int, group_size: int | None, axis: str | None) -> list[list[int]]:
    """Every concurrent group: consecutive blocks of ``group_size``; ``tp`` = one node each;
    ``dp`` = one GPU per node (same local index); default one group of all GPUs."""
    ids = np.arange(num_gpus)
    if axis is not None and axis not in ("tp", "dp"):
        raise CollectiveError(f"--axis = '{axis}' is unknown; use tp (inside nodes) or dp (across nodes)")
    if axis == "dp":
        return ids.reshape(-1, gpus_per_node).T.tolist()
    size = gpus_per_node if axis == "tp" else (group_size or num_gpus)
    if size < 1 or num_gpus % size:
        raise CollectiveError(f"--group-size = {size} must divide --gpus = {num_gpus}")
    return ids.reshape(-1, size).tolist()


def _table(kind: str, sizes: list[int], costs: list[CollectiveCost], title: str) -> Grid:
    table = Grid(title=title)
    for col in ("size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm"):
        table.add_column(col, justify="right" if col != "algorithm" else "left")
    for s, c in zip(sizes, costs):
        table.add_row(f"{s}", f"{c.time * 1e6:.2f}", f"{c.alg_bandwidth / 1e9:.2f}", f"{c.bus_bandwidth / 1e9:.2f}",
                      c.algorithm)
    return table


def _pipe_width() -> int:
    """The width rich gives a console that is no terminal: ``COLUMNS`` when it is a number, else 80."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else 80


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def write_plot(path: Path, sizes: list[int], costs: list[CollectiveCost], title: str) -> Path:
    """Bus bandwidth against size (log x) as PNG, written atomically."""
    from clustersim.reports.curves import plot_bus_bandwidth  # heavy (pandas/matplotlib): imported when the command runs
    from clustersim.reports.plots import png_bytes

    return write_atomic(path, png_bytes(plot_bus_bandwidth(sizes, [c.bus_bandwidth for c in costs], title)))


def collective(
    cluster: str = typer.Option("dgx-h100", "--cluster", help="Cluster preset name."),
    gpus: int = typer.Option(8, "--gpus", help="Number of GPUs in the cluster.", min=1, max=GPU_LIMIT),
    kind: str = typer.Option("all_reduce", "--kind", help="all_reduce, reduce_scatter, all_gather, all_to_all, "
                             "broadcast or send_recv."),
    group_size: Optional[int] = typer.Option(None, "--group-size", help="Ranks per group (all groups run at once)."),
    axis: Optional[str] = typer.Option(None, "--axis", help="tp: one group per node; dp: one GPU per node."),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="Force an algorithm (default: selector)."),
    sizes: str = typer.Option("1KiB..16GiB", "--sizes", help="Range a..b (powers of two) or a comma list."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write busbw vs size to this PNG."),
    csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write the sweep as CSV ('-': standard output)."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile YAML (default: the accelerator's bundled profile)."),
    profile: Optional[Path] = typer.Option(None, "--profile", hidden=True, help="Renamed: use --calibration."),
) -> None:
    """Sweep one collective over message sizes on a cluster preset (nccl-tests style)."""
    try:
        if profile is not None:
            raise CollectiveError(f"--profile {profile} was renamed; pass --calibration {profile}")
        clus = get_cluster(cluster, gpus)
        prof = load_profile(calibration) if calibration else default_profile(clus.accelerator.name)
        groups = make_groups(clus.num_gpus, clus.gpus_per_node, group_size, axis)
        size_list = parse_sizes(sizes)
        ranks = np.asarray(groups, dtype=np.int64)  # once, not per size
        costs = [price_collective(collective_kind(kind), s, ranks, clus, prof, algorithm) for s in size_list]
    except ValueError as exc:
        output.fail(exc)
    title = (f"{kind} on {cluster} x{gpus} ({clus.accelerator.name}, {clus.fabric}): {len(groups)} group(s) of "
             f"{len(groups[0])}; profile {prof.name} (fit {prof.fit_date or 'not recorded'})")
    to_stdout = csv_out is not None and str(csv_out) == output.STDOUT
    printer = Printer(width=None if sys.stdout.isatty() else _pipe_width())
    if not to_stdout:
        printer.print(_table(kind, size_list, costs, title))
    if csv_out is None and plot is None:
        return
    say = _stderr_console() if to_stdout else printer.console()  # rich only for the "wrote ..." lines
    if csv_out is not None:
        header = {"kind": kind, "cluster": cluster, "num_gpus": gpus, "accelerator": clus.accelerator.name,
                  "fabric": clus.fabric, "groups": len(groups), "group_size": len(groups[0]), "profile": prof.name,
                  "profile_fit_date": prof.fit_date or "not recorded"}
        output.emit_csv(sweep_frame(size_list, costs), csv_out, say, output.stamped(header))
    if plot is not None:
        write_plot(plot, size_list, costs, title)
        output.said(plot, say, "bus bandwidth against size")


def sweep_frame(sizes: list[int], costs: list[CollectiveCost]) -> pd.DataFrame:
    """One row per size: bytes, seconds, algorithm and bus bandwidth in bytes/s."""
    import pandas as pd  # heavy: imported when a table is written

    return pd.DataFrame({"size_bytes": sizes, "time_s": [c.time for c in costs],
                         "alg_bandwidth_bytes_per_s": [c.alg_bandwidth for c in costs],
                         "bus_bandwidth_bytes_per_s": [c.bus_bandwidth for c in costs],
                         "algorithm": [c.algorithm for c in costs]})


def register(app: typer.Typer) -> None:
    """Add the ``collective`` command to ``app``."""
    app.command("collective")(collective)
