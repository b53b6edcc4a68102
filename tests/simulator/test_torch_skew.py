"""The sync-skew microbenchmark read as the jitter model: measured wait -> ``sync_jitter_cv``.

No torch: the entries are drawn from the jitter model itself (a folded lognormal per rank and
iteration, drawn with a seeded numpy Generator), so the fit must give back the cv they were
drawn with; and the recorded campaign without the microbenchmark keeps its predictions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from clustersim.simulator.calibration.fit import fit_profile
from clustersim.simulator.calibration.fit_comm import skew_fit
from clustersim.simulator.calibration.torch_backend.check import check
from clustersim.simulator.calibration.torch_backend.measure import load_steps
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.profile import SYNC_JITTER_MAX
from clustersim.simulator.step import sync_wait_fraction

RECORDED = Path(__file__).parent / "torch_recorded" / "small"


def _entry(cv: float, ranks: int = 2, iterations: int = 20000, chunk: float = 6e-3, seed: int = 0) -> dict[str, object]:
    """Chunk times of the jitter model: chunk x exp(sigma |Z|), sigma = sqrt(ln(1 + cv^2))."""
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log1p(cv * cv))
    chunks = chunk * np.exp(sigma * np.abs(rng.standard_normal((ranks, iterations))))
    totals = chunks.max(axis=0) + 4e-4  # every rank leaves the collective when the slowest arrives, + the call
    return {"chunk_s": chunks.tolist(), "total_s": np.broadcast_to(totals, chunks.shape).tolist(),
            "allreduce_s": [[4e-4] * 10] * ranks}


@pytest.mark.parametrize("cv", [0.02, 0.06, 0.12])
def test_the_fit_gives_back_the_cv_the_skew_was_drawn_with(cv: float) -> None:
    fit = skew_fit(_entry(cv))
    assert fit.cv == pytest.approx(cv, rel=0.05)
    assert fit.error == pytest.approx(0.0, abs=1e-9)
    assert sync_wait_fraction(2, fit.cv) == pytest.approx(fit.fraction, rel=1e-6)
    # the faster rank waits for the slower one: E|c0 - c1| / 2 = E[max] - E[mean] of the chunks
    chunks = np.asarray(_entry(cv)["chunk_s"])
    assert fit.wait == pytest.approx(float(np.median(chunks.max(axis=0) - chunks)), rel=1e-9)


def test_no_skew_is_no_jitter_and_a_huge_one_is_clipped() -> None:
    flat = {"chunk_s": [[6e-3] * 50] * 2, "total_s": [[6.4e-3] * 50] * 2, "allreduce_s": [[4e-4] * 5] * 2}
    assert skew_fit(flat).cv == 0.0 and skew_fit(flat).fraction == 0.0
    half = {"chunk_s": [[6e-3] * 50, [12e-3] * 50], "total_s": [[12.4e-3] * 50] * 2, "allreduce_s": [[4e-4] * 5] * 2}
    fit = skew_fit(half)
    assert fit.fraction == pytest.approx(1 / 3) and fit.cv == SYNC_JITTER_MAX and fit.error > 0.5
    with pytest.raises(CalibrationError, match="ranks \\(>= 2\\) x iterations"):
        skew_fit({"chunk_s": [[6e-3] * 5], "total_s": [[6e-3] * 5], "allreduce_s": [[1e-4]]})


def test_the_profile_prices_the_measured_skew_for_the_data_parallel_plans_only(tmp_path: Path) -> None:
    folder = tmp_path / "small"
    shutil.copytree(RECORDED, folder)
    path = folder / "micro_w2.json"
    micro = json.loads(path.read_text())
    micro["collectives"]["skew"] = _entry(0.08, iterations=4000)
    path.write_text(json.dumps(micro))
    before, after = fit_profile(RECORDED, world_size=2).profile, fit_profile(folder, world_size=2).profile
    assert before.sync_jitter_cv == 0.0 and "sync_skew" not in before.machine
    assert after.sync_jitter_cv == pytest.approx(0.08, rel=0.1) and after.machine["sync_skew"] > 0
    records = [r for r in load_steps(RECORDED) if r.world_size == 2]
    old, new = check(records, {2: before}, "median"), check(records, {2: after}, "median")
    for r, a, b in zip(records, old, new):
        if r.plan.dp > 1:  # DDP and FSDP2 ranks wait for the slower replica: slower by at most the wait fraction
            assert a.predicted < b.predicted <= a.predicted * (1 + sync_wait_fraction(2, after.sync_jitter_cv)) * (1 + 1e-9)
        else:  # TP and PP: the jitter model prices dp x cp synchronisation only
            assert b.predicted == a.predicted, r.plan.name
