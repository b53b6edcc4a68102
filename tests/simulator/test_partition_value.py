"""Phase 1 hands lowering a value (issue 16): the Partition's chunks are what lowering costs."""

from __future__ import annotations

from clustersim.simulator.profile import default_profile
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import lower
from clustersim.simulator.step.partition import partition, stage_chunks, stage_memory
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

MODEL, TRAIN = get_model("llama3-8b"), TrainingSpec(seq_len=4096, global_batch_size=32)


def _costing(plan: ParallelPlan) -> Costing:
    cluster = get_cluster("dgx-h100", plan.world_size)
    prof = default_profile(cluster.accelerator.name)
    return Costing(MODEL, TRAIN, plan, cluster.accelerator, prof,
                   CommPricer(cluster, Placement(plan, cluster.gpus_per_node), prof, "analytic"))


def test_partition_holds_every_layer_once_with_its_ops_and_memory() -> None:
    plan = ParallelPlan(tp=2, pp=4, dp=1, vpp=2, schedule="interleaved", micro_batch=1)
    part = partition(MODEL, TRAIN, plan, get_cluster("dgx-h100", 8))
    layers = [i for st in part.stages for ch in st.chunks for i in ch.layers]
    assert sorted(layers) == list(range(MODEL.num_layers))  # conservation: each layer on one stage
    assert [[(ch.chunk, ch.layers) for ch in st.chunks] for st in part.stages] == stage_chunks(plan, MODEL.num_layers)
    assert all(ch.ops for st in part.stages for ch in st.chunks)
    assert part.memory == tuple(stage_memory(MODEL, TRAIN, plan, s) for s in range(plan.pp))


def test_lowering_costs_the_ops_it_is_handed() -> None:
    plan = ParallelPlan(tp=2, pp=2, dp=2, micro_batch=1)
    c = _costing(plan)
    part = partition(MODEL, TRAIN, plan, get_cluster("dgx-h100", 8))
    assert lower(c, part) == lower(c)  # the handed partition is the one lowering would build
    # drop the last chunk's ops: lowering must cost exactly what it was handed, not rebuild it
    last = part.stages[-1]
    emptied = type(part)(stages=part.stages[:-1] + (type(last)(
        stage=last.stage, chunks=tuple(type(ch)(chunk=ch.chunk, layers=ch.layers, ops=()) for ch in last.chunks),
        memory=last.memory),))
    assert lower(c, emptied).stages[-1].chunks[0].fwd < lower(c, part).stages[-1].chunks[0].fwd
