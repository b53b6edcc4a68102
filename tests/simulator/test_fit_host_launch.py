"""``host_launch_time`` as a fitted per-GPU parameter (issue 13): its sensitivity column, its
first-order model and its bounds.

The column is the pass's own finite difference (``fit_defaults.sensitivities`` with ``host``): it
must equal a direct simulation of the row at ``host_launch_time`` = ``HOST_LAUNCH_PROBE``, and since
the step is a sum of max(GPU, host) stretches (``step.host.host_bound``), convex in the launch
cost, the first-order secant is exact at 0 and at the probe and never below the simulation in
between. The fit keeps the value at 0 or inside the cited range ``profile.HOST_LAUNCH_RANGE``, and a
table without the column leaves it at 0 with a note.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from clustersim.simulator.calibration.fit_crossval import fit_fold, host_evidence
from clustersim.simulator.calibration.fit_defaults import perturb, profile_key, sensitivities
from clustersim.simulator.calibration.fit_first_order import _initial, feasible, first_order_problem, fit, predict
from clustersim.simulator.calibration.fit_params import HOST_LAUNCH_FIT, HOST_LAUNCH_PROBE, Bounds
from clustersim.simulator.calibration.validate import load_runs, validate_row
from clustersim.simulator.profile import HOST_LAUNCH_RANGE, PROFILE_DIR, CalibrationProfile, load_profile

CURVE_X = [1e8, 1e9, 1e10, 1e11, 1e12, 1e13]
BASE = CalibrationProfile(name="synthetic", gemm_efficiency=list(zip(CURVE_X, [0.15, 0.30, 0.40, 0.50, 0.55, 0.60])))
FREE = Bounds(host_launch=HOST_LAUNCH_FIT)


def test_probe_is_the_top_of_the_cited_range_and_perturb_adds_it() -> None:
    assert HOST_LAUNCH_PROBE == HOST_LAUNCH_RANGE[1]
    assert perturb(BASE, "host").host_launch_time == pytest.approx(HOST_LAUNCH_PROBE)
    assert perturb(BASE.replace(host_launch_time=5e-6), "host").host_launch_time == pytest.approx(5e-6 + HOST_LAUNCH_PROBE)
    assert perturb(BASE, "host").replace(host_launch_time=0.0) == BASE


def _host_bound_row() -> tuple[dict[str, object], CalibrationProfile]:
    """A dropless Qwen3-30B-A3B row on 8 B200 (EP8, micro-batch 1): 48 syncing MoE layers, 16 experts per rank."""
    runs = load_runs()
    row = runs[(runs.model == "Qwen3_30B_a3B") & (runs.gpu_type == "B200") & (runs.micro_batch == 1)
               & (runs.num_gpus == 8)].iloc[0]
    profiles = {p.stem: load_profile(p) for p in sorted(PROFILE_DIR.glob("*.yaml"))}
    key = profile_key("B200", list(profiles))
    assert key is not None
    # without the per-kernel floor (the fit may put it above the launch cost, and then the GPU binds)
    return {str(k): v for k, v in row.items()}, profiles[key].replace(kernel_overhead=0.0)


def test_host_column_is_a_direct_simulation_at_the_probe_and_the_secant_bounds_the_step() -> None:
    row, prof = _host_bound_row()
    sens = sensitivities(pd.DataFrame([row]), {"b200": prof}, ("host",))
    assert list(sens.status) == ["ok"]
    base = validate_row(row, profile=prof)
    assert sens.base.iloc[0] == pytest.approx(base["predicted_step_time_s"], rel=1e-12)

    def at(launch: float) -> float:
        out = validate_row(row, profile=prof.replace(host_launch_time=launch), plan=base["_plan"])
        assert out["status"] == "ok"
        return float(out["predicted_step_time_s"])

    assert sens.host.iloc[0] == pytest.approx(at(HOST_LAUNCH_PROBE), rel=1e-12)
    assert sens.host.iloc[0] > 1.05 * sens.base.iloc[0]  # the host binds on this row at the probe
    # first order: exact at 0 and at the probe; the secant is above the convex step in between
    pb = first_order_problem(sens.assign(measured=1.0), {"b200": prof})
    x = _initial(pb)
    assert predict(pb, x)[0] == pytest.approx(sens.base.iloc[0], rel=1e-12)
    for h in (HOST_LAUNCH_RANGE[0], 12.5e-6, HOST_LAUNCH_PROBE):
        x["host"][0] = h
        assert predict(pb, x)[0] >= at(h) * (1 - 1e-9)
    assert at(12.5e-6) <= at(HOST_LAUNCH_PROBE) and at(HOST_LAUNCH_RANGE[0]) <= at(12.5e-6)


def _synthetic(want: float, rows: int = 30, seed: int = 0) -> pd.DataFrame:
    """Rows whose measured time is T0 + A (want - 0): the first-order model is exact in the host cost."""
    rng = np.random.default_rng(seed)
    t0 = rng.uniform(1.0, 3.0, rows)
    a = rng.uniform(0.0, 1.0, rows) * t0 / HOST_LAUNCH_PROBE * (np.arange(rows) % 3 != 0)  # a third never binds
    return pd.DataFrame({"row_id": np.arange(rows), "gpu_type": "H100", "group": "h100", "status": "ok",
                         "framework": "Megatron-LM", "source_id": "synthetic", "base": t0,
                         "host": t0 + a * HOST_LAUNCH_PROBE, "measured": t0 + a * want})


@pytest.mark.parametrize("want", [8e-6, 12e-6, 20e-6])
def test_fit_recovers_a_launch_cost_inside_the_range(want: float) -> None:
    got = fit(_synthetic(want), profiles={"h100": BASE}, bounds=FREE)["h100"]
    assert got.host_launch_time == pytest.approx(want, abs=0.1e-6)


def test_fit_stays_at_the_bounds_beyond_them() -> None:
    lo, hi = HOST_LAUNCH_FIT
    assert (lo, hi) == HOST_LAUNCH_RANGE
    assert fit(_synthetic(60e-6), profiles={"h100": BASE}, bounds=FREE)["h100"].host_launch_time == pytest.approx(hi)
    # rows asking for 1.5 us: 0 or the low bound, never inside (0, 5 us) where nothing is cited
    small = fit(_synthetic(1.5e-6), profiles={"h100": BASE}, bounds=FREE)["h100"].host_launch_time
    assert small == 0.0 or small == pytest.approx(lo)
    assert fit(_synthetic(0.0), profiles={"h100": BASE}, bounds=FREE)["h100"].host_launch_time == 0.0
    # the default bounds pin it at 0 however much the rows ask for (not a default until measured out of sample)
    assert fit(_synthetic(12e-6), profiles={"h100": BASE})["h100"].host_launch_time == 0.0
    pb = first_order_problem(_synthetic(0.0), {"h100": BASE})
    x = _initial(pb)
    for h, ok in ((0.0, True), (2e-6, False), (lo, True), (hi, True), (hi * 1.01, False)):
        x["host"][0] = h
        assert feasible(pb, x, FREE) is ok
        assert feasible(pb, x, Bounds()) is (h == 0.0)


def test_a_table_without_the_column_leaves_it_at_zero_with_a_note() -> None:
    sens = _synthetic(12e-6).drop(columns=["host"])
    train = np.ones(len(sens), bool)
    ff = fit_fold(sens, {"h100": BASE}, train, bounds=FREE)
    assert ff.profiles["h100"].host_launch_time == 0.0
    assert any("no host column" in n for n in ff.notes)
    with_col = fit_fold(_synthetic(12e-6), {"h100": BASE}, train, bounds=FREE)
    assert with_col.profiles["h100"].host_launch_time == pytest.approx(12e-6, abs=0.1e-6)
    assert any("host_launch_time fitted" in n for n in with_col.notes)


def test_round_off_is_not_evidence() -> None:
    sens = _synthetic(12e-6)
    sens["host"] = sens.base * (1 + 2e-14)
    pb = first_order_problem(sens, {"h100": BASE})
    assert not host_evidence(pb, np.ones(len(sens), bool)).any()
