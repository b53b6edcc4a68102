"""The MoE dispatcher and EP overlap a Megatron-Bridge row gets from its recipe (issue 13, goal 1).

The rule keys on what the row prints (model, GPU, precision, degrees, micro-batch, global batch);
copies of one recipe file that disagree on a setting leave the simulator's default; and the plan it
gives prices what the recipe runs: the deepep path moves fewer scale-out bytes than the flat
all-to-all, and the overlap hides all-to-all the unpaired schedule exposes.
"""

from __future__ import annotations

from dataclasses import replace

from clustersim.simulator.calibration.recipe_moe import RECIPE_MOE_COMM, recipe_moe_comm
from clustersim.simulator.calibration.validate_plan import plan_for_row
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

DSV3 = get_model("deepseek-v3")
MB = "megatron-bridge / megatron-core (nemo 26.04)"


def _choice(gpu: str, precision: str, degrees: tuple[int, int, int, int, int], gbs: int, *,
            model: str = "deepseek-v3", framework: str = MB, printed: tuple[bool, bool] = (True, True)):  # type: ignore[no-untyped-def]
    return recipe_moe_comm(framework=framework, model=model, gpu=gpu, precision=precision, degrees=degrees,
                           printed=printed, global_batch=gbs)


def test_the_b200_ep32_recipe_runs_deepep_with_overlap() -> None:
    # DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2: deepep, pp 8, vpp 2, ep 32, moe_a2a_overlap, GBS 4096
    c = _choice("B200", "mxfp8", (1, 8, 2, 32, 1), 4096)
    assert (c.moe_dispatcher, c.ep_overlap) == ("deepep", True)
    assert any("B200_FP8_MX_V2" in n for n in c.notes)


def test_the_rule_keys_on_what_the_row_prints() -> None:
    assert _choice("B200", "mxfp8", (1, 8, 2, 32, 1), 2048).moe_dispatcher is None  # V1's batch has no EP32 recipe
    assert _choice("B200", "mxfp8", (1, 8, 2, 32, 1), 4096, framework="megatron-lm").moe_dispatcher is None
    assert _choice("B200", "bf16", (1, 8, 2, 32, 1), 4096).moe_dispatcher is None  # no BF16 EP32 recipe
    assert _choice("B200", "mxfp8", (1, 8, 2, 32, 2), 4096).moe_dispatcher is None  # printed micro-batch 2
    assert _choice("B200", "mxfp8", (1, 8, 2, 32, 2), 4096, printed=(True, False)).moe_dispatcher == "deepep"
    # a recipe without a flex backend runs Megatron-Core's alltoall dispatcher; Qwen3 235B on H100 overlaps it
    h100 = _choice("H100", "fp8", (2, 8, 4, 32, 1), 8192, model="qwen3-235b-a22b")
    assert (h100.moe_dispatcher, h100.ep_overlap) == ("alltoall", True)


def test_copies_that_disagree_keep_the_default() -> None:
    # GB200 MXFP8 pp 4 vpp 4 ep 64: both copies hybridep; the later one adds moe_a2a_overlap
    c = _choice("GB200", "mxfp8", (1, 4, 4, 64, 1), 4096)
    assert c.moe_dispatcher == "deepep" and c.ep_overlap is None
    assert any("disagree" in n for n in c.notes)


def test_every_entry_names_its_stored_copy() -> None:
    keys = set()
    for e in RECIPE_MOE_COMM:
        assert "scripts/performance/configs/" in e.locator and "stored copy" in e.locator
        assert e.degrees[3] > 1 and e.global_batch > 0
        keys.add((e.models, e.gpu, e.precisions, e.degrees, e.global_batch, e.locator))
    assert len(keys) == len(RECIPE_MOE_COMM)  # no entry twice


def _row(**cells: object) -> dict[str, object]:
    base: dict[str, object] = {"framework": "Megatron-Bridge / Megatron-Core (NeMo 26.04)", "model": "DeepSeekV3",
                               "gpu_type": "B200", "precision": "MXFP8", "num_gpus": 256, "tp": 1, "pp": 8, "vpp": 2,
                               "ep": 32, "micro_batch": 1, "recompute": "", "seq_len": 4096, "global_batch_seqs": 4096}
    return {**base, **cells}


def test_a_row_gets_the_recipe_dispatcher_and_overlap() -> None:
    cluster = get_cluster("dgx-b200", 256)
    training = TrainingSpec(seq_len=4096, global_batch_size=4096, precision="fp8")
    notes: list[str] = []
    plan = plan_for_row(_row(), DSV3, training, cluster, notes)
    assert (plan.moe_dispatcher, plan.ep_overlap, plan.schedule) == ("deepep", True, "interleaved")
    assert any("moe_a2a_overlap = True" in n for n in notes)
    dense = plan_for_row(_row(model="Llama3_70B", ep=1), get_model("llama3-70b"), training, cluster, [])
    assert (dense.moe_dispatcher, dense.ep_overlap) == ("alltoall", False)


def test_the_recipe_settings_make_the_ep32_step_faster() -> None:
    # what the settings do: deepep sends each token once per node over the scale-out network
    # (group-limited to 4 nodes) instead of once per expert; the overlap hides what is left
    cluster = get_cluster("dgx-b200", 256)
    training = TrainingSpec(seq_len=4096, global_batch_size=4096, precision="fp8")
    base = ParallelPlan(pp=8, vpp=2, dp=32, ep=32, zero=1, schedule="interleaved", recompute="selective",
                        recompute_modules=("mla_up_proj", "mlp"))
    flat = simulate(DSV3, training, cluster, base)
    deepep = simulate(DSV3, training, cluster, replace(base, moe_dispatcher="deepep"))
    both = simulate(DSV3, training, cluster, replace(base, moe_dispatcher="deepep", ep_overlap=True))
    assert both.step_time < deepep.step_time < flat.step_time


def test_the_rule_reads_no_row_or_source_id() -> None:
    cluster = get_cluster("dgx-b200", 256)
    training = TrainingSpec(seq_len=4096, global_batch_size=4096, precision="fp8")
    a = plan_for_row(_row(row_id=381, source_id="megatron-bridge-26.04.01"), DSV3, training, cluster, [])
    b = plan_for_row(_row(row_id=1, source_id="other"), DSV3, training, cluster, [])
    assert a == b and a.moe_dispatcher == "deepep"


def test_nemotron_3_super_rows_get_their_recipe_dispatcher_from_the_copy_with_their_degrees() -> None:
    # the earlier copy: GB200 at TP 2, B300 at EP 8, all hybridep; the later one: B300 at EP 64 on deepep
    gb200 = _choice("GB200", "mxfp8", (2, 1, 1, 64, 1), 512, model="nemotron-3-super")
    b300_ep8 = _choice("B300", "nvfp4", (1, 1, 1, 8, 1), 512, model="nemotron-3-super")
    b300_ep64 = _choice("B300", "mxfp8", (1, 1, 1, 64, 1), 512, model="nemotron-3-super")
    for c, copy in ((gb200, "f601ba97"), (b300_ep8, "f601ba97"), (b300_ep64, "06e8da4e")):
        assert (c.moe_dispatcher, c.ep_overlap) == ("deepep", False)
        assert all(copy in n for n in c.notes)
    assert _choice("B200", "nvfp4", (2, 1, 1, 64, 1), 512, model="nemotron-3-super").moe_dispatcher == "deepep"  # base config
    gb300 = _choice("GB300", "mxfp8", (1, 1, 1, 64, 1), 512, model="nemotron-3-super")  # both copies: hybridep
    assert gb300.moe_dispatcher == "deepep" and any("f601ba97" in n and "06e8da4e" in n for n in gb300.notes)


def test_a_variant_no_copy_stores_takes_the_dispatcher_of_the_recipes_base_config() -> None:
    # Super on B200 at TP 2 is in neither copy; every variant of the earlier copy derives from a base
    # config that sets hybridep; a model without such a base keeps the default
    c = _choice("B200", "nvfp4", (2, 1, 1, 64, 1), 512, model="nemotron-3-super")
    assert (c.moe_dispatcher, c.ep_overlap) == ("deepep", False)
    assert any("BASE_NEMOTRON_3_SUPER_CONFIG" in n for n in c.notes)
    assert _choice("B200", "bf16", (1, 8, 2, 32, 1), 4096).moe_dispatcher is None  # DeepSeek-V3: no base entry
