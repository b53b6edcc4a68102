"""Cross-validation with each fold's fit re-linearised (``cross_validate_families(rounds=)``,
``clustersim validate --cross-validate family --fit-rounds N``).

A closed-form "simulator" stands in for the step simulation: a row's step time at profile P is
C + sum_j B_j (BASE_j / P_j)^q over the GEMM curve points and the memory efficiency. With q = 1 the
first-order model of the fit is exact (a second round must change nothing); with q = 2 it is not,
and a second round taken at the first round's fit must come closer to the truth. Every later round
may simulate only its fold's training rows, at that fold's previous fit.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd
import pytest

from clustersim.simulator.calibration import fit_crossval as fc
from clustersim.simulator.calibration.fit_defaults import perturb
from clustersim.simulator.calibration.fit_params import GEMM_POINTS
from clustersim.simulator.profile import CalibrationProfile
from tests.simulator.test_fit_defaults import BASE

PARAMS = [f"g{j}" for j in range(GEMM_POINTS)] + ["mem"]
TRUE_SCALE = {"g0": 1.0, "g1": 1.05, "g2": 1.1, "g3": 1.2, "g4": 1.25, "g5": 1.3, "mem": 1.15}
ROWS = 60


def _values(p: CalibrationProfile) -> np.ndarray:
    return np.array([e for _, e in p.gemm_efficiency] + [p.memory_efficiency])


def _truth_profile() -> CalibrationProfile:
    return BASE.replace(gemm_efficiency=[(x, e * TRUE_SCALE[f"g{j}"]) for j, (x, e) in enumerate(BASE.gemm_efficiency)],
                        memory_efficiency=BASE.memory_efficiency * TRUE_SCALE["mem"])


class Closed:
    """The closed-form simulator: per-row coefficients, and a record of every sensitivity pass."""

    def __init__(self, power: float, seed: int = 3) -> None:
        rng = np.random.default_rng(seed)
        self.power = power
        self.coef = rng.uniform(0.0, 1.0, (ROWS, len(PARAMS))) * (rng.random((ROWS, len(PARAMS))) < 0.7)
        self.const = rng.uniform(0.1, 0.4, ROWS)
        self.calls: list[tuple[frozenset[int], dict[str, CalibrationProfile]]] = []

    def time(self, rows: np.ndarray, prof: CalibrationProfile) -> np.ndarray:
        ratio = (_values(BASE) / _values(prof)) ** self.power
        out: np.ndarray = self.const[rows] + self.coef[rows] @ ratio
        return out

    def frame(self, rows: np.ndarray, profiles: Mapping[str, CalibrationProfile]) -> pd.DataFrame:
        prof = profiles["h100"]
        out = pd.DataFrame({"row_id": rows, "gpu_type": "H100", "group": "h100", "status": "ok", "framework": "NeMo",
                            "source_id": np.where(rows < 30, "mosaicml-llmfoundry", "megatron-bridge-26.04"),
                            "base": self.time(rows, prof), "measured": self.time(rows, _truth_profile()),
                            "scenario": [f"s{r}" for r in rows]})
        for p in PARAMS:
            out[p] = self.time(rows, perturb(prof, p))
        for p in ("attn", "link", "exp", "fp8", "fp4", "kern"):
            out[p] = out.base  # nothing else moves a row
        return out

    def sensitivities(self, runs: pd.DataFrame, profiles: Mapping[str, CalibrationProfile], *a: Any, **k: Any) -> pd.DataFrame:
        rows = runs.row_id.astype(int).to_numpy()
        self.calls.append((frozenset(int(r) for r in rows), dict(profiles)))
        return self.frame(rows, profiles)


RUNS = pd.DataFrame({"row_id": np.arange(ROWS), "num_gpus": 8,
                     "source_id": np.where(np.arange(ROWS) < 30, "mosaicml-llmfoundry", "megatron-bridge-26.04")})


def _fit_error(sim: Closed, ff: fc.FoldFit) -> float:
    rows = np.arange(ROWS)
    pred, meas = sim.time(rows, ff.profiles["h100"]), sim.time(rows, _truth_profile())
    return float(np.mean(np.abs(pred - meas) / meas))


def _rounds(sim: Closed, rounds: int) -> fc.FoldFit:
    sens = sim.frame(np.arange(ROWS), {"h100": BASE})
    ff = fc.fit_fold(sens, {"h100": BASE}, np.ones(ROWS, bool), sweeps=2)
    return fc.relinearised(ff, np.arange(ROWS), runs=RUNS, rounds=rounds, fidelity="flow", workers=1, progress=None,
                           fit_kw={"sweeps": 2})


def test_one_round_is_the_fold_fit_itself() -> None:
    sim = Closed(1.0)
    sens = sim.frame(np.arange(ROWS), {"h100": BASE})
    ff = fc.fit_fold(sens, {"h100": BASE}, np.ones(ROWS, bool), sweeps=2)
    assert fc.relinearised(ff, np.arange(ROWS), runs=RUNS, rounds=1, fidelity="flow", workers=1, progress=None,
                           fit_kw={}) is ff


def test_a_second_round_changes_nothing_where_first_order_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Closed(1.0)
    monkeypatch.setattr(fc, "sensitivities", sim.sensitivities)
    one, two = _rounds(sim, 1), _rounds(sim, 2)
    np.testing.assert_allclose(_values(two.profiles["h100"]), _values(one.profiles["h100"]), rtol=0.02)
    np.testing.assert_allclose(_values(one.profiles["h100"]), _values(_truth_profile()), rtol=0.03)
    assert two.notes[0].startswith("round 2: refitted from 60 training rows")


def test_a_second_round_comes_closer_to_a_curved_truth(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Closed(2.0)
    monkeypatch.setattr(fc, "sensitivities", sim.sensitivities)
    one, three = _rounds(sim, 1), _rounds(sim, 3)
    assert _fit_error(sim, one) > 0.01  # the first-order fit misreads the curvature
    assert _fit_error(sim, three) < 0.5 * _fit_error(sim, one)


def test_later_rounds_simulate_only_each_folds_training_rows_at_its_previous_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Closed(2.0)
    monkeypatch.setattr(fc, "sensitivities", sim.sensitivities)

    def first_order(runs, ok, fam, fold_of, full, fidelity, workers, progress):  # type: ignore[no-untyped-def]
        held = np.zeros(len(ok))
        for f, ff in fold_of.items():
            held[fam == f] = sim.time(ok.row_id.to_numpy()[fam == f], ff.profiles["h100"])
        inner = sim.time(ok.row_id.to_numpy(), full.profiles["h100"])
        return pd.DataFrame({"row_id": ok.row_id, "held_out_s": held, "in_sample_s": inner, "held_status": "ok",
                             "held_reason": "", "regime": "dense", "scenario": ok.row_id.astype(str), "predicted_oom": False})

    monkeypatch.setattr(fc, "simulate_held_out", first_order)
    sens = sim.frame(np.arange(ROWS), {"h100": BASE})
    cv = fc.cross_validate_families(RUNS, sens, {"h100": BASE}, sweeps=2, rounds=2)
    assert [len(rows) for rows, _ in sim.calls] == [60, 30, 30]  # all families, then each fold's training half
    held_of = {"megatron-bridge": frozenset(range(30, 60)), "mosaicml": frozenset(range(30))}
    for (rows, profs), fold in zip(sim.calls[1:], cv.folds[1:]):
        assert not rows & held_of[fold.family]
    one = {f: fc.fit_fold(sens, {"h100": BASE}, (np.arange(ROWS) < 30) != (f == "mosaicml"), family=f, sweeps=2)
           for f in held_of}
    for (rows, profs), fold in zip(sim.calls[1:], cv.folds[1:]):
        assert profs["h100"] == one[fold.family].profiles["h100"]  # taken at the fold's first fit
    assert set(cv.by_family.family) == {"megatron-bridge", "mosaicml", "all"}
    with pytest.raises(fc.CalibrationError, match="rounds = 0"):
        fc.cross_validate_families(RUNS, sens, {"h100": BASE}, sweeps=2, rounds=0)
