"""Errors raised by the topologies package.

Owns the one exception type of the package; every message names the offending field, the numbers
and the fix in one line. Does not format or print anything (the CLI does).
"""


class TopologyError(ValueError):
    """An accelerator, fabric or cluster description that cannot be used as given."""
