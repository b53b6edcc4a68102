"""Validation against published training runs: inference rules, error bookkeeping, and the
regression guard on the prediction error (MAPE) over a fixed subset of the bundled data set.

Source of the measurements: workloads/data/published_runs.csv (see workloads/data/SOURCES.md);
the full-table figures are in docs/VALIDATION.md.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from clustersim.simulator.profile import PROFILE_DIR, CalibrationProfile, default_profile, load_profile
from clustersim.simulator.step.compute import op_time, ops_time
from clustersim.simulator.calibration.validate import (
    OUTPUT_COLUMNS, error_stats, load_runs, megatron_lm_rows, scenario_for_row, stratified_subset, validate_row,
    validate_runs,
)
from clustersim.simulator.cli.validate import register
from clustersim.simulator.calibration.validate_rules import mcore_model_flops, measured_step_time, model_for_row
from clustersim.topologies.accelerators import ACCELERATORS, get_accelerator
from clustersim.workloads import Op

# Regression guard (subset: every Megatron-LM row + 60 stratified others, rng seed 0), with the
# bundled default profiles. Reached when written: subset MAPE 8.48 %, Megatron-LM rows 2.90 %
# (full table: 8.63 % and 2.90 %, docs/VALIDATION.md); the tolerances allow ~0.6-1 point of drift.
# Since December's twenty-first stop the validation prices collectives with the flow model that
# `simulate` prints (one prediction path) and the per-GPU parameters are refitted with it: reached
# 6.82 % and 3.09 % (the profiles before, fitted with the analytic model: 6.90 % and 2.93 % under it,
# 7.64 % and 4.76 % under the flow model).
# Calculon reports 3.65 % mean error on a similar Megatron table (Isaev et al., SC'23).
# An in-sample drift check at fixed profiles, not the figure changes are judged by (the
# out-of-sample MAPE of `clustersim validate --cross-validate family`, docs/VALIDATION.md). The
# family-weighted refit (subset 10.06 %, Megatron-LM rows 5.63 %) was not installed because it is
# worse out of sample, not because of this guard: Llama 2 model-card GPU-hours (test_energy_published)
# +42 / +34 / +60 % against -8 / -17 / +1 %, and a first-order family-held-out 14.93 % against 13.49 %.
SUBSET_MAPE_MAX = 9.5
MEGATRON_MAPE_MAX = 3.8
"""In sample, the Megatron-LM README rows (3.69 % since December's twenty-fifth stop read the GEMM
curve at a call's ideal duration: the A100 rows lose 0.6 point in sample, the table gains 0.35 out
of sample; docs/VALIDATION.md; 3.5 before)."""


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return load_runs()


def _row(runs: pd.DataFrame, row_id: int) -> dict:
    return runs[runs.row_id == row_id].iloc[0].to_dict()


def test_bundled_data_set_has_the_published_rows(runs: pd.DataFrame) -> None:
    # workloads/data/README.md: 556 rows, 505 with a step time (the collected rows: test_collected_runs.py)
    assert len(runs) == 556
    assert runs.row_id.is_unique


def test_measured_step_time_from_throughput(runs: pd.DataFrame) -> None:
    row = _row(runs, 1)
    row["iteration_time_s"] = float("nan")
    t, col = measured_step_time(row, [])
    expected = row["global_batch_seqs"] * row["seq_len"] / row["tokens_per_s_total"]
    assert col == "tokens_per_s" and t == pytest.approx(expected)
    assert t == pytest.approx(_row(runs, 1)["iteration_time_s"], rel=0.01)  # the source's own figure


def test_measured_step_time_from_sc21_tflops(runs: pd.DataFrame) -> None:
    row = _row(runs, 227)  # Megatron README Jan 2021: GPT 1.7B, 32 A100, 137 TFLOP/s
    t, col = measured_step_time(row, [])
    b, s, l, h, v = 512, 2048, 24, 2304, 51200
    flops = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))  # SC'21 eq. (3)
    assert col == "tflops_per_gpu"
    assert t == pytest.approx(flops / (137e12 * 32), rel=1e-9)


def test_megatron_core_flops_closed_form(runs: pd.DataFrame) -> None:
    model = model_for_row(_row(runs, 237), [])  # GPT 1.7B of the 2024 table: MHA, ffn = 4h
    assert not model.gated_mlp and model.num_kv_heads == model.num_heads
    s, b, l, h, v = 4096, 192, model.num_layers, model.hidden_size, model.vocab_size
    expected = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    assert mcore_model_flops(model, s, b) == pytest.approx(expected, rel=1e-9)


def test_error_is_signed_relative_to_measured(runs: pd.DataFrame) -> None:
    rec = validate_row(_row(runs, 254))  # SC'21 Table 2, PTD-P 174.6B on 384 A100
    assert rec["status"] == "ok"
    expected = (rec["predicted_step_time_s"] - rec["measured_step_time_s"]) / rec["measured_step_time_s"] * 100
    assert rec["error_pct"] == pytest.approx(expected)
    assert 0 < rec["predicted_mfu"] < 1


def test_rows_missing_what_no_rule_infers_are_skipped_with_a_reason(runs: pd.DataFrame) -> None:
    nemotron = runs[runs.model.str.startswith("Nemotron_3_Ultra")].iloc[0].to_dict()  # no preset
    strong = _row(runs, 246)  # README strong scaling: tp, pp, dp not published
    no_time = {**_row(runs, 1), "iteration_time_s": None, "tokens_per_s_total": None,
               "tokens_per_s_per_gpu": None, "tflops_per_gpu": None, "mfu_pct": None}
    for row, word in ((nemotron, "without a preset"), (strong, "not published"), (no_time, "no step time")):
        rec = validate_row(row)
        assert rec["status"] == "skipped" and word in rec["reason"]
        assert rec["predicted_step_time_s"] is None


def test_inference_rules_are_recorded(runs: pd.DataFrame) -> None:
    rec = validate_row(_row(runs, 227))  # micro-batch, recompute, precision, tp/pp not printed
    assert rec["status"] == "ok"
    for rule in ("micro_batch = ", "not published", "recompute: full", "precision: bf16", "model-parallel size",
                 "attention unfused"):
        assert rule in rec["inferred"]


def test_unpublished_micro_batch_and_vpp_are_tuned_to_the_fastest_that_fits(runs: pd.DataFrame) -> None:
    row = _row(runs, 241)  # Megatron-Core 2024 README, GPT 70B: TP8 PP2 DP48, micro-batch and VPP not printed
    model = model_for_row(row, [])
    sc = scenario_for_row(row)
    assert len(sc.candidates) > 4 and {p.vpp for p in sc.candidates} > {1}
    rec = validate_row(row)
    assert "not published" in rec["inferred"]
    for plan in sc.candidates:  # no candidate is faster than the chosen one, unless it does not fit
        try:
            other = validate_row(row, plan=plan)
        except ValueError:
            continue
        if "memory check lifted" not in other["inferred"]:
            assert other["predicted_step_time_s"] >= rec["predicted_step_time_s"] - 1e-12
    # a row that publishes micro-batch and VPP keeps them: one plan, no tuning
    published = _row(runs, 300)
    assert scenario_for_row(published).candidates == ()
    assert "not published" not in validate_row(published)["inferred"]
    assert model.num_layers % rec["_plan"].vpp == 0


def test_pre_interleaving_frameworks_tune_the_micro_batch_only(runs: pd.DataFrame) -> None:
    sc = scenario_for_row(_row(runs, 236))  # Megatron-LM Jan 2021 (before the interleaved schedule)
    assert sc.candidates and {p.vpp for p in sc.candidates} == {1}
    assert {p.micro_batch for p in sc.candidates} == {1, 2, 4, 8}


def test_one_output_row_per_input_row_in_order(runs: pd.DataFrame) -> None:
    few = runs[runs.row_id.isin([1, 227, 246, 254])]
    out = validate_runs(few)
    assert list(out.columns) == list(OUTPUT_COLUMNS)
    assert out.row_id.tolist() == few.row_id.tolist()
    assert set(out.status) <= {"ok", "skipped"}


def test_validation_is_deterministic(runs: pd.DataFrame) -> None:
    a, b = validate_row(_row(runs, 300)), validate_row(_row(runs, 300))
    assert a["predicted_step_time_s"] == b["predicted_step_time_s"]


def test_fp8_precision_efficiency_scales_fp8_gemms_only() -> None:
    acc = get_accelerator("h100")
    op = Op(name="fc1", kind="gemm", flops=1e12, bytes=1.0, bwd_flops=2e12, bwd_bytes=1.0, params=1,
            gemm_shape=(1, 1, 1), fp8=True)
    base = CalibrationProfile(kernel_overhead=0.0)
    half = base.replace(precision_efficiency={"fp8": 0.5})
    assert op_time(op, acc, half, "fp8") == pytest.approx(2 * op_time(op, acc, base, "fp8"))
    assert op_time(op, acc, half, "bf16") == pytest.approx(op_time(op, acc, base, "bf16"))


def test_expert_efficiency_slows_routed_expert_gemms_only() -> None:
    acc = get_accelerator("h100")
    kw = dict(flops=1e12, bytes=1.0, bwd_flops=2e12, bwd_bytes=1.0, params=1, gemm_shape=(1, 1, 1))
    expert = Op(name="expert_fc1", kind="gemm", role="routed_expert", **kw)
    shared = Op(name="shared_expert_fc1", kind="gemm", role="shared_expert", **kw)
    base = CalibrationProfile(kernel_overhead=0.0)
    slow = base.replace(expert_efficiency=0.5)
    assert ops_time([expert], acc, slow, "bf16") == pytest.approx(2 * ops_time([expert], acc, base, "bf16"))
    assert ops_time([shared], acc, slow, "bf16") == pytest.approx(ops_time([shared], acc, base, "bf16"))


def test_bundled_profiles_load_and_are_found_by_accelerator_name() -> None:
    paths = sorted(PROFILE_DIR.glob("*.yaml"))
    assert paths, "no bundled profiles"
    for path in paths:
        prof = load_profile(path)
        matches = [a for a in ACCELERATORS.values() if a.name.lower().split()[0].startswith(path.stem)]
        assert matches, f"{path.name} matches no accelerator"
        assert all(default_profile(a.name) == prof for a in matches)


def test_subset_mape_stays_below_the_level_reached(runs: pd.DataFrame) -> None:
    subset = stratified_subset(runs, 60, np.random.default_rng(0))
    out = validate_runs(subset)
    ok = out[out.status == "ok"]
    with_time = subset.iteration_time_s.notna() | subset.tokens_per_s_per_gpu.notna() | subset.tflops_per_gpu.notna()
    assert len(ok) >= 0.9 * (with_time & ~subset.model.str.startswith("Nemotron_3")).sum()
    assert error_stats(ok.error_pct)["mape"] <= SUBSET_MAPE_MAX
    meg = megatron_lm_rows(ok)
    assert len(meg) >= 35  # 37 Megatron-LM rows, 2 strong-scaling rows lack their degrees
    assert error_stats(meg.error_pct)["mape"] <= MEGATRON_MAPE_MAX


def test_cli_writes_one_row_per_input_and_rejects_a_bad_file(runs: pd.DataFrame, tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `validate` a named subcommand
    src = tmp_path / "runs.csv"
    runs[runs.row_id.isin([1, 246, 254])].to_csv(src, index=False)
    out = tmp_path / "out.csv"
    res = CliRunner().invoke(app, ["validate", str(src), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    written = pd.read_csv(out)
    assert written.row_id.tolist() == [1, 246, 254] and "MAPE" in res.output
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    res = CliRunner().invoke(app, ["validate", str(bad)])
    assert res.exit_code == 2 and "lacks column" in res.output


def test_error_stats_closed_form() -> None:
    s = error_stats(pd.Series([10.0, -20.0, 30.0]))
    assert s["mape"] == pytest.approx(20.0) and s["median_abs"] == 20.0 and s["worst_abs"] == 30.0
    assert s["bias"] == pytest.approx(20.0 / 3)
    assert math.isnan(error_stats(pd.Series([], dtype=float))["mape"])


def test_attention_kernel_follows_the_era_of_the_run(runs: pd.DataFrame) -> None:
    from clustersim.simulator.calibration.validate_plan import attention_kernel
    kernels = {rid: attention_kernel(_row(runs, rid), []) for rid in (217, 254, 1, 240, 300)}
    # Megatron-LM 2021 and SC'21: unfused; MosaicML 2023: FlashAttention 1/2 era; 2024 and NeMo: current
    assert kernels == {217: "unfused", 254: "unfused", 1: "flash2", 240: "flash3", 300: "flash3"}


def test_attention_kernel_efficiency_scales_flash2_attention_only() -> None:
    acc = get_accelerator("h100")
    kw = dict(kind="attention", flops=1e12, bytes=1.0, bwd_flops=2e12, bwd_bytes=1.0, params=0)
    old, new = Op(name="attn_core", kernel="flash2", **kw), Op(name="attn_core", kernel="flash3", **kw)
    base = CalibrationProfile(kernel_overhead=0.0)
    slow = base.replace(attention_kernel_efficiency={"flash2": 0.5})
    assert op_time(old, acc, slow, "bf16") == pytest.approx(2 * op_time(old, acc, base, "bf16"))
    assert op_time(new, acc, slow, "bf16") == pytest.approx(op_time(new, acc, base, "bf16"))
    with pytest.raises(ValueError, match="attention_kernel_efficiency"):
        base.replace(attention_kernel_efficiency={"flash9": 0.5})


def test_gradient_dtype_follows_the_framework_recipe(runs: pd.DataFrame) -> None:
    # Megatron-Bridge performance recipes set grad_reduce_in_fp32 = False: bf16 grad buffers
    bridge = scenario_for_row(_row(runs, 370))  # Megatron-Bridge 26.04.01, Llama 3 70B, H100
    assert bridge.plan.grad_dtype_bytes == 2 and any("gradients bf16" in n for n in bridge.inferred)
    nemo = scenario_for_row(_row(runs, 291))  # NeMo 24.07: Megatron-Core's fp32 main grads
    assert nemo.plan.grad_dtype_bytes == 4
    mosaic = scenario_for_row(_row(runs, 1))  # llm-foundry: 2 with PURE mixed precision, else 4
    assert mosaic.plan.grad_dtype_bytes == (2 if "pure" in str(_row(runs, 1)["precision"]).lower() else 4)


def test_published_plans_that_ran_fit_after_the_memory_fixes(runs: pd.DataFrame) -> None:
    # Megatron-Bridge Llama 3 70B on H100 (TP4 PP8 VPP5, FP8) and Llama 3.1 405B on GB200 (TP4
    # PP16 VPP4) ran; with fp32 grads and bf16-saved GEMM inputs the memory model put them at
    # 81.3 GiB > 80 and 218 GiB > 186; bf16 grads (the recipes) and FP8-saved inputs (TE) fit them.
    from clustersim.simulator.step.partition import partition_plan
    for rid in (370, 336):
        sc = scenario_for_row(_row(runs, rid))
        need = max(m.total for m in partition_plan(sc.model, sc.training, sc.plan).memory)
        assert need <= sc.cluster.accelerator.hbm_capacity, rid
