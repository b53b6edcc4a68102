"""``cli.plain``: the plain-text path prints exactly what rich prints, character for character,
for simulate's own tables and for random grids and lines; it hands rich everything else."""

from __future__ import annotations

import io
import string
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from clustersim.simulator.cli import plain
from clustersim.simulator.cli.plain import Grid, Printer, render, wrap

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3_70b_h100.yaml"


def _rich(item: Grid | str, width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, force_jupyter=False, legacy_windows=False)
    console.print(item.rich() if isinstance(item, Grid) else item)
    return buf.getvalue()


def _words(rng: np.random.Generator, n: int, longest: int = 12) -> str:
    alphabet = string.ascii_letters + string.digits + "%./-(),;=+>"
    words = ["".join(rng.choice(list(alphabet), size=int(rng.integers(1, longest + 1)))) for _ in range(n)]
    blanks = rng.choice([" ", " ", " ", "  "], size=n)
    return "".join(w + b for w, b in zip(words, blanks)).rstrip()


def _grid(rng: np.random.Generator) -> Grid:
    grid = Grid(title=_words(rng, int(rng.integers(1, 25))) if rng.random() < 0.9 else None,
                caption=_words(rng, int(rng.integers(1, 60))) if rng.random() < 0.6 else None)
    ncols = int(rng.integers(1, 9))
    for _ in range(ncols):
        grid.add_column(_words(rng, int(rng.integers(1, 3)), 8), justify=str(rng.choice(["left", "right"])))  # type: ignore[arg-type]  # a Justify drawn at random
    for _ in range(int(rng.integers(1, 12))):
        cells = [_words(rng, int(rng.integers(0, 4)), 10) for _ in range(ncols)]
        grid.add_row(*(("  " + c if c and rng.random() < 0.2 else c) for c in cells))  # indented as simulate's rows
    return grid


def test_random_grids_print_as_rich_prints_them() -> None:
    rng = np.random.default_rng(18)
    plain_count = 0
    for _ in range(300):
        grid = _grid(rng)
        width = int(rng.choice([60, 140, 240]))
        text = render(grid, width)
        if text is not None:
            plain_count += 1
            assert text == _rich(grid, width), (grid, width)
    assert plain_count > 100  # a third at least are plain: the comparison is not vacuous


def test_random_lines_wrap_as_rich_wraps_them() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        line = _words(rng, int(rng.integers(1, 80)), int(rng.integers(3, 30)))
        width = int(rng.choice([20, 60, 140]))
        lines = wrap(line, width)
        if lines is not None:
            assert "\n".join(lines) + "\n" == _rich(line, width), (line, width)
    assert wrap("x" * 30, 20) is None  # rich folds a word longer than the line: not plain


@pytest.mark.parametrize("text", ["[red]x[/red]", "a :smile: b", "trailing ", "caf\u00e9", "tab\there"])
def test_texts_rich_would_change_are_left_to_rich(text: str) -> None:
    grid = Grid(title="t")
    grid.add_column("a")
    grid.add_row(text)
    assert render(grid, 140) is None
    printed = io.StringIO()
    printer = Printer(140)
    printer._console = Console(file=printed, width=140, force_terminal=False)
    printer.print(grid)
    assert printed.getvalue() == _rich(grid, 140)  # the rich path took it


def test_a_grid_wider_than_the_console_is_left_to_rich() -> None:
    grid = Grid()
    grid.add_column("a")
    grid.add_row(" ".join(["word"] * 40))
    assert render(grid, 140) is None and render(grid, 400) is not None


def test_simulates_tables_print_as_rich_prints_them() -> None:
    from clustersim.simulator.cli.simulate import collectives_table, placement_table, result_table
    from clustersim.simulator.scenario import load_scenario
    from clustersim.simulator.step import simulate_step, step_energy

    sc = load_scenario(EXAMPLE, [])
    result = simulate_step(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile, mode=sc.mode, seed=sc.seed)
    grids = [result_table(result, "title", step_energy(result, sc.cluster)), collectives_table(result), placement_table(sc)]
    for grid in grids:
        text = render(grid, 140)
        assert text is not None and text == _rich(grid, 140)


@pytest.mark.parametrize(("env", "is_plain"), [({}, True), ({"FORCE_COLOR": "1"}, False), ({"FORCE_COLOR": ""}, True),
                                               ({"TTY_COMPATIBLE": "1"}, False), ({"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}, True)])
def test_plain_where_rich_sees_no_terminal(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], is_plain: bool) -> None:
    for key in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stream = io.StringIO()
    assert plain.plain_stream(stream) is is_plain
    assert Console(file=stream).is_terminal is not is_plain  # rich's own answer agrees


def test_the_printer_writes_plain_text_to_standard_output(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    grid = Grid(title="a title", caption="a caption")
    grid.add_column("metric")
    grid.add_column("value", justify="right")
    grid.add_row("step time", "1.0000 s")
    printer = Printer(140)
    printer.print(grid)
    printer.print("a line")
    assert printer._console is None  # no rich console was needed
    assert capsys.readouterr().out == _rich(grid, 140) + _rich("a line", 140)
