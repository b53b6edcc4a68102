"""The report's file writers: bytes, text and CSV through the one atomic writer (``clustersim.files``).

A reader (a browser, a CI artefact upload, a second report run) never sees a half-written PNG,
CSV or HTML file. It does not decide what to write.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from clustersim.files import write_atomic


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return write_atomic(path, data)


def write_text_atomic(path: Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return write_atomic(path, text)


def write_csv_atomic(path: Path, frame: pd.DataFrame) -> Path:
    """Write ``frame`` (without its index) as CSV to ``path`` atomically."""
    return write_atomic(path, frame.to_csv(index=False))
