"""The activation CPU offloading of a framework recipe (``recipe_plans.RECIPE_CPU_OFFLOADING``): the
Megatron-Bridge Llama 3 Megatron-FSDP recipes set ``cpu_offloading_num_layers`` (e.g.
LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V1: 40, scripts/performance/configs/llama/
llama3_workload_base_configs.py), which the published rows do not print; without it their plans are
predicted out of memory."""

from __future__ import annotations

from typing import Any

import pytest

from clustersim.simulator.calibration.recipe_plans import RECIPE_CPU_OFFLOADING, RecipeOffload, recipe_cpu_offloading
from clustersim.simulator.calibration.validate import load_runs, validate_row
from clustersim.simulator.calibration.validate_plan import plan_for_row
from clustersim.simulator.plan.checks import check_plan
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

BRIDGE = "Megatron-Bridge / Megatron-Core (NeMo 25.11)"
FSDP = "Megatron-FSDP (shard group = GPUs/(TP*PP))"
SPELLING = {"bf16": "BF16", "fp8": "FP8-CS"}
CLUSTER = {"GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "B200": "dgx-b200"}


def _recipe_row(entry: RecipeOffload, **changes: Any) -> dict[str, Any]:
    tp, pp, mb = entry.degrees
    return {"framework": BRIDGE, "gpu_type": entry.gpu, "precision": SPELLING[entry.precisions[0]], "tp": tp,
            "pp": pp, "micro_batch": mb, "zero_fsdp": FSDP, **changes}


def _plan(entry: RecipeOffload, **changes: Any) -> tuple[Any, list[str]]:
    model = get_model(entry.models[0])
    gpus = 128 if model.name == "llama3-405b" else 64
    tp, _, mb = entry.degrees
    training = TrainingSpec(seq_len=8192, global_batch_size=2 * gpus // tp * mb, precision="bf16")
    cluster = get_cluster(CLUSTER[entry.gpu], gpus)
    notes: list[str] = []
    plan = plan_for_row(_recipe_row(entry, **changes), model, training, cluster, notes)
    check_plan(model, training, cluster, plan)  # Megatron-Core's rules and the host link accept it
    return plan, notes


@pytest.mark.parametrize("entry", RECIPE_CPU_OFFLOADING, ids=lambda e: f"{e.models[0]}-{e.gpu}-{e.precisions[0]}")
def test_each_recipe_sets_its_rows_plan(entry: RecipeOffload) -> None:
    plan, notes = _plan(entry)
    assert plan.cpu_offloading_num_layers == entry.layers and plan.fsdp == "full" and plan.pp == 1
    assert any(f"cpu_offloading_num_layers = {entry.layers}" in n and entry.locator in n for n in notes)
    assert "workload_base_configs.py" in entry.locator and "stored copy" in entry.locator


def test_a_row_that_prints_its_offloading_keeps_it() -> None:
    entry = RECIPE_CPU_OFFLOADING[0]
    assert _plan(entry, cpu_offloading_num_layers=7)[0].cpu_offloading_num_layers == 7
    assert _plan(entry, cpu_offloading_num_layers=0)[0].cpu_offloading_num_layers == 0


@pytest.mark.parametrize("changes", [
    {"framework": "Megatron-LM (Megatron-Core)"},  # another framework
    {"zero_fsdp": "DDP + distributed optimizer (FSDP=0)"},  # the recipe runs Megatron-FSDP
    {"precision": "MXFP8"},  # the MXFP8 recipe runs pp 4 and offloads nothing
    {"micro_batch": 1},  # a printed micro-batch that is not the recipe's
    {"recompute": "full"},  # Megatron-Core refuses offloading with recompute: not this recipe
])
def test_a_row_not_of_the_recipe_is_unchanged(changes: dict[str, Any]) -> None:
    entry = next(e for e in RECIPE_CPU_OFFLOADING if e.gpu == "GB200" and e.precisions == ("fp8",)
                 and e.models == ("llama3-70b",))
    assert _plan(entry, **changes)[0].cpu_offloading_num_layers == 0


def test_the_lookup_is_keyed_by_model_gpu_precision_and_degrees() -> None:
    look = {"framework": BRIDGE, "model": "llama3-70b", "gpu": "GB200", "precision": "fp8"}
    entry = recipe_cpu_offloading(**look, degrees=(1, 1, 2), micro_batch_printed=True)
    assert entry is not None and entry.layers == 40
    assert recipe_cpu_offloading(**look, degrees=(1, 1, 9), micro_batch_printed=False) is entry  # not printed
    assert recipe_cpu_offloading(**look, degrees=(2, 1, 2), micro_batch_printed=True) is None
    assert recipe_cpu_offloading(**{**look, "gpu": "H100"}, degrees=(1, 1, 2), micro_batch_printed=True) is None
    entry405 = recipe_cpu_offloading(**{**look, "model": "llama3-405b"}, degrees=(2, 1, 1), micro_batch_printed=False)
    assert entry405 is not None and entry405.layers == 92


def _published_70b_gb200(**changes: Any) -> dict[str, Any]:
    runs = load_runs()
    rows = runs[(runs.model == "LLAMA3_70B") & (runs.gpu_type == "GB200") & (runs.precision == "FP8")
                & runs.framework.str.contains("NeMo 26.04.01", regex=False)
                & runs.zero_fsdp.str.startswith("Megatron-FSDP")]
    assert len(rows) == 1
    return {**rows.iloc[0].to_dict(), **changes}


def test_the_published_70b_gb200_plan_fits_with_its_recipes_offloading() -> None:
    rec = validate_row(_published_70b_gb200())
    assert rec["status"] == "ok" and "cpu_offloading_num_layers = 40" in rec["inferred"]
    assert "memory check lifted" not in rec["inferred"]
    # the same plan without offloading (printed 0) is predicted out of memory
    off = validate_row(_published_70b_gb200(cpu_offloading_num_layers=0))
    assert "memory check lifted" in off["inferred"]
    # the host copies cost time (40 layers over GB200's 225 GB/s share of NVLink-C2C), never less
    assert rec["predicted_step_time_s"] >= off["predicted_step_time_s"]
