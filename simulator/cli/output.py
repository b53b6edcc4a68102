"""Where a command's files go: a path (written atomically, 0644, and said) or ``-`` (standard output).

Owns the CLI convention that ``--json -`` / ``--csv -`` print to standard output instead of a file,
that every written file is announced (``wrote PATH``), and the header every JSON and CSV output
carries: what was simulated (``Result.scenario()`` or the search's scenario), the clustersim
version and the UTC date it was written. It computes nothing.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NoReturn

import typer

from clustersim import files
from clustersim.simulator import __version__

if TYPE_CHECKING:  # annotations only: the CLI starts without pandas, and prints plain text without rich (cli.plain)
    import pandas as pd
    from rich.console import Console

STDOUT = "-"

EXIT_BAD_INPUT = 2
"""Exit status of every user error (a bad field, value, file or option)."""


def error_line(message: object) -> str:
    """The one red line a user error prints: the first line of the message, markup escaped."""
    from rich.markup import escape

    text = str(message).splitlines()[0] if str(message) else type(message).__name__
    return f"[red]error:[/red] {escape(text)}"


def fail(message: object, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``message`` as the one red error line on stderr and end the command with ``code``."""
    err_console().print(error_line(message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def err_console() -> Console:
    """A rich console on standard error (rich imported here: a command that prints plain text needs none)."""
    from rich.console import Console

    return Console(stderr=True)


def written_at() -> str:
    """Now, UTC, to the second (ISO 8601)."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def stamped(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with the clustersim version and the write date added."""
    return {**doc, "clustersim_version": __version__, "written_at": written_at()}


def emit_json(doc: Mapping[str, Any], path: Path | str, console: Console) -> None:
    """Write ``doc`` as JSON to ``path``, or print it when ``path`` is ``-``."""
    if str(path) == STDOUT:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return
    files.write_json(path, doc)
    console.print(f"wrote {path}")


def emit_csv(frame: pd.DataFrame, path: Path | str, console: Console, header: Mapping[str, Any] | None = None) -> None:
    """Write ``frame`` as CSV (``# key: value`` header lines first) to ``path``, or print it at ``-``."""
    buf = io.StringIO()
    for k, v in (header or {}).items():
        buf.write(f"# {k}: {v}\n")
    frame.to_csv(buf, index=False)
    if str(path) == STDOUT:
        sys.stdout.write(buf.getvalue())
        return
    files.write_atomic(path, buf.getvalue())
    console.print(f"wrote {path}")


def said(path: Path | str, console: Console, what: str = "") -> None:
    """Announce a file a command wrote."""
    console.print(f"wrote {path}" + (f" ({what})" if what else ""))
