"""The ``clustersim`` command line: the one place that ties workloads, topologies, simulator and reports.

Each subcommand reads YAML or preset names, prints a rich table (``simulate``: plain text where rich's would
be plain, ``cli.plain``) and writes files atomically.
Every user error (a ``ValueError`` from any package) becomes one red line and exit status 2.
Every subcommand is owned by its module and added by its ``register(app)`` when it runs
(``cli.lazy``: ``clustersim --help`` imports none of them, ``clustersim simulate`` only its own).
"""

from __future__ import annotations

import sys

import typer

from clustersim.collector import batched
from clustersim.simulator import __version__
from clustersim.simulator.cli import output
from clustersim.simulator.cli.lazy import LazyGroup

app = typer.Typer(cls=LazyGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="clustersim: predict distributed training step time, MFU and memory.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clustersim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the clustersim version and exit.")) -> None:
    """clustersim: predict distributed training step time, MFU and memory."""


def main() -> None:
    """Entry point, and the one error path: every user error is one red line and exit status 2.

    Click's own usage errors (a missing argument, an option out of its range, an unknown
    command) get the same line, naming the option, instead of click's boxed usage text.
    """
    try:
        with batched():  # fewer, larger young collections (clustersim.collector)
            code = app(standalone_mode=False)
    except typer.Abort:  # Ctrl-C outside a command's own handling
        output.err_console().print("[yellow]interrupted[/yellow]")
        sys.exit(130)
    except (ValueError, OSError, KeyError) as exc:  # OSError: a file the user named cannot be read or written
        output.err_console().print(output.error_line(exc), soft_wrap=True)
        sys.exit(output.EXIT_BAD_INPUT)
    except Exception as exc:
        if not _usage_error(exc):
            raise
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            typer.echo(ctx.get_help())  # `clustersim` alone prints the help, as before
            sys.exit(output.EXIT_BAD_INPUT)  # as click does: a command was expected
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        output.err_console().print(output.error_line(f"{exc.format_message()}{hint}"), soft_wrap=True)  # type: ignore[attr-defined]  # click's UsageError, checked by _usage_error
        sys.exit(output.EXIT_BAD_INPUT)
    sys.exit(code if isinstance(code, int) else 0)


def _usage_error(exc: BaseException) -> bool:
    """True for click's UsageError family (typer vendors click, so the class is matched by name)."""
    return any(cls.__name__ == "UsageError" for cls in type(exc).__mro__) and hasattr(exc, "format_message")

if __name__ == "__main__":
    main()
