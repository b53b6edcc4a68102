"""The fused grouped MLP of the later Megatron-Bridge recipes (issue 13, expert compute).

The rule gives ``plan.moe_fused_grouped_mlp`` to the rows whose release and recipe run the CuTeDSL
fused grouped MLP, keyed on what the row prints (framework release, model, GPU, precision), never
on its ids; the flag runs the routed-expert GEMMs on the dense curve (``expert_efficiency`` 1), with
the SwiGLU and two of the four FP8 quantizations in the GEMM epilogues (``blocks.expert_quantize_elements``),
and touches nothing else; the cross-validation prior is the cited unfused rate.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.simulator.calibration.recipe_moe import (
    RECIPE_FUSED_GROUPED_MLP, framework_release, recipe_fused_grouped_mlp,
)
from clustersim.simulator.calibration.validate_plan import plan_for_row
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import GROUPED_GEMM_EFFICIENCY_PRIOR, default_profile
from clustersim.simulator.step.compute import expert_path, op_time
from clustersim.simulator.step.partition import chunk_ops
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


def _fw(release: str) -> str:
    return f"Megatron-Bridge / Megatron-Core (NeMo {release})"


@pytest.mark.parametrize(("framework", "release"), [
    (_fw("26.06.01"), (26, 6)), (_fw("25.09"), (25, 9)), ("megatron-bridge / megatron-core (nemo 26.08)", (26, 8)),
    ("Megatron-LM", None)])
def test_the_release_is_read_from_the_framework_cell(framework: str, release: tuple[int, int] | None) -> None:
    assert framework_release(framework) == release


def test_the_rule_keys_on_release_model_gpu_and_precision() -> None:
    def fused(release: str, model: str = "qwen3-235b-a22b", gpu: str = "GB300", precision: str = "mxfp8",
              framework: str | None = None) -> bool:
        return recipe_fused_grouped_mlp(framework=framework or _fw(release), model=model, gpu=gpu, precision=precision)[0]
    assert fused("26.06") and fused("26.06.01") and fused("26.08") and fused("26.06", model="qwen3-30b-a3b", gpu="GB200")
    assert not fused("26.04.01")  # the release before the recipe change
    assert not fused("26.06", precision="bf16")  # the change is for the MXFP8 recipes only
    assert not fused("26.06", gpu="B300")  # Qwen3 B200/B300: no release-dated change stored
    assert fused("26.06", model="deepseek-v3", gpu="GB300") and fused("26.06.01", model="deepseek-v3", gpu="GB200")
    assert not fused("26.04.01", model="deepseek-v3", gpu="GB200")  # pull request 4226 came with 26.06
    assert not fused("26.06", model="deepseek-v3", gpu="GB200", precision="nvfp4")  # pull request 4666: open
    assert not fused("26.06", model="deepseek-v3", gpu="B300")
    assert not fused("26.06", model="gpt-oss-120b")
    assert not fused("26.06", framework="Megatron-LM (NeMo 26.06)")
    ok, notes = recipe_fused_grouped_mlp(framework=_fw("26.06"), model="qwen3-235b-a22b", gpu="GB300", precision="mxfp8")
    assert ok and "pull request 4249" in notes[0]


def test_every_entry_names_its_pull_request() -> None:
    for e in RECIPE_FUSED_GROUPED_MLP:
        assert "NVIDIA-NeMo/Megatron-Bridge pull request" in e.locator
        assert e.models and e.gpus and e.precisions and e.first_release >= (25, 1)


def _row(**cells: object) -> dict[str, object]:
    base: dict[str, object] = {"framework": _fw("26.06"), "model": "Qwen3_235B_a22B", "gpu_type": "GB300",
                               "precision": "MXFP8", "num_gpus": 256, "tp": 1, "pp": 4, "vpp": 12, "ep": 32,
                               "micro_batch": 2, "recompute": "", "seq_len": 4096, "global_batch_seqs": 8192}
    return {**base, **cells}


def test_a_row_gets_the_flag_from_its_release_not_its_ids() -> None:
    model = get_model("qwen3-235b-a22b")
    cluster = get_cluster("gb300-nvl72", 256)
    training = TrainingSpec(seq_len=4096, global_batch_size=8192, precision="fp8")
    notes: list[str] = []
    new = plan_for_row(_row(row_id=351, source_id="megatron-bridge-26.06"), model, training, cluster, notes)
    assert new.moe_fused_grouped_mlp and any("fused grouped MLP" in n for n in notes)
    same = plan_for_row(_row(row_id=1, source_id="other"), model, training, cluster, [])
    assert same == new
    old = plan_for_row(_row(framework=_fw("26.04")), model, training, cluster, [])
    assert not old.moe_fused_grouped_mlp and replace(old, moe_fused_grouped_mlp=True, ep_overlap=True) == new


def test_expert_path_lifts_only_the_expert_efficiency() -> None:
    prof = default_profile("B200").replace(expert_efficiency=0.5)
    assert expert_path(prof, False) == prof
    lifted = expert_path(prof, True)
    assert lifted.expert_efficiency == 1.0 and lifted.replace(expert_efficiency=0.5) == prof


def test_expert_path_lifts_the_efficiency_where_a_rank_holds_one_expert() -> None:
    prof = default_profile("H100").replace(expert_efficiency=0.5)
    assert expert_path(prof, False, 1).expert_efficiency == 1.0
    assert expert_path(prof, False, 2) == prof and expert_path(prof, False, 0) == prof  # 0: a dense model


@pytest.mark.parametrize("efficiency", [0.3, 0.62])
def test_one_expert_per_rank_runs_at_the_dense_curve_several_do_not(efficiency: float) -> None:
    # GroupedLinear over one split is one GEMM: with ep = num_experts the step does not depend on
    # expert_efficiency and equals the step at efficiency 1; with two experts per rank a lower
    # efficiency is strictly slower (four of Mixtral's layers, to fit on one node)
    model = replace(get_model("mixtral-8x7b"), num_layers=4)
    cluster = get_cluster("dgx-h100", 8)
    training = TrainingSpec(seq_len=4096, global_batch_size=64, precision="bf16")
    base = default_profile(cluster.accelerator.name)
    one = ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1)
    two = ParallelPlan(dp=8, ep=4, micro_batch=1, zero=1)
    def step(plan: ParallelPlan, eff: float) -> float:
        return simulate(model, training, cluster, plan, profile=base.replace(expert_efficiency=eff),
                        fidelity="analytic").step_time
    assert step(one, efficiency) == step(one, 1.0)
    assert step(two, efficiency) > step(two, 1.0)


def test_the_fused_path_is_the_unfused_one_at_expert_efficiency_one_less_the_activation_reads() -> None:
    # the flag is "routed-expert GEMMs at the dense curve" with the SwiGLU in the GEMM epilogues: the
    # unfused plan's step under a profile whose expert_efficiency is 1, less the activation's HBM
    # reads; faster than under the cited prior, and a dense model does not notice it
    model = get_model("qwen3-30b-a3b")
    cluster = get_cluster("dgx-b200", 8)
    training = TrainingSpec(seq_len=4096, global_batch_size=64, precision="bf16")
    plan = ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1)
    # no per-kernel floor: the closed form below counts the activation's HBM reads only
    prior = default_profile(cluster.accelerator.name).replace(expert_efficiency=GROUPED_GEMM_EFFICIENCY_PRIOR,
                                                              kernel_overhead=0.0)
    fused = simulate(model, training, cluster, replace(plan, moe_fused_grouped_mlp=True), profile=prior, fidelity="analytic")
    one = simulate(model, training, cluster, plan, profile=prior.replace(expert_efficiency=1.0), fidelity="analytic")
    unfused = simulate(model, training, cluster, plan, profile=prior, fidelity="analytic")
    # ... less the SwiGLU's HBM reads, which the fused kernels take from the GEMM accumulators
    # (tests/simulator/test_fp8_cast.py; BF16, so no quantize kernels either way)
    acts = [{o.name: o for o in chunk_ops(model, training, p, -1, range(1, 2))}["expert_act"]
            for p in (plan, replace(plan, moe_fused_grouped_mlp=True))]
    saved = sum(op_time(a, cluster.accelerator, prior, "bf16", w) * s
                for w in ("fwd", "bwd") for a, s in zip(acts, (1, -1)))
    layers_x_micro_batches = model.num_layers * training.global_batch_size // (plan.dp * plan.micro_batch)
    assert one.breakdown["compute"] - fused.breakdown["compute"] == pytest.approx(layers_x_micro_batches * saved, rel=1e-6)
    assert fused.step_time < one.step_time < unfused.step_time
    dense = get_model("llama3-8b")
    dplan = ParallelPlan(dp=8, zero=1)
    assert simulate(dense, training, cluster, replace(dplan, moe_fused_grouped_mlp=True), profile=prior,
                    fidelity="analytic").step_time == pytest.approx(
        simulate(dense, training, cluster, dplan, profile=prior, fidelity="analytic").step_time, rel=1e-12)


def test_the_release_change_that_fuses_also_overlaps_the_all_to_all() -> None:
    from clustersim.simulator.calibration.recipe_moe import recipe_release_a2a_overlap

    def overlap(release: str, model: str = "qwen3-235b-a22b", gpu: str = "GB300", precision: str = "mxfp8") -> bool:
        return recipe_release_a2a_overlap(framework=_fw(release), model=model, gpu=gpu, precision=precision)[0]
    assert overlap("26.06") and overlap("26.08") and overlap("26.06", model="qwen3-30b-a3b", gpu="GB200")
    assert overlap("26.06", model="deepseek-v3", gpu="GB300")
    assert not overlap("26.04.01") and not overlap("26.06", precision="bf16") and not overlap("26.06", gpu="B300")
    assert overlap("26.08", model="deepseek-v3", gpu="GB200") and not overlap("26.04.01", model="deepseek-v3", gpu="GB200")
    assert not overlap("26.06", model="gpt-oss-120b")
    for e in RECIPE_FUSED_GROUPED_MLP:  # every overlap claim names its pull request
        assert not e.a2a_overlap or "pull request" in e.a2a_overlap
    # the plan: the 26.06 row overlaps (its stored recipe copy, older, says no), the 26.04 row does not
    model, cluster = get_model("qwen3-235b-a22b"), get_cluster("gb300-nvl72", 256)
    training = TrainingSpec(seq_len=4096, global_batch_size=8192, precision="fp8")
    notes: list[str] = []
    new = plan_for_row(_row(), model, training, cluster, notes)
    old = plan_for_row(_row(framework=_fw("26.04")), model, training, cluster, [])
    assert new.ep_overlap and not old.ep_overlap
    assert any("moe_a2a_overlap = True" in n and "4606" in n for n in notes)
    assert replace(old, moe_fused_grouped_mlp=True, ep_overlap=True) == new


def test_deepseek_v3_on_gb200_fuses_and_overlaps_from_the_26_06_recipe() -> None:
    """Pull request 4226 (26.06, release branch r0.5.0): the GB200 MXFP8 recipe of DeepSeek-V3 runs the
    fused grouped MLP and the all-to-all overlap; the row's printed plan is otherwise unchanged, and the
    step is shorter by the fused experts and the hidden dispatch."""
    model, cluster = get_model("deepseek-v3"), get_cluster("gb200-nvl72", 256)
    training = TrainingSpec(seq_len=4096, global_batch_size=2048, precision="fp8")
    cells = {"model": "DeepSeekV3", "gpu_type": "GB200", "pp": 4, "vpp": 4, "ep": 64, "micro_batch": 1,
             "global_batch_seqs": 2048}
    notes: list[str] = []
    new = plan_for_row(_row(**cells), model, training, cluster, notes)
    old = plan_for_row(_row(**cells, framework=_fw("26.04.01")), model, training, cluster, [])
    assert new.moe_fused_grouped_mlp and new.ep_overlap and not old.moe_fused_grouped_mlp
    assert any("4226" in n for n in notes)
    assert replace(old, moe_fused_grouped_mlp=True, ep_overlap=True) == new
    prior = default_profile("gb200")
    t_old, t_new = (simulate(model, training, cluster, p, profile=prior, fidelity="analytic").step_time
                    for p in (old, new))
    assert t_new < t_old
