"""Megatron-Core's pipeline layout string (``plan.pipeline_layout``; Megatron-Core
``PipelineParallelLayerLayout.parse_str_to_list``) and the Megatron-Bridge recipes that set it for
DeepSeek-V3 and Kimi K2 (``recipe_layout``; sources in each entry's locator)."""

from __future__ import annotations

import pytest

from clustersim.simulator.calibration.recipe_layout import RECIPE_PIPELINE_LAYOUT, recipe_layout, with_mtp
from clustersim.simulator.calibration.validate import load_runs, scenario_for_row
from clustersim.simulator.errors import ClusterSimError, PlanError
from clustersim.simulator.plan import ParallelPlan, check_plan, layout_split, parse_layout
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


def test_the_recipe_strings_unroll_to_their_list_form() -> None:
    # DeepSeek-V3 pp2 x vpp8 (Megatron-Bridge GB300 performance config): E + 4, 14 x 4, 1 + MTP + loss
    chunks = parse_layout("Et*4|(t*4|)*14tmL")
    assert chunks == ("Etttt",) + ("tttt",) * 14 + ("tmL",)
    assert layout_split("Et*4|(t*4|)*14tmL") == (4,) * 15 + (1,)
    # H100 pp8 x vpp4: an MTP-and-loss chunk with no transformer layer
    assert layout_split("Et|(tt|)*30mL") == (1,) + (2,) * 30 + (0,)


def test_commas_are_cosmetic_and_groups_nest() -> None:
    assert parse_layout("Ett,|t,tL") == parse_layout("Ett|ttL")
    assert parse_layout("E((t|)*2)*2L") == parse_layout("Et|t|t|t|L")
    # Megatron-Core's own docstring example: 29 two-layer chunks, then MTP and loss chunks of their own
    assert parse_layout("Ettt|(tt|)*29,m|L") == ("Ettt",) + ("tt",) * 29 + ("m", "L")


@pytest.mark.parametrize(("text", "needle"), [
    ("", "non-empty"),
    ("t*4|EL", "embedding E exactly once"),
    ("Et|EtL", "embedding E exactly once"),
    ("Et|tL|", "loss L exactly once"),
    ("Et*4|x", "unknown character"),
    ("Ettt|(tt|)*29,m|L", "MTP module m outside the last chunk"),
])
def test_a_bad_layout_names_the_field_the_value_and_the_fix(text: str, needle: str) -> None:
    with pytest.raises(PlanError, match=needle) as err:
        layout_split(text)
    assert "plan.pipeline_layout" in str(err.value) and repr(text) in str(err.value) and "'|'" in str(err.value)


def test_the_plan_takes_its_split_from_the_layout_and_rejects_a_contradiction() -> None:
    plan = ParallelPlan(pp=2, vpp=2, dp=1, schedule="interleaved", pipeline_layout="Et*10|t*6|t*8|t*8L")
    assert plan.layer_split == (10, 6, 8, 8)
    assert ParallelPlan(pp=2, pipeline_layout="Et*16|t*16L", layer_split=(16, 16)).layer_split == (16, 16)
    with pytest.raises(PlanError, match="disagree"):
        ParallelPlan(pp=2, pipeline_layout="Et*16|t*16L", layer_split=(15, 17))


@pytest.mark.parametrize(("layout", "needle"), [
    ("Et*16|t*16|L", "3 chunks; pp x vpp = 2"),
    ("Et*16|t*15L", "num_layers = 32"),
    ("Et*16|t*16mL", "mtp_layers = 0"),
])
def test_check_plan_matches_the_layout_to_the_model_and_the_degrees(layout: str, needle: str) -> None:
    model, train = get_model("llama3-8b"), TrainingSpec(seq_len=2048, global_batch_size=4)
    plan = ParallelPlan(pp=2, dp=1, micro_batch=1, pipeline_layout=layout)
    with pytest.raises(ClusterSimError, match=needle):
        check_plan(model, train, get_cluster("dgx-h100", 2), plan)


def test_moving_layers_between_stages_conserves_compute_and_shifts_it_by_whole_layers() -> None:
    model, train = get_model("llama3.2-1b"), TrainingSpec(seq_len=2048, global_batch_size=8)
    cluster = get_cluster("dgx-h100", 2)

    def run(layout: str | None) -> object:
        return simulate(model, train, cluster, ParallelPlan(pp=2, dp=1, micro_batch=1, pipeline_layout=layout))
    even, same, moved = run("Et*8|t*8L"), run(None), run("Et*10|t*6L")
    assert even.step_time == same.step_time  # the even layout is the default split
    c_even = [sum(b.values()) for b in even.stage_compute_breakdowns]
    c_moved = [sum(b.values()) for b in moved.stage_compute_breakdowns]
    assert sum(c_moved) == pytest.approx(sum(c_even), rel=1e-9)  # the same layers, elsewhere
    layer = (c_moved[0] - c_even[0]) / 2
    assert layer > 0 and c_even[1] - c_moved[1] == pytest.approx(2 * layer, rel=1e-9)
    # the pipeline runs at its slowest stage: with a 128k-vocabulary head on the last stage of a 1B
    # model, two layers fewer there shorten the step, as the layouts of the recipes intend
    assert max(c_moved) < max(c_even) and moved.step_time < even.step_time


def test_with_mtp_gives_the_last_chunk_the_models_mtp_modules() -> None:
    assert with_mtp("Et*4|(t*4|)*14tL", 1).split("|")[-1] == "tmL"
    assert with_mtp("Et*4|(t*4|)*14tmL", 0).split("|")[-1] == "tL"
    assert with_mtp("Et|(tt|)*30mL", 2).split("|")[-1] == "mmL"


def test_every_recipe_layout_fits_its_degrees_and_model() -> None:
    for entry in RECIPE_PIPELINE_LAYOUT:
        pp, vpp = entry.degrees
        for name in entry.models:
            model = get_model(name)
            split = layout_split(with_mtp(entry.layout, model.mtp_layers), chunks=pp * vpp,
                                 mtp_layers=model.mtp_layers, num_layers=model.num_layers)
            assert max(split) - min(split[1:-1] or split) <= 8 and "Megatron-Bridge" in entry.locator


def _row(row_id: int) -> dict:
    t = load_runs()
    return {str(k): v for k, v in t[t.row_id == row_id].to_dict("records")[0].items()}


@pytest.mark.parametrize(("row_id", "split"), [
    (319, (4,) * 15 + (1,)),  # DeepSeekV3 GB300 pp2 vpp8: the GB300 config's pp_layout
    (320, (4,) * 15 + (1,)),  # DeepSeekV3 GB200 pp4 vpp4: the recipe map
    (343, (8,) * 7 + (5,)),  # DeepSeekV3 B300 pp8
    (353, (4,) * 15 + (1,)),  # Kimi K2 GB300 pp4 vpp4: Kimi's own map
    (566, (1,) + (2,) * 30 + (0,)),  # DeepSeekV3 H100 tp2 pp8 vpp4: the H100 config's pp_layout
])
def test_megatron_bridge_rows_run_their_recipes_layout(row_id: int, split: tuple[int, ...]) -> None:
    sc = scenario_for_row(_row(row_id))
    assert sc.plan.layer_split == split
    assert any("pipeline layout" in note and "Megatron-Bridge" in note for note in sc.inferred)


def test_a_pair_no_recipe_lists_keeps_the_even_split() -> None:
    sc = scenario_for_row(_row(536))  # DeepSeekV3 (w/o MTP) GB200 pp8 vpp4: only the H100 config lists it
    assert sc.plan.layer_split is None
    assert recipe_layout(framework="Megatron-Bridge", model="deepseek-v3", gpu="GB200", pp=8, vpp=4,
                         mtp_layers=0) is None
    assert recipe_layout(framework="torchtitan", model="deepseek-v3", gpu="GB200", pp=4, vpp=4,
                         mtp_layers=0) is None  # another framework's run is not Megatron-Bridge's recipe


def test_the_mtp_row_builds_its_module_on_the_one_layer_chunk() -> None:
    sc = scenario_for_row(_row(542))  # DeepSeekV3 (w/ MTP) B200 pp16: E + 4, 14 x 4, 1 + MTP + loss
    assert sc.model.mtp_layers == 1 and sc.plan.layer_split == (4,) * 15 + (1,)
    assert any("1 MTP module" in note for note in sc.inferred)
