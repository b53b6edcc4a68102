"""The ``clustersim schema`` subcommand: the JSON Schema of a scenario file.

Editors validate scenario YAML against it (e.g. the YAML language server's
``# yaml-language-server: $schema=scenario.schema.json``). The schema itself is built by
``clustersim.simulator.scenario.scenario_json_schema`` from the same pydantic models that check
scenarios; this module only prints or writes it. ``clustersim.simulator.cli.app`` calls
``register(app)``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from clustersim import files
from clustersim.simulator.cli.options import output_file
from clustersim.simulator.scenario import scenario_json_schema


def register(app: typer.Typer) -> None:
    """Add the ``schema`` command to the clustersim app."""
    app.command("schema")(schema_command)


def schema_command(
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the schema here (default: stdout).")] = None,
) -> None:
    """Print the JSON Schema of a scenario file (model, training, cluster, plan, ...)."""
    output_file("--out", out)
    text = json.dumps(scenario_json_schema(), indent=2) + "\n"
    if out is None or str(out) == "-":
        sys.stdout.write(text)
        return
    files.write_atomic(out, text)
    typer.echo(f"wrote {out}", err=True)
