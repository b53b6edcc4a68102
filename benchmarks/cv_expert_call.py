"""The cross-validation by family with ``expert_call_time`` FITTED per GPU type in every fold.

    .venv/bin/python benchmarks/cv_expert_call.py --cross-validate family --hold-shared --cv-dir DIR \
        --sensitivities SENS.csv --workers 2

Runs ``clustersim validate ARGS`` with the fold fits' bounds set to
``Bounds(expert_call=fit_params.EXPERT_CALL_FIT)``: each GPU type's ``expert_call_time`` (seconds
per routed-expert GEMM call of the unfused grouped path) inside 0-25 us, fitted on the fold's
training rows from the ``ecall`` column of SENS (written by ``clustersim validate --fit-profiles``
since December's twenty-fourth stop; a table without it leaves the value at 0, the prior). A fold
whose training rows have no unfused routed expert takes the prior 0. The default
(``Bounds().expert_call`` pinned at 0) is not changed: this wraps the CLI for the measurement
(docs/VALIDATION.md, the twenty-fourth stop's block: cv52h). Not part of the test run (minutes).
"""

from __future__ import annotations

import sys

from clustersim.simulator.calibration.fit_params import EXPERT_CALL_FIT, Bounds

from cv_host_fit import validate_with_bounds

if __name__ == "__main__":
    validate_with_bounds(sys.argv[1:], Bounds(expert_call=EXPERT_CALL_FIT),
                         f"expert_call_time fitted per GPU type in every fold: {EXPERT_CALL_FIT[0]:g}.."
                         f"{EXPERT_CALL_FIT[1]:g} s")
