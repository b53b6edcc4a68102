"""The cross-validation by family with the cited part-to-part transfer for GPU types without training rows.

    .venv/bin/python benchmarks/cv_transfer.py --cross-validate family --cv-dir DIR \
        --sensitivities SENS.csv --workers 1

Runs ``clustersim validate ARGS`` with ``cross_validate_families(transfer=True)``: in each fold a
GPU type with no training row takes its donor's fitted profile scaled by the cited ratios of
``simulator/calibration/fit_transfer.py`` (GEMM, FP8 and attention levels from published
microbenchmarks), not a plain copy. The default is not changed: this wraps the CLI for the
measurement. Not part of the test run (minutes).
"""

from __future__ import annotations

import sys
from typing import Any

from clustersim.simulator.cli import validate_cv
from clustersim.simulator.cli.app import main


def _with_transfer(inner: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        kwargs["transfer"] = True
        return inner(*args, **kwargs)
    return wrapped


if __name__ == "__main__":
    validate_cv.cross_validate_families = _with_transfer(validate_cv.cross_validate_families)
    print("GPU types without training rows: donor profile x cited ratios (fit_transfer)", flush=True)
    sys.argv = ["clustersim", "validate", *sys.argv[1:]]
    main()
