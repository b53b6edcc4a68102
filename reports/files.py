"""Atomic file writes for reports: write a temporary sibling, then rename it over the target.

A reader (a browser, a CI artefact upload, a second report run) never sees a half-written PNG,
CSV or HTML file. The parent directory is created if missing. It does not decide what to write.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; reports are meant to be shared
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_csv_atomic(path: Path, frame: pd.DataFrame) -> Path:
    """Write ``frame`` (without its index) as CSV to ``path`` atomically."""
    return write_text_atomic(path, frame.to_csv(index=False))
