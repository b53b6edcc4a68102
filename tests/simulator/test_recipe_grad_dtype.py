"""The gradient dtype of a framework recipe (``recipe_plans.RECIPE_GRAD_DTYPE``): a NeMo 1.x launcher
recipe that sets ``optim.grad_sync_dtype: bf16`` keeps 2-byte gradients, which is what lets the
published Nemotron-4 340B plan (128 H100, tp 8 pp 8 vpp 12, micro-batch 1) fit in 80 GB."""

from __future__ import annotations

from typing import Any

from clustersim.simulator.calibration.recipe_plans import RECIPE_GRAD_DTYPE, recipe_grad_dtype
from clustersim.simulator.calibration.validate import load_runs, validate_row

NEMO = "NeMo 24.07 (Megatron-Core)"


def _row(**changes: Any) -> dict[str, Any]:
    runs = load_runs()
    rows = runs[(runs.model == "Nemotron4-340B") & (runs.framework == NEMO)]
    assert len(rows) == 1
    return {**rows.iloc[0].to_dict(), **changes}


def test_the_lookup_matches_framework_model_and_degrees() -> None:
    entry = recipe_grad_dtype(framework=NEMO, model="nemotron-4-340b", degrees=(8, 8, 12, 1))
    assert entry is not None and entry.grad_dtype_bytes == 2 and "nemotron_340b.yaml" in entry.locator
    assert recipe_grad_dtype(framework="Megatron-LM", model="nemotron-4-340b", degrees=(8, 8, 12, 1)) is None
    assert recipe_grad_dtype(framework=NEMO, model="llama3-70b", degrees=(8, 8, 12, 1)) is None
    assert recipe_grad_dtype(framework=NEMO, model="nemotron-4-340b", degrees=(8, 8, 1, 1)) is None
    for e in RECIPE_GRAD_DTYPE:  # every entry says where it comes from and sets a real dtype
        assert e.grad_dtype_bytes in (2, 4) and e.optimizer_dtype_bytes in (None, 2, 4)
        assert "NeMo-Framework-Launcher" in e.locator or "github NVIDIA/dgxc-benchmarking" in e.locator


def test_the_recipe_dtype_lets_the_published_plan_fit() -> None:
    rec = validate_row(_row())
    assert rec["status"] == "ok" and "gradients 16-bit" in rec["inferred"]
    assert "memory check lifted" not in rec["inferred"]
    # the same plan with Megatron-Core's fp32 default (a framework with no such recipe) does not fit
    other = validate_row(_row(framework="Megatron-LM (Megatron-Core)"))
    assert "gradients 16-bit" not in other["inferred"] and "memory check lifted" in other["inferred"]
    # bf16 gradients halve the data-parallel reduction: never slower
    assert rec["predicted_step_time_s"] <= other["predicted_step_time_s"]
