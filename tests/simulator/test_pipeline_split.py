"""The pipeline split with the embedding and the loss counted as layers (Megatron-Core
``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``,
``get_num_layers_to_build``), and the framework recipe that sets it (Megatron-Bridge
llama31_405b_pretrain_config, NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/llama/llama3.py
at 0d5f5558c16fc7b3eec45698768522e74f1a87a2)."""

from __future__ import annotations

import pytest

from clustersim.simulator.calibration.validate import load_runs, scenario_for_row
from clustersim.simulator.calibration.validate_plan import recipe_layer_split
from clustersim.simulator.calibration.validate_rules import model_for_row
from clustersim.simulator.errors import ClusterSimError
from clustersim.simulator.plan.checks import check_plan
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.partition import partition, pipeline_split
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model


@pytest.mark.parametrize(("layers", "pp", "vpp"), [(126, 8, 4), (126, 16, 8), (126, 8, 8), (80, 8, 5), (30, 4, 2)])
def test_split_conserves_layers_and_counts_embedding_and_loss_as_one_layer_each(layers: int, pp: int, vpp: int) -> None:
    split = pipeline_split(layers, pp, vpp, embedding=True, loss=True)
    chunks = pp * vpp
    if (layers + 2) % chunks:
        assert split is None  # Megatron-Core asserts divisibility
        return
    assert split is not None and len(split) == chunks and sum(split) == layers
    per = (layers + 2) // chunks
    assert split[0] + 1 == split[-1] + 1 == per  # the ends carry embedding / loss in place of a layer
    assert set(split[1:-1]) <= {per}


def test_without_either_flag_it_is_the_even_split() -> None:
    assert pipeline_split(64, 4, 2, embedding=False, loss=False) == (8,) * 8
    assert pipeline_split(63, 4, 2, embedding=False, loss=False) is None
    assert pipeline_split(63, 4, 2, embedding=True, loss=False) == (7,) + (8,) * 7


def test_405b_on_pp16_vpp8_has_embedding_only_and_loss_only_chunks() -> None:
    # 126 + 2 = 128 = 16 x 8: one layer per chunk, the first and the last build none
    assert pipeline_split(126, 16, 8, embedding=True, loss=True) == (0,) + (1,) * 126 + (0,)


def test_partition_runs_an_embedding_only_chunk() -> None:
    model = get_model("llama3-8b")  # 32 layers: 32 + 2 = 34 = pp 2 x vpp 17, one per chunk
    split = pipeline_split(model.num_layers, 2, 17, embedding=True, loss=True)
    assert split is not None and split[0] == 0 and split[-1] == 0
    plan = ParallelPlan(tp=1, pp=2, dp=1, vpp=17, schedule="interleaved", micro_batch=1, layer_split=split)
    train = TrainingSpec(seq_len=2048, global_batch_size=4)
    cluster = get_cluster("dgx-h100", 2)
    check_plan(model, train, cluster, plan)
    part = partition(model, train, plan, cluster)
    layers = [i for st in part.stages for ch in st.chunks for i in ch.layers]
    assert sorted(layers) == list(range(model.num_layers))
    assert all(ch.ops for st in part.stages for ch in st.chunks)  # the empty chunks hold embedding / head


def test_an_empty_middle_chunk_is_rejected() -> None:
    model = get_model("llama3-8b")
    split = (2, 0) + (2,) * 14 + (2,)
    plan = ParallelPlan(tp=1, pp=2, dp=1, vpp=8, schedule="interleaved", micro_batch=1,
                        layer_split=split[:15] + (4,))
    with pytest.raises(ClusterSimError, match="layer_split"):
        check_plan(model, TrainingSpec(seq_len=2048, global_batch_size=4), get_cluster("dgx-h100", 2), plan)


def _row(row_id: int) -> dict:
    t = load_runs()
    return {str(k): v for k, v in t[t.row_id == row_id].to_dict("records")[0].items()}


def test_recipe_sets_the_split_for_megatron_bridge_405b_rows_only() -> None:
    notes: list[str] = []
    row = _row(375)  # LLAMA3.1_405B, GB200, tp4 pp16 vpp8 (Megatron-Bridge 26.04.01)
    model = model_for_row(row, notes)
    assert recipe_layer_split(row, model, 16, 8) == (0,) + (1,) * 126 + (0,)
    row70 = _row(370)  # LLAMA3_70B: its recipe leaves both flags False
    assert recipe_layer_split(row70, model_for_row(row70, notes), 8, 5) is None
    assert recipe_layer_split(row, model, 1, 1) is None  # no pipeline, no split


def test_plan_for_row_keeps_the_printed_vpp_with_the_recipe_split() -> None:
    plan = scenario_for_row(_row(375)).plan
    assert plan.vpp == 8 and plan.layer_split is not None and sum(plan.layer_split) == 126
