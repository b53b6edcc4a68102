"""A full recompute that keeps named outputs (JAX ``save_only_these_names``; MaxText's remat policy
``save_qkv_proj``, which the DGX Cloud Benchmarking MaxText recipes set): ``ParallelPlan.recompute_saved``.

Memory: the layer input plus Q, K and V, written out by hand for Llama 3 70B. Time: the recompute is
the full layer's forward less exactly the QKV projection's forward; the search's bound stays below
the engine. The validator reads the recipe's policy for the MaxText rows, whose published plans now
fit in memory (they were predicted out of memory without a recompute).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.calibration.validate import COLLECTED_PATH, load_runs, scenario_for_row, validate_row
from clustersim.simulator.errors import PlanError
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.plan.checks import check_plan
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan, plan_from_mapping
from clustersim.simulator.profile import default_profile
from clustersim.simulator.search.bound import StepBound
from clustersim.simulator.step import simulate_step
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import lower
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, WorkloadError, get_model, layer_activation_bytes, layer_ops

L3 = get_model("llama3-70b")  # hidden 8192, 64 heads / 8 KV heads of 128
TOKENS = 2 * 8192  # micro-batch 2 of 8192 tokens


def test_kept_qkv_adds_q_k_and_v_to_the_layer_input() -> None:
    for tp, sp in ((1, False), (4, True), (4, False)):
        full = layer_activation_bytes(L3, 0, micro_batch=2, seq_len=8192, tp=tp, sp=sp, recompute="full")
        kept = layer_activation_bytes(L3, 0, micro_batch=2, seq_len=8192, tp=tp, sp=sp, recompute="full",
                                      recompute_saved=("qkv_proj",))
        assert full == 2 * TOKENS * 8192 / (tp if sp else 1)
        assert kept - full == pytest.approx(2 * TOKENS * (64 + 2 * 8) * 128 / tp)
        none = layer_activation_bytes(L3, 0, micro_batch=2, seq_len=8192, tp=tp, sp=sp)
        assert full < kept < none
    with pytest.raises(WorkloadError, match="recompute_saved.*'mlpwo'.*qkv_proj"):
        layer_activation_bytes(L3, 0, micro_batch=1, seq_len=8192, recompute="full", recompute_saved=("mlpwo",))


def _costing(plan: ParallelPlan) -> Costing:
    model = replace(L3, num_layers=4)
    cluster = get_cluster("dgx-h100", plan.world_size)
    prof = default_profile(cluster.accelerator.name)
    return Costing(model, TrainingSpec(seq_len=8192, global_batch_size=16), plan, cluster.accelerator, prof,
                   CommPricer(cluster, Placement(plan, cluster.gpus_per_node), prof, "analytic"))


def test_the_recompute_skips_exactly_the_qkv_projection() -> None:
    full = ParallelPlan(tp=1, pp=1, dp=8, micro_batch=2, recompute="full")
    c = _costing(full)
    ops = list(layer_ops(c.model, 0, micro_batch=2, seq_len=8192, tp=1, cp=1, dtype_bytes=2, sp=False))
    qkv = [o for o in ops if o.role == "qkv_proj"]
    assert len(qkv) == 1 and qkv[0].kind == "gemm"
    rec_full = lower(c).stages[0].chunks[0].recompute
    rec_kept = lower(_costing(replace(full, recompute_saved=("qkv_proj",)))).stages[0].chunks[0].recompute
    assert rec_full - rec_kept == pytest.approx(4 * c.time(qkv, "fwd"), rel=1e-9)
    assert 0 < rec_kept < rec_full


def test_step_and_memory_lie_between_full_and_no_recompute_and_the_bound_holds() -> None:
    model, training = replace(L3, num_layers=8), TrainingSpec(seq_len=8192, global_batch_size=16)
    cluster = get_cluster("dgx-h100", 8)
    prof = default_profile(cluster.accelerator.name)
    base = ParallelPlan(tp=1, pp=1, dp=8, micro_batch=2, fsdp="full")
    none, full = simulate_step(model, training, cluster, base), simulate_step(model, training, cluster, replace(base, recompute="full"))
    kept_plan = replace(base, recompute="full", recompute_saved=("qkv_proj",))
    kept = simulate_step(model, training, cluster, kept_plan)
    assert none.step_time < kept.step_time < full.step_time
    assert full.peak_memory < kept.peak_memory < none.peak_memory
    assert StepBound(model, training, cluster, prof).step_time(kept_plan) <= kept.step_time


@pytest.mark.parametrize(("fields", "model", "words"), [
    ({"recompute_saved": ("qkv_proj",)}, "llama3-8b", ["plan.recompute_saved", "recompute = full", "'none'"]),
    ({"recompute": "full", "recompute_saved": ("out_proj",)}, "llama3-8b", ["plan.recompute_saved", "unknown ['out_proj']"]),
    ({"recompute": "full", "recompute_saved": ("qkv_proj", "qkv_proj")}, "llama3-8b", ["plan.recompute_saved", "twice"]),
    ({"recompute": "full", "recompute_saved": ("qkv_proj",)}, "deepseek-v2", ["plan.recompute_saved", "MLA"]),
])
def test_bad_saved_outputs_name_the_field_and_the_fix(fields: dict[str, object], model: str, words: list[str]) -> None:
    plan = replace(ParallelPlan(tp=1, pp=1, dp=8), **fields)  # type: ignore[arg-type]
    with pytest.raises(PlanError) as err:
        check_plan(get_model(model), TrainingSpec(seq_len=4096, global_batch_size=64), get_cluster("dgx-h100", 8), plan)
    for w in words:
        assert w in str(err.value)
    assert plan_from_mapping({"dp": 8, "recompute": "full", "recompute_saved": ["qkv_proj"]}).recompute_saved == ("qkv_proj",)


def test_maxtext_recipe_rows_run_the_recipe_remat_policy_and_fit() -> None:
    rows = {r["row_id"]: r for r in load_runs(COLLECTED_PATH).to_dict("records")}
    for rid in (1325, 1334):                              # Llama 3 70B BF16 128 and FP8 2048 H100
        sc = scenario_for_row(rows[rid])
        assert (sc.plan.recompute, sc.plan.recompute_saved, sc.plan.fsdp) == ("full", ("qkv_proj",), "full")
        out = validate_row(rows[rid])
        assert out["status"] == "ok" and "memory check lifted" not in out["inferred"]
        assert "remat_policy save_qkv_proj" in out["inferred"]
