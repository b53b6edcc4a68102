"""The error type of the reports package: one line that names the field and the fix.

``reports/`` imports nothing from ``simulator/``, so it has its own ``ValueError`` subclass; the
CLI prints its message as one line and exits with status 2, like every other package's error.
"""

from __future__ import annotations


class ReportError(ValueError):
    """The results handed to a report are missing, malformed or inconsistent."""

    def __str__(self) -> str:
        return f"[report] {super().__str__()}"
