"""The cross-validation by family with ``host_launch_time`` set in every fold's profiles.

    .venv/bin/python benchmarks/cv_host.py SECONDS --cross-validate family --cv-dir DIR \
        --sensitivities SENS.csv --workers 1

Runs ``clustersim validate`` with the arguments after the first, where the fit's cited constants
(``fit_crossval.with_cited_constants``) also set ``host_launch_time`` to SECONDS per kernel launch
(``step.host``); SECONDS must lie in the cited ``profile.HOST_LAUNCH_RANGE`` (5-25 us per eager
op) or be 0 (off). The fit code is not changed: this wraps it for the measurement, so the
out-of-sample figure of a cited launch cost is known before it is made a default. Not part of the
test run (minutes).
"""

from __future__ import annotations

import sys

from cv_override import validate_with

from clustersim.simulator.profile import HOST_LAUNCH_RANGE

if __name__ == "__main__":
    given = sys.argv[1] if len(sys.argv) > 1 else "(none)"
    try:
        launch = float(given)
    except ValueError:
        launch = -1.0
    low, high = HOST_LAUNCH_RANGE
    if not (launch == 0.0 or low <= launch <= high):
        print(f"host_launch_time = {given!r} is neither 0 nor inside the cited range {low:g}-{high:g} s; "
              "give seconds per launch, e.g. 1e-05", file=sys.stderr)
        sys.exit(2)
    validate_with(sys.argv[2:], host_launch_time=launch)
