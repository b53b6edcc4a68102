"""The cross-validation by family with the cited part-to-part transfer switched ON or OFF.

    .venv/bin/python benchmarks/cv_transfer.py off --cross-validate family --cv-dir DIR \
        --sensitivities SENS.csv --workers 1

Runs ``clustersim validate ARGS`` with ``cross_validate_families(transfer=...)``: ``on`` (the default
since December 2026's eighth stop): in each fold a GPU type with no training row takes its donor's
fitted profile scaled by the cited ratios of ``simulator/calibration/fit_transfer.py`` (GEMM, FP8 and
attention levels from published microbenchmarks); ``off``: the plain copy of the donor's profile
(the rule before). Wraps the CLI for the measurement. Not part of the test run (minutes).
"""

from __future__ import annotations

import functools
import sys

from clustersim.simulator.cli import validate_cv
from clustersim.simulator.cli.app import main


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("on", "off"):
        sys.exit("usage: cv_transfer.py on|off VALIDATE-ARGS...")
    on = sys.argv[1] == "on"
    validate_cv.cross_validate_families = functools.partial(validate_cv.cross_validate_families, transfer=on)
    print("GPU types without training rows: donor profile " + ("x cited ratios (fit_transfer)" if on else "copied"),
          flush=True)
    sys.argv = ["clustersim", "validate", *sys.argv[2:]]
    main()
