"""The cross-validation by family with ``sync_jitter_cv`` pinned inside every fold's fit.

    .venv/bin/python benchmarks/cv_jitter.py [set=]measured|CV[:pass_length] --cross-validate family --cv-dir DIR \\
        --sensitivities SENS.csv --workers 1

Runs ``clustersim validate ARGS`` with ``cross_validate_families(bounds=Bounds(jitter=(CV, CV)))``:
every fold's profile fit (and the all-families one) knows the per-pass jitter's wait while it fits
the other parameters (``fit_params.jitter_start``; the ``jit`` column of the sensitivities is
the step time at cv + ``JITTER_STEP``), and the fold's profiles carry that cv when the held-out rows
are re-simulated. ``measured``: ``profile.SYNC_JITTER_CV_MEASURED`` (0.0209, one H200,
``benchmarks/gpu_step_jitter.py``). Unlike setting the cv after each fold's fit
(``cv_override.validate_with(..., sync_jitter_cv=...)``), the fit is not blind to it. Wraps the CLI
for the measurement; not part of the test run (minutes). ``:pass_length`` also sets
``sync_jitter_law = pass_length`` on every fold's profiles (the fit's cited constants,
``fit_crossval.with_cited_constants``), so the held-out rows wait per pass at the cv of its length
(``step.jitter.pass_jitter_cv``); the fit's ``jit`` column was taken with the constant law, so the
fit knows that law's wait, not the per-pass one. ``set=``: the jitter is not pinned in the fit but
set on every fold's profiles after it (``cv_override.validate_with``), for sensitivities whose base
already carries the wait (``variability_sensitivities.py --field sync_jitter_cv``: the exact wait of
each row instead of the ``jit`` column's secant).
"""

from __future__ import annotations

import functools
import sys

from clustersim.simulator.calibration.fit_params import Bounds
from clustersim.simulator.cli import validate_cv
from clustersim.simulator.cli.app import main
from clustersim.simulator.profile import SYNC_JITTER_CV_MEASURED

from cv_override import validate_with, with_fields


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: cv_jitter.py measured|CV[:pass_length] VALIDATE-ARGS...")
    value, _, law = sys.argv[1].partition(":")
    after = value.startswith("set=")
    value = value.removeprefix("set=")
    cv = SYNC_JITTER_CV_MEASURED if value == "measured" else float(value)
    if law:
        with_fields(sync_jitter_law=law)
    if after:
        validate_with(sys.argv[2:], sync_jitter_cv=cv)
        sys.exit(0)
    validate_cv.cross_validate_families = functools.partial(validate_cv.cross_validate_families, bounds=Bounds(jitter=(cv, cv)))
    print(f"sync_jitter_cv pinned at {cv} inside every fold's fit (Bounds.jitter)", flush=True)
    sys.argv = ["clustersim", "validate", *sys.argv[2:]]
    main()
