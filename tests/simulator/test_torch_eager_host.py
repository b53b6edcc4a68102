"""Eager host overhead per layer (issue 21): a measured profile field and its closed form.

A profile of the real single-rank step (``benchmarks/torch_step_profile.py``, 2 threads,
near-quiet) found 1.4 ms in autograd nodes and 3.3 ms between ops that no op price covered, and
the Adam loop running per parameter tensor. ``microbench.host_entry`` times the backend's GPT
module tree at negligible arithmetic at two layer counts; ``fit_compute.host_fit`` reads the per-layer
slopes into ``CalibrationProfile.eager_layer_overhead``; the lowering adds, per layer and
micro-batch, what the per-op ``kernel_overhead`` of the layer's priced ops leaves of the forward
and backward figures, and the optimizer figure once per layer per step. Folders measured before
the microbenchmark fit and predict as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.simulator.calibration.fit import fit_profile
from clustersim.simulator.calibration.fit_compute import host_fit
from clustersim.simulator.calibration.torch_backend import check, micro_passes
from clustersim.simulator.calibration.torch_backend.measure import SMALL_GPT, standard_plans
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, StepRecord
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.profile import CalibrationProfile

RECORDED = Path(__file__).parent / "torch_recorded" / "small"
"""A folder measured before the eager-host microbenchmark existed."""

FWD_OPS, BWD_OPS = 10, 14
"""Priced op passes of one layer of the backend's GPT (``gpt.Block``) in the lowering: norm, qkv,
attention, output projection, residual, norm, fc1, GELU, fc2, residual forward; each of them
again for the input gradient plus the 4 GEMMs' weight gradients backward."""


def _entry(fwd: tuple[float, float], step: tuple[float, float], opt: tuple[float, float],
           layers: tuple[float, float] = (1.0, 3.0)) -> dict[str, float]:
    return {"layers_low": layers[0], "layers_high": layers[1], "fwd_low_s": fwd[0], "fwd_high_s": fwd[1],
            "step_low_s": step[0], "step_high_s": step[1], "opt_low_s": opt[0], "opt_high_s": opt[1]}


def test_the_fit_reads_the_per_layer_slopes_of_a_known_microbenchmark() -> None:
    # a step of 1 layer: 2.0 ms (0.9 fixed + 0.3 fwd + 0.5 bwd + 0.2 optimizer... per layer); 3 layers: 2 more
    # layers' 0.3 + 0.5 + 0.2 ms
    compute = {"host": _entry(fwd=(1.0e-3, 1.6e-3), step=(2.0e-3, 4.0e-3), opt=(0.5e-3, 0.9e-3))}
    got = host_fit(compute)
    assert got == pytest.approx({"fwd": 0.3e-3, "bwd": 0.5e-3, "optimizer": 0.2e-3}, rel=1e-12)


def test_the_fit_clips_at_zero_and_rejects_a_degenerate_span() -> None:
    noisy = host_fit({"host": _entry(fwd=(1.0e-3, 0.9e-3), step=(2.0e-3, 2.1e-3), opt=(0.5e-3, 0.5e-3))})
    assert noisy["fwd"] == 0.0 and noisy["optimizer"] == 0.0 and noisy["bwd"] == pytest.approx(0.05e-3)
    with pytest.raises(CalibrationError, match="layers_high"):
        host_fit({"host": _entry(fwd=(1e-3, 2e-3), step=(1e-3, 2e-3), opt=(1e-3, 2e-3), layers=(2.0, 2.0))})


def test_folders_measured_before_fit_and_predict_as_before() -> None:
    report = fit_profile(RECORDED)
    assert report.profile.eager_layer_overhead == {}
    rec = _record(standard_plans(1)[0])
    plain = report.profile.replace(eager_layer_overhead={})
    assert check.predict(rec, report.profile) == check.predict(rec, plain)


def _record(plan: BackendPlan) -> StepRecord:
    return StepRecord(plan=plan, model=SMALL_GPT, world_size=plan.world_size, backend="gloo", device="cpu",
                      step_times=(1.0,))


def _profile(kernel_overhead: float, eager: dict[str, float]) -> CalibrationProfile:
    base = fit_profile(RECORDED, world_size=1).profile
    return base.replace(kernel_overhead=kernel_overhead, eager_layer_overhead=eager)


def test_it_enters_the_single_rank_step_as_a_closed_form() -> None:
    rec = _record(standard_plans(1)[0])
    layers = SMALL_GPT.num_layers
    eager = {"fwd": 0.3e-3, "bwd": 0.5e-3, "optimizer": 0.2e-3}
    # without per-op overhead the whole figure adds, per layer: forward + backward + optimizer
    added = check.predict(rec, _profile(0.0, eager)) - check.predict(rec, _profile(0.0, {}))
    assert added == pytest.approx(layers * (0.3e-3 + 0.5e-3 + 0.2e-3), rel=1e-9)
    # with it, the part the layer's priced ops already carry is not paid twice; a figure below it adds 0
    ko = 20e-6
    small = {"fwd": FWD_OPS * ko - 1e-6, "bwd": 0.5e-3, "optimizer": 0.2e-3}
    added = check.predict(rec, _profile(ko, small)) - check.predict(rec, _profile(ko, {}))
    assert added == pytest.approx(layers * (0.0 + (0.5e-3 - BWD_OPS * ko) + 0.2e-3), rel=1e-9)


def test_every_micro_batch_pays_the_pass_figures_and_the_step_the_optimizer_once() -> None:
    # pp2 GPipe, 4 micro-batches: each stage runs 2 layers; its forwards and backwards are on the
    # critical path of the pipeline (fill, 4 passes, drain), the optimizer once per stage
    plan = next(p for p in standard_plans(2) if p.name == "pp2-gpipe")
    rec = _record(plan)
    fwd_only = check.predict(rec, _profile(0.0, {"fwd": 1e-3})) - check.predict(rec, _profile(0.0, {}))
    opt_only = check.predict(rec, _profile(0.0, {"optimizer": 1e-3})) - check.predict(rec, _profile(0.0, {}))
    assert opt_only == pytest.approx(2 * 1e-3, rel=1e-9)  # 2 layers a stage, both stages in parallel
    # at least every micro-batch's forward on one stage, at most those of both stages in series
    assert 4 * 2 * 1e-3 * (1 - 1e-9) <= fwd_only <= (4 + 1) * 2 * 1e-3 * (1 + 1e-9)


def test_the_microbenchmark_passes_merge_into_their_median() -> None:
    passes = [{"host": _entry(fwd=(f, 2 * f), step=(3 * f, 5 * f), opt=(f, f))} for f in (1e-3, 3e-3, 2e-3)]
    merged = micro_passes.merge(passes, sections=())
    assert merged["host"]["fwd_low_s"] == pytest.approx(2e-3)
    assert host_fit(merged)["fwd"] == pytest.approx(1e-3)


def test_the_host_drift_moves_it_with_the_compute_overheads() -> None:
    prof = _profile(5e-6, {"fwd": 1e-4, "bwd": 2e-4, "optimizer": 3e-4})
    moved = check.drifted(prof, check.Drift(compute=1.5))
    assert moved.eager_layer_overhead == pytest.approx({"fwd": 1.5e-4, "bwd": 3e-4, "optimizer": 4.5e-4})
    assert moved.kernel_overhead == pytest.approx(7.5e-6)


def test_the_three_keys_are_accepted_and_a_bad_key_or_value_is_one_clear_error() -> None:
    ok = {"fwd": 1e-4, "bwd": 2e-4, "optimizer": 0.0}
    assert CalibrationProfile(eager_layer_overhead=ok).eager_layer_overhead == ok
    with pytest.raises(ValueError, match="eager_layer_overhead"):
        CalibrationProfile(eager_layer_overhead={"recompute": 1e-4})
    with pytest.raises(ValueError, match="eager_layer_overhead"):
        CalibrationProfile(eager_layer_overhead={"fwd": -1e-4})
