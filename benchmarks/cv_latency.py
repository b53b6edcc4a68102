"""The cross-validation by family with ``collective_latency`` set in every fold's profiles.

    .venv/bin/python benchmarks/cv_latency.py nccl|path --cross-validate family --cv-dir DIR \
        --sensitivities SENS.csv --workers 1

Runs ``clustersim validate`` with the arguments after the first, where the fit's cited constants
(``fit_crossval.with_cited_constants``) also set ``collective_latency`` (``nccl``: NCCL's own tuning
model of latency and protocol, ``network.nccl_tuning``, cited there; a model choice, never fitted).
The fit code is not changed: this wraps it for the measurement, so the out-of-sample figure of
making the model the default is known before it is. Not part of the test run (minutes).
"""

from __future__ import annotations

import sys

from cv_override import validate_with

if __name__ == "__main__":
    model = sys.argv[1]
    if model not in ("path", "nccl"):
        print(f"collective_latency = '{model}' is unknown; use path or nccl", file=sys.stderr)
        sys.exit(2)
    validate_with(sys.argv[2:], collective_latency=model)
