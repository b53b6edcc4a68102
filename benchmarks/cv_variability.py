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

from clustersim.simulator.profile import GPU_VARIABILITY_CV_MEASURED

from cv_override import validate_with

if __name__ == "__main__":
    value = sys.argv[1]
    cv = GPU_VARIABILITY_CV_MEASURED if value == "measured" else float(value)
    validate_with(sys.argv[2:], gpu_variability_cv=cv)
