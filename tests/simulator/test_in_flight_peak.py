"""The in-flight activation peak read off a short program equals the peak of the whole program."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.plan.schedules import PERIODIC_PEAK, in_flight_peak, stage_in_flight_peak, stage_program


@pytest.mark.parametrize("schedule", sorted(PERIODIC_PEAK | {"gpipe", "dualpipe"}))
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 8])
def test_short_program_peak_equals_full_program_peak(schedule: str, pp: int) -> None:
    rng = np.random.default_rng(pp)
    for vpp in ((2, 3) if schedule == "interleaved" else (2,) if schedule == "dualpipe" else (1,)):
        weights = list(rng.uniform(0.5, 2.0, vpp))  # unequal chunks: the live set's makeup matters
        step = pp * (2 if schedule == "dualpipe" else 1)
        for m in sorted({step * k for k in (1, 2, 5, 6, 7, 13, 40, 97)}):
            for stage in range(pp):
                want = in_flight_peak(stage_program(schedule, stage, pp, m, vpp), weights)
                assert stage_in_flight_peak(schedule, stage, pp, m, vpp, weights) == want, (vpp, m, stage)


def test_the_peak_of_a_long_1f1b_program_is_its_warm_up() -> None:
    # 1F1B holds pp - stage micro-batches at most (Narayanan et al. 2021), whatever m.
    for stage in range(8):
        assert stage_in_flight_peak("1f1b", stage, 8, 8192) == 8 - stage
