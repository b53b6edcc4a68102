"""Errors raised by the workloads package.

Owns the one exception type of the package; every message names the offending field, the numbers
and the fix in one line. Does not format or print anything (the CLI does).
"""


class WorkloadError(ValueError):
    """A model or training description that cannot be used as given."""
