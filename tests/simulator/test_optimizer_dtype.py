"""Optimizer state in reduced precision (``TrainingSpec.optimizer_state_dtype_bytes`` and
``master_param_dtype_bytes``: Megatron-Core's precision-aware optimizer, Apex DistributedFusedAdam's
``dtype``), and the DGX Cloud Nemotron-4 340B recipe that sets it (with bf16 gradients and selective
recompute), whose published plans it lets fit.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.calibration.validate import COLLECTED_PATH, load_runs, scenario_for_row, validate_row
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.partition import partition_plan
from clustersim.workloads import TrainingSpec, WorkloadError, get_model


def test_optimizer_memory_scales_with_the_state_dtypes() -> None:
    model = replace(get_model("llama3-8b"), num_layers=4)
    plan = ParallelPlan(tp=1, pp=1, dp=8, zero=1)
    fp32 = TrainingSpec(seq_len=4096, global_batch_size=8)
    bf16 = replace(fp32, optimizer_state_dtype_bytes=2, master_param_dtype_bytes=2)
    mixed = replace(fp32, optimizer_state_dtype_bytes=2)  # bf16 moments, fp32 main params
    opt = {name: partition_plan(model, t, plan).stages[0].memory.optimizer for name, t in
           (("fp32", fp32), ("bf16", bf16), ("mixed", mixed))}
    assert (fp32.master_param_bytes, fp32.optimizer_state_bytes) == (4, 8)
    assert opt["bf16"] == pytest.approx(opt["fp32"] * 6 / 12)
    assert opt["mixed"] == pytest.approx(opt["fp32"] * 8 / 12)
    other = partition_plan(model, bf16, plan).stages[0].memory
    base = partition_plan(model, fp32, plan).stages[0].memory
    assert (other.weights, other.grads, other.activations) == (base.weights, base.grads, base.activations)
    assert TrainingSpec(seq_len=8, global_batch_size=1, precision="fp32", master_param_dtype_bytes=2).master_param_bytes == 0


@pytest.mark.parametrize(("field", "value"), [("optimizer_state_dtype_bytes", 3), ("master_param_dtype_bytes", 1),
                                              ("optimizer_state_dtype_bytes", True)])
def test_bad_state_dtypes_name_the_field(field: str, value: object) -> None:
    with pytest.raises(WorkloadError, match=field):
        TrainingSpec(seq_len=8, global_batch_size=1, **{field: value})  # type: ignore[arg-type]


def test_the_gsw_nemotron_340b_recipe_is_read_and_its_plans_fit() -> None:
    rows = {r["row_id"]: r for r in load_runs(COLLECTED_PATH).to_dict("records")}
    for rid in (1173, 1178):                     # README_340b (table label 24.11), 128 H100, BF16 / FP8
        sc = scenario_for_row(rows[rid])
        assert (sc.plan.grad_dtype_bytes, sc.plan.recompute, sc.plan.recompute_modules) == (2, "selective", ("core_attn",))
        assert (sc.training.optimizer_state_dtype_bytes, sc.training.master_param_dtype_bytes) == (2, 2)
        out = validate_row(rows[rid])
        assert out["status"] == "ok" and "memory check lifted" not in out["inferred"]
        assert "nemotron4-340b-synth.yaml" in out["inferred"]
    llmb = scenario_for_row(rows[1103])          # the LLMB recipe's README at the same degrees: not that recipe
    assert (llmb.plan.tp, llmb.plan.pp, llmb.plan.vpp, llmb.plan.micro_batch) == (8, 8, 12, 1)
    assert (llmb.plan.grad_dtype_bytes, llmb.training.optimizer_state_dtype_bytes, llmb.plan.recompute) == (4, 4, "none")
