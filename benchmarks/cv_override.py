"""Run ``clustersim validate`` with profile fields set in every cross-validation fold.

The shared piece of ``cv_variability.py`` and ``cv_latency.py``: the fit's cited constants
(``fit_crossval.with_cited_constants``) are wrapped so that each fold's profiles also carry the
given fields; the fit code itself is not changed. Not part of the test run.
"""

from __future__ import annotations

import sys
from typing import Any

from clustersim.simulator.calibration import fit_crossval
from clustersim.simulator.cli.app import main
from clustersim.simulator.profile import CalibrationProfile


def with_fields(**fields: Any) -> None:
    """From now on, every fold's profiles carry ``fields`` (set after the fit's cited constants);
    announced."""
    cited = fit_crossval.with_cited_constants

    def wrapped(profile: CalibrationProfile, stem: str) -> CalibrationProfile:
        return cited(profile, stem).replace(**fields)

    fit_crossval.with_cited_constants = wrapped
    for name, value in fields.items():
        print(f"{name} = {value} in every fold's profiles", flush=True)


def validate_with(args: list[str], **fields: Any) -> None:
    """``clustersim validate ARGS`` with ``fields`` set on every fold's profiles (``with_fields``)."""
    with_fields(**fields)
    sys.argv = ["clustersim", "validate", *args]
    main()
