"""Leave-one-GPU-type-out cross-validation, the interval of a transferred profile, and the profile a
part without its own runs at (issue 12, items 5 and 7).

The fold protocol is checked on the synthetic sensitivities of test_crossval (closed form); the
interval on synthetic held-out ratios with a known answer; the part table against the validation
path (one prediction path: ``simulate`` and ``validate`` give a part the same profile).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from clustersim.simulator.calibration.fit_crossval import cross_validate_families, fit_fold, fold_labels
from clustersim.simulator.calibration.validate import SYSTEM_OF_PART
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.interval_fit import conformal_bounds
from clustersim.simulator.intervals import interval_for, load_intervals, load_transferred, transferred_stem
from clustersim.simulator.calibration.intervals_transferred import (
    fold_weights, transferred_bounds, transferred_coverage, transferred_table, type_widening,
)
from clustersim.simulator.profile import PROFILE_DIR, PROFILE_OF_PART, default_profile, load_profile, profile_stem_of
from clustersim.topologies.accelerators import ACCELERATORS
from tests.simulator.test_crossval import PROFILES, _families


def test_fold_labels_by_family_and_by_gpu_type() -> None:
    sens = _families()
    assert set(fold_labels(sens, "family")) == {"mosaicml", "megatron-bridge"}
    assert list(fold_labels(sens, "gpu")) == list(sens.group)
    with pytest.raises(CalibrationError, match="use one of family, gpu"):
        fold_labels(sens, "random")


THREE = {**PROFILES, "a100": PROFILES["h100"].replace(name="a100")}


def test_a_held_out_gpu_type_cannot_move_its_fold_and_takes_its_donor() -> None:
    sens = _families()
    b200 = (sens.group == "b200").to_numpy()
    a = fit_fold(sens, PROFILES, ~b200, family="b200", sweeps=1, transfer=False)
    moved = sens.copy()
    moved.loc[b200, "measured"] *= 1.7  # the held-out type's truth changes wildly
    b = fit_fold(moved, PROFILES, ~b200, family="b200", sweeps=1, transfer=False)
    assert a.profiles == b.profiles
    assert a.profiles["b200"].gemm_efficiency == a.profiles["h100"].gemm_efficiency  # the donor's fit
    assert a.fitted_params["b200"] == 0
    assert any(n.startswith("b200: no training row, the fitted h100 profile") for n in a.notes)


def test_cross_validation_by_gpu_type_holds_out_each_type_with_all_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol end to end, with the re-simulation replaced by the first-order time at each
    fold's profile (exact on the synthetic rows): every row is held out in the fold of its own GPU
    type, the table is per held-out type, and a type's held-out times do not depend on its rows."""
    from clustersim.simulator.calibration import fit_crossval as fc

    def first_order(runs, ok, fam, fold_of, full, fidelity, workers, progress):  # type: ignore[no-untyped-def]
        pb = fc.first_order_problem(ok, THREE)
        held = np.zeros(len(ok))
        for f, ff in fold_of.items():
            held[fam == f] = fc._first_order_at(pb, ok, THREE, ff)[fam == f]
        inner = fc._first_order_at(pb, ok, THREE, full) if full is not None else held
        return pd.DataFrame({"row_id": ok.row_id, "held_out_s": held, "in_sample_s": inner, "held_status": "ok",
                             "held_reason": "", "regime": "dense", "scenario": ok.row_id.astype(str), "predicted_oom": False})

    monkeypatch.setattr(fc, "simulate_held_out", first_order)
    sens = _families().assign(row_id=np.arange(60))
    a100 = (sens.row_id < 30) & (sens.row_id % 2 == 0)
    sens.loc[a100, "group"], sens.loc[a100, "gpu_type"] = "a100", "A100"
    runs = pd.DataFrame({"row_id": np.arange(60), "num_gpus": 8})
    cv = cross_validate_families(runs, sens, THREE, sweeps=1, by="gpu")
    assert list(cv.by_family.family) == ["a100", "b200", "h100", "all"]
    assert (cv.rows.fold == cv.rows.group).all()
    assert set(cv.rows.family) == {"mosaicml", "megatron-bridge"}  # the publication family is kept
    moved = sens.copy()
    moved.loc[moved.group == "b200", "measured"] *= 1.7
    cv2 = cross_validate_families(runs, moved, THREE, sweeps=1, by="gpu")
    b200 = cv.rows.group == "b200"
    assert cv2.rows[b200].held_out_s.to_numpy() == pytest.approx(cv.rows[b200].held_out_s.to_numpy())
    assert not np.allclose(cv2.rows[~b200].held_out_s, cv.rows[~b200].held_out_s)  # others' folds saw them


def _types(ratios: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"fold": t, "family": "f", "held_out_s": 1.0, "measured_s": r}
                         for t, rs in ratios.items() for r in rs])


def test_each_held_out_type_weighs_one_unit() -> None:
    frame = _types({"a": [1.0] * 30, "b": [1.2] * 10})
    w = fold_weights(frame)
    assert w[:30].sum() == pytest.approx(1.0) and w[30:].sum() == pytest.approx(1.0)


def test_exchangeable_types_need_no_widening_and_are_covered() -> None:
    values = list(np.round(np.arange(0.90, 1.095, 0.01), 2))
    frame = _types({t: values for t in "abcd"})
    assert type_widening(frame, 0.8) == 1.0
    assert transferred_bounds(frame, 0.8) == conformal_bounds(frame.measured_s.to_numpy(), 0.8, fold_weights(frame))
    cov = transferred_coverage(frame).query("fold == 'all'").set_index("level").coverage
    assert cov[0.8] >= 0.8 and cov[0.9] >= 0.9


def test_a_type_biased_against_the_others_widens_their_interval() -> None:
    rng = np.random.default_rng(3)
    base = {t: list(np.exp(rng.normal(0.0, 0.05, 40))) for t in "abcd"}
    biased = {**base, "e": list(np.exp(rng.normal(0.4, 0.05, 40)))}
    assert type_widening(_types(biased), 0.8) > type_widening(_types(base), 0.8)
    lo, hi = transferred_bounds(_types(biased), 0.8)
    lo0, hi0 = transferred_bounds(_types(base), 0.8)
    assert lo <= lo0 and hi > hi0
    cov = transferred_coverage(_types(biased)).set_index(["fold", "level"]).coverage
    assert cov[("e", 0.8)] < 0.5  # the others never saw a type that far off: honestly not covered


def test_transferred_table_round_trip_and_interval(tmp_path) -> None:
    from clustersim.simulator.interval_fit import write_intervals
    frame = _types({t: list(np.round(np.arange(0.90, 1.095, 0.01), 2)) for t in ("a100", "h100", "b200")})
    tab = transferred_table(frame)
    path = write_intervals(tab, tmp_path / "t.yaml")
    back = load_transferred(path)
    assert back is not None and back["gpu_types"] == ["a100", "b200", "h100"]
    assert back["ratio_80"] == pytest.approx(list(transferred_bounds(frame, 0.8)))
    iv = interval_for(10.0, "dense", "H800 SXM 80GB", 64, table=load_intervals(), transferred=back)
    assert iv.extrapolated and "leave-one-GPU-type-out" in iv.nearest and "h100" in iv.nearest
    own = interval_for(10.0, "dense", "H100 SXM 80GB", 64, table=load_intervals(), transferred=back)
    assert (iv.low_s, iv.high_s) == pytest.approx((min(10.0 * back["ratio_80"][0], own.low_s),
                                                   max(10.0 * back["ratio_80"][1], own.high_s)))
    assert own == interval_for(10.0, "dense", "H100 SXM 80GB", 64, table=load_intervals())  # a fitted part: as before
    assert not own.extrapolated
    assert load_transferred(tmp_path / "missing.yaml") is None


@pytest.mark.parametrize(("gpu", "stem"), [
    ("H800 SXM 80GB", "h100"), ("H20 96GB", "h100"), ("GH200 96GB", "h100"), ("H100 PCIe 80GB", "h100"),
    ("A800 SXM4 80GB", "a100"), ("H200 SXM 141GB", "h200"),
    ("H100 SXM 80GB", None), ("A100 SXM4 40GB", None), ("GB300 (per GPU)", None),  # fitted on their own rows
    ("MI300X 192GB", None), ("cpu (measured)", None)])  # no bundled profile: the generic defaults' rules
def test_which_parts_run_at_a_profile_no_row_of_theirs_fitted(gpu: str, stem: str | None) -> None:
    fitted = ["a100", "b200", "b300", "gb200", "gb300", "h100"]
    assert transferred_stem(gpu, fitted) == stem


def test_a_borrowed_profile_is_never_more_certain_than_a_fitted_one() -> None:
    """The interval of a part whose profile is borrowed contains both the transferred bounds and its
    regime's own (the union: bounds of the bundled tables), and is marked extrapolated."""
    moved, tab = load_transferred(), load_intervals()
    assert moved is not None and set(moved["gpu_types"]) == {"a100", "b200", "b300", "gb200", "gb300", "h100"}
    for kind, gpu, fitted in (("dense", "H800 SXM 80GB", "H100 SXM 80GB"), ("moe", "H200 SXM 141GB", "H100 SXM 80GB"),
                              ("dense", "A800 SXM4 80GB", "A100 SXM4 80GB")):
        for level in (0.8, 0.9):
            iv = interval_for(10.0, kind, gpu, 256, level=level)
            ref = interval_for(10.0, kind, fitted, 256, level=level)
            key = f"ratio_{int(level * 100)}"
            assert iv.extrapolated and "leave-one-GPU-type-out" in iv.nearest
            assert iv.low_s == pytest.approx(min(ref.low_s, 10.0 * moved[key][0]))
            assert iv.high_s == pytest.approx(max(ref.high_s, 10.0 * moved[key][1]))
            assert math.isfinite(iv.high_s) and iv.low_s <= ref.low_s and iv.high_s >= ref.high_s


def test_simulate_and_validate_give_a_part_the_same_profile() -> None:
    """One prediction path: the profile ``simulate`` runs a part at (``default_profile``) is the one
    ``validate`` reads a published row of that part with (``SYSTEM_OF_PART``)."""
    for key, (_, stem) in SYSTEM_OF_PART.items():
        assert PROFILE_OF_PART[key] == stem
        assert default_profile(ACCELERATORS[key].name) == load_profile(PROFILE_DIR / f"{stem}.yaml")
    assert profile_stem_of("H800 SXM 80GB") == "h100"
    assert default_profile("H800 SXM 80GB").name == default_profile("H100 SXM 80GB").name
    assert default_profile("MI300X 192GB").name == "default"
    assert profile_stem_of("not a gpu") is None
    for stem in set(PROFILE_OF_PART.values()):
        assert (PROFILE_DIR / f"{stem}.yaml").exists()
