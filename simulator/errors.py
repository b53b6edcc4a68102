"""The error types of the simulator: one line that names the field and the fix.

Every error the user can cause is a ``ValueError`` subclass; the CLI prints its message as one
line and exits with status 2. Workload and topology errors live in their own (leaf) packages.
"""

from __future__ import annotations


class ClusterSimError(ValueError):
    """Base of the simulator's user-facing errors; ``stage`` names the phase that raised it."""

    stage: str = "simulate"

    def __str__(self) -> str:
        return f"[{self.stage}] {super().__str__()}"


class PlanError(ClusterSimError):
    """The parallel plan does not fit the workload or the cluster."""

    stage = "plan"


class OutOfMemoryError(ClusterSimError):
    """The partitioned job does not fit in device memory."""

    stage = "partition"


class ScenarioError(ClusterSimError):
    """A scenario file or override is malformed or names an unknown preset."""

    stage = "scenario"


class CalibrationError(ClusterSimError):
    """A calibration profile or measurement set is malformed."""

    stage = "calibration"
