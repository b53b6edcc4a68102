"""The cross-validation by family with ``gpu_variability_cv`` set in every fold's profiles.

    .venv/bin/python benchmarks/cv_variability.py CV|measured --cross-validate family --cv-dir DIR \
        --sensitivities SENS.csv --workers 2

Runs ``clustersim validate`` with the arguments after the first, where the fit's cited constants
(``fit_crossval.with_cited_constants``: flash2 factor, overlap slowdown) also set the static
GPU-to-GPU speed variability to CV (``measured``: ``profile.GPU_VARIABILITY_CV_MEASURED``), a
cited constant the same for every GPU type, never fitted. The fit code is not changed: this wraps
it for the measurement, so the out-of-sample figure of installing the constant is known before the
fit's owners install it. Not part of the test run (the cross-validation's time: minutes).
"""

from __future__ import annotations

import sys

from clustersim.simulator.calibration import fit_crossval
from clustersim.simulator.cli.app import main
from clustersim.simulator.profile import GPU_VARIABILITY_CV_MEASURED, CalibrationProfile


def _with_variability(cv: float):  # type: ignore[no-untyped-def]
    cited = fit_crossval.with_cited_constants

    def wrapped(profile: CalibrationProfile, stem: str) -> CalibrationProfile:
        return cited(profile, stem).replace(gpu_variability_cv=cv)
    return wrapped


if __name__ == "__main__":
    value = sys.argv[1]
    cv = GPU_VARIABILITY_CV_MEASURED if value == "measured" else float(value)
    fit_crossval.with_cited_constants = _with_variability(cv)
    print(f"gpu_variability_cv = {cv} in every fold's profiles", flush=True)
    sys.argv = ["clustersim", "validate", *sys.argv[2:]]
    main()
