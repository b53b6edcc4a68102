"""The cross-validation by family with ``sync_jitter_cv`` pinned inside every fold's fit.

    .venv/bin/python benchmarks/cv_jitter.py measured|CV --cross-validate family --cv-dir DIR \\
        --sensitivities SENS.csv --workers 1

Runs ``clustersim validate ARGS`` with ``cross_validate_families(bounds=Bounds(jitter=(CV, CV)))``:
every fold's profile fit (and the all-families one) knows the per-pass jitter's wait while it fits
the other parameters (``fit_first_order.jitter_start``; the ``jit`` column of the sensitivities is
the step time at cv + ``JITTER_STEP``), and the fold's profiles carry that cv when the held-out rows
are re-simulated. ``measured``: ``profile.SYNC_JITTER_CV_MEASURED`` (0.0209, one H200,
``benchmarks/gpu_step_jitter.py``). Unlike setting the cv after each fold's fit
(``cv_override.validate_with(..., sync_jitter_cv=...)``), the fit is not blind to it. Wraps the CLI
for the measurement; not part of the test run (minutes).
"""

from __future__ import annotations

import sys
from typing import Any

from clustersim.simulator.calibration.fit_first_order import Bounds
from clustersim.simulator.cli import validate_cv
from clustersim.simulator.cli.app import main
from clustersim.simulator.profile import SYNC_JITTER_CV_MEASURED


def _with_bounds(inner: Any, bounds: Bounds) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        kwargs["bounds"] = bounds
        return inner(*args, **kwargs)
    return wrapped


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: cv_jitter.py measured|CV VALIDATE-ARGS...")
    cv = SYNC_JITTER_CV_MEASURED if sys.argv[1] == "measured" else float(sys.argv[1])
    validate_cv.cross_validate_families = _with_bounds(validate_cv.cross_validate_families, Bounds(jitter=(cv, cv)))
    print(f"sync_jitter_cv pinned at {cv} inside every fold's fit (Bounds.jitter)", flush=True)
    sys.argv = ["clustersim", "validate", *sys.argv[2:]]
    main()
