"""The one atomic writer: every file clustersim writes goes through ``write_atomic``.

A reader (a browser, a resumed sweep, a CI artefact upload) never sees a half-written file under
its final name: the content goes to a temporary sibling (same folder, so the rename stays on one
file system), is flushed to disk, made readable by others (0644), then renamed over the target.
On every exit path, an exception or Ctrl-C included, the temporary file is removed. Imports
nothing of clustersim's packages, so every package may use it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")

FILE_MODE = 0o644
"""Permissions of every written file: results are meant to be shared (mkstemp makes 0600)."""


def write_atomic(path: str | os.PathLike[str], content: bytes | str | Callable[[Path], None]) -> Path:
    """Write ``content`` to ``path`` atomically and return the path.

    ``content`` is bytes, text (UTF-8), or a function that writes the file it is given (for
    writers that want a path, e.g. ``DataFrame.to_parquet`` or ``Figure.savefig``).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        if callable(content):
            os.close(handle)
            content(temporary)
        else:
            with os.fdopen(handle, "wb") as stream:
                stream.write(content.encode("utf-8") if isinstance(content, str) else content)
        _fsync(temporary)
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def write_json(path: str | os.PathLike[str], doc: Any, *, indent: int | None = 2,
               default: Callable[[Any], Any] | None = str) -> Path:
    """Write ``doc`` as JSON atomically."""
    return write_atomic(path, json.dumps(doc, indent=indent, default=default))


def replace_dir(path: str | os.PathLike[str], fill: Callable[[Path], T]) -> T:
    """Replace the folder ``path`` as a whole: ``fill`` writes into a sibling temporary folder,
    which then takes ``path``'s place; the old folder is removed only after the swap.

    A reader sees the old folder or the new one, never a mix; on any exit (an exception,
    Ctrl-C) before the swap the temporary folder is removed and ``path`` is untouched. Two
    renames, not one: POSIX cannot swap two folders atomically, so for an instant between them
    ``path`` is absent (never half-written). Returns what ``fill`` returns, with the paths it
    names inside the temporary folder meaning the same files under ``path``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    old = temporary.with_suffix(".old")
    try:
        result = fill(temporary)
        for child in temporary.rglob("*"):
            os.chmod(child, 0o755 if child.is_dir() else FILE_MODE)
        os.chmod(temporary, 0o755)
        moved = target.exists()
        if moved:
            os.replace(target, old)
        try:
            os.replace(temporary, target)
        except BaseException:
            if moved:
                os.replace(old, target)  # put the old folder back
            raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return _relocated(result, temporary, target)


def _relocated(value: T, source: Path, target: Path) -> T:
    """A Path under ``source`` moved to the same place under ``target`` (other values unchanged)."""
    if isinstance(value, Path) and value.is_relative_to(source):
        return target / value.relative_to(source)
    return value


def _fsync(path: Path) -> None:
    with open(path, "rb") as stream:
        os.fsync(stream.fileno())
