"""Tables and lines as data, printed as plain text when rich's output would be plain text anyway.

Owns ``Grid`` (a table: title, caption, columns, rows of strings; built with rich's
``add_column``/``add_row`` calls) and ``Printer``, which prints grids and lines to standard output.
Where the output is no terminal (a file or a pipe: no colour, no cursor codes) and every text is
one that rich prints unchanged (printable ASCII, no markup ``[``, no ``:emoji:`` code, no trailing
blanks, no word longer than the room it has, columns at their natural widths), the printer writes
the same characters rich would (its heavy-head box, padding 1, centred title and caption, rich's
word wrap) without importing rich (about 0.03 s) or running its layout engine (0.05-0.09 s for
``simulate``'s two tables of a 16,384-GPU step); anything else goes to a rich ``Console`` made on
first use. ``tests/simulator/test_cli_plain.py`` compares both paths character for character.
It computes nothing and formats no numbers (the commands do).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TextIO, Union

if TYPE_CHECKING:  # rich is imported when a grid or line is not plain text
    from rich.console import Console
    from rich.table import Table

Justify = Literal["left", "right"]
Line = Union["Grid", str]
"""What ``Printer.print`` takes: a grid, or a line of text (rich markup allowed)."""

_WORD = re.compile(r"\s*\S+\s*")  # rich._wrap.re_word: a word and the blanks after it
_EMOJI = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")  # rich._emoji_replace's pattern
_PRINTABLE = re.compile(r"[ -~]*")
# rich.box.HEAVY_HEAD, rich.table.Table's default box: (left, fill, divider, right) per rule
_TOP, _HEAD_RULE, _BOTTOM = ("┏", "━", "┳", "┓"), ("┡", "━", "╇", "┩"), ("└", "─", "┴", "┘")
_HEAD_BAR, _ROW_BAR = "┃", "│"


@dataclass
class Grid:
    """A table of strings, built like a rich ``Table`` (``add_column``, ``add_row``)."""

    title: str | None = None
    caption: str | None = None
    show_header: bool = True
    columns: list[tuple[str, Justify]] = field(default_factory=list)
    """(header, justification) per column."""
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def add_column(self, header: str, justify: Justify = "left") -> None:
        self.columns.append((header, justify))

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)

    def rich(self) -> Table:
        """The same table as a rich ``Table``."""
        from rich.table import Table

        table = Table(title=self.title, caption=self.caption, show_header=self.show_header)
        for header, justify in self.columns:
            table.add_column(header, justify=justify)
        for row in self.rows:
            table.add_row(*row)
        return table


def _simple(text: str) -> bool:
    """True when rich prints ``text`` as it is: printable ASCII, no markup, no emoji code, no trailing blank."""
    return (_PRINTABLE.fullmatch(text) is not None and "[" not in text and _EMOJI.search(text) is None
            and text == text.rstrip())


def wrap(text: str, width: int, justify: Literal["default", "center"] = "default") -> list[str] | None:
    """``text`` (a ``_simple`` one) word-wrapped into ``width`` columns as rich's ``Text.wrap`` does
    (``rich._wrap.divide_line``, blanks past the width dropped, centred lines padded both sides);
    None where a word is longer than ``width`` (rich folds it)."""
    breaks, offset = [], 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            return None
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    lines = [text[a:b] for a, b in zip([0, *breaks], [*breaks, len(text)])]
    out = []
    for line in lines:
        if len(line) > width:  # Text.rstrip_end: blanks beyond the width
            excess, blanks = len(line) - width, len(line) - len(line.rstrip())
            line = line[:len(line) - min(excess, blanks)]
        if justify == "center":
            line = line.rstrip()
            left = (width - len(line)) // 2
            line = " " * left + line + " " * (width - len(line) - left)
        if len(line) > width:
            return None
        out.append(line)
    return out


def render(grid: Grid, width: int) -> str | None:
    """``grid`` as rich prints it on a plain console ``width`` columns wide; None where rich would
    change a text or lay the table out differently (wrapped cells, no rows)."""
    texts = [grid.title or "", grid.caption or "", *(h for h, _ in grid.columns), *(c for r in grid.rows for c in r)]
    if not grid.columns or not grid.rows or not grid.show_header or not all(_simple(t) for t in texts):
        return None
    if any(len(r) != len(grid.columns) for r in grid.rows):
        return None
    widths = [max(len(h), *(len(r[i]) for r in grid.rows)) + 2 for i, (h, _) in enumerate(grid.columns)]
    table_width = sum(widths) + len(widths) + 1
    if table_width > width:
        return None
    title = wrap(grid.title, table_width, "center") if grid.title else []
    caption = wrap(grid.caption, table_width, "center") if grid.caption else []
    if title is None or caption is None:
        return None
    lines = [*title, _rule(_TOP, widths), _row(_HEAD_BAR, [h for h, _ in grid.columns], grid, widths),
             _rule(_HEAD_RULE, widths), *(_row(_ROW_BAR, list(r), grid, widths) for r in grid.rows),
             _rule(_BOTTOM, widths), *caption]
    return "\n".join(lines) + "\n"


def _rule(chars: tuple[str, str, str, str], widths: list[int]) -> str:
    left, fill, divider, right = chars
    return left + divider.join(fill * w for w in widths) + right


def _row(bar: str, cells: list[str], grid: Grid, widths: list[int]) -> str:
    padded = [f" {c.ljust(w - 2) if j == 'left' else c.rjust(w - 2)} " for c, (_, j), w in zip(cells, grid.columns, widths)]
    return bar + bar.join(padded) + bar


def plain_stream(stream: TextIO) -> bool:
    """True when rich prints to ``stream`` without colour or terminal codes and with its UTF-8 box
    (``rich.console.Console.is_terminal``: TTY_COMPATIBLE, then FORCE_COLOR, then isatty; not in Jupyter)."""
    encoding = (getattr(stream, "encoding", "utf-8") or "utf-8").lower()
    if "IPython" in sys.modules or sys.platform == "win32" or not encoding.startswith("utf"):
        return False
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "0"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force == ""
    isatty = getattr(stream, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:  # a closed stream: no terminal, as rich says
        return True


class Printer:
    """Prints grids and lines to standard output (as it is when printing): plain text when
    ``render``/``wrap`` allow (``width`` set and the stream plain), else through a rich ``Console``
    of that width (None: the terminal's), made on first use."""

    def __init__(self, width: int | None) -> None:
        self.width = width
        self._console: Console | None = None

    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(width=self.width)
        return self._console

    def print(self, item: Line) -> None:
        text = self._plain(item) if self.width is not None and plain_stream(sys.stdout) else None
        if text is None:
            self.console().print(item.rich() if isinstance(item, Grid) else item)
            return
        sys.stdout.write(text)
        sys.stdout.flush()

    def _plain(self, item: Line) -> str | None:
        assert self.width is not None
        if isinstance(item, Grid):
            return render(item, self.width)
        if "\n" in item or not _simple(item):
            return None
        lines = wrap(item, self.width)
        return None if lines is None else "\n".join(lines) + "\n"
