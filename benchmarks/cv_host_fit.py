"""The cross-validation by family with ``host_launch_time`` FITTED per GPU type in every fold.

    .venv/bin/python benchmarks/cv_host_fit.py --cross-validate family --cv-dir DIR \
        --sensitivities SENS.csv --workers 1

Runs ``clustersim validate ARGS`` with the fold fits' bounds set to
``Bounds(host_launch=fit_params.HOST_LAUNCH_FIT)``: each GPU type's ``host_launch_time`` is 0
or inside the cited range (5-25 us), fitted on the fold's training rows from the ``host`` column of
SENS (``benchmarks/sens_host.py`` adds it to a table taken without it; a table without the column
leaves it at 0, with a note in cv_notes.txt). The default (``Bounds().host_launch`` pinned at 0) is
not changed: this wraps the CLI for the measurement. Not part of the test run (minutes).
"""

from __future__ import annotations

import sys
from typing import Any

from clustersim.simulator.calibration.fit_params import HOST_LAUNCH_FIT, Bounds
from clustersim.simulator.cli import validate_cv
from clustersim.simulator.cli.app import main


def _with_bounds(inner: Any, bounds: Bounds) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        kwargs["bounds"] = bounds
        return inner(*args, **kwargs)
    return wrapped


def validate_with_bounds(args: list[str], bounds: Bounds, what: str) -> None:
    """``clustersim validate ARGS`` with every fold fitted within ``bounds``; ``what`` is announced."""
    validate_cv.cross_validate_families = _with_bounds(validate_cv.cross_validate_families, bounds)
    print(what, flush=True)
    sys.argv = ["clustersim", "validate", *args]
    main()


if __name__ == "__main__":
    validate_with_bounds(sys.argv[1:], Bounds(host_launch=HOST_LAUNCH_FIT),
                         f"host_launch_time fitted per GPU type in every fold: 0 or {HOST_LAUNCH_FIT[0]:g}.."
                         f"{HOST_LAUNCH_FIT[1]:g} s")
