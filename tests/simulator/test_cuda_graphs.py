"""CUDA graphs (``step.graphs``, ``plan.cuda_graph_scope``): a captured part of a layer costs the host
one launch per pass; the scopes Megatron-Core has, checked as it checks them; where the host binds the
step gets shorter, never longer, and nothing changes where it does not; the arguments are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.simulator.calibration.jobargs import read_job
from clustersim.simulator.errors import PlanError
from clustersim.simulator.plan import ParallelPlan, check_plan
from clustersim.simulator.plan.plan import CUDA_GRAPH_SCOPES
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step.graphs import PREPROCESS_KERNELS, blocks, layer_launches
from clustersim.simulator.step.host import MOE_PATH_LAUNCHES, kernel_launches
from clustersim.simulator.step.partition import chunk_ops
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

QWEN = get_model("qwen3-30b-a3b")
LLAMA = get_model("llama3-8b")
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=64, precision="bf16")
EP8 = ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1)
LOCAL = 128 // 8


def _layer(model=QWEN, plan=EP8):  # type: ignore[no-untyped-def]
    return list(chunk_ops(model, TRAINING, plan, -1, range(1, 2)))


def _n(ops, which, scopes):  # type: ignore[no-untyped-def]
    return sum(layer_launches(ops, which, scopes, LOCAL, False, 8))


def test_without_scopes_the_counts_are_the_kernels() -> None:
    ops = _layer()
    assert layer_launches(ops, "fwd", (), LOCAL, False, 8) == [kernel_launches(o, "fwd", LOCAL, False, 8) for o in ops]


def test_a_layer_has_an_attention_and_a_moe_block() -> None:
    ops = _layer()
    parts = blocks(ops)
    assert len(parts) == 2 and parts[0].start == 0 and parts[1].stop == len(ops)
    assert any(ops[i].role == "attention_core" for i in parts[0]) and any(ops[i].role == "router" for i in parts[1])


def test_captured_attention_is_one_launch_per_pass() -> None:
    ops = _layer()
    attn = blocks(ops)[0]
    for which in ("fwd", "bwd_input"):
        inside = sum(kernel_launches(ops[i], which, LOCAL, False, 8) for i in attn)
        assert _n(ops, which, ("attn",)) == _n(ops, which, ()) - inside + 1
    # the weight gradients run inside the backward graph
    wgrad = sum(kernel_launches(ops[i], "bwd_weight", LOCAL, False, 8) for i in attn)
    assert _n(ops, "bwd_weight", ("attn",)) == _n(ops, "bwd_weight", ()) - wgrad


def test_router_and_preprocess() -> None:
    ops = _layer()
    moe = blocks(ops)[1]
    router = next(i for i in moe if ops[i].role == "router")
    captured = [i for i in moe if i <= router or ops[i].role == "shared_expert"]
    inside = sum(kernel_launches(ops[i], "fwd", LOCAL, False, 8) for i in captured)
    with_router = _n(ops, "fwd", ("moe_router",))
    assert with_router == _n(ops, "fwd", ()) - inside + 1
    # the dispatcher's count kernels join the router's graph; its copies to the host stay
    assert with_router - _n(ops, "fwd", ("moe_router", "moe_preprocess")) == PREPROCESS_KERNELS["permute"]
    assert MOE_PATH_LAUNCHES["permute"].fwd - PREPROCESS_KERNELS["permute"] == 5  # 4 copies + the fused permute


def test_full_iteration_launches_nothing_per_layer() -> None:
    ops = _layer(LLAMA, ParallelPlan(dp=8, micro_batch=1))
    assert _n(ops, "fwd", ("full_iteration",)) == 0 and _n(ops, "bwd_input", ("full_iteration",)) == 0


@pytest.mark.parametrize(("model", "scopes", "match"), [
    (QWEN, ("moe",), "dropless MoE layers, whose dispatcher reads token counts on the host"),
    (QWEN, ("layer",), "dropless"), (QWEN, ("full_iteration",), "dropless"),
    (LLAMA, ("full_iteration", "attn"), "full_iteration captures the whole step; list it alone"),
    (QWEN, ("attn", "moe_preprocess"), "moe_preprocess must be used together with moe_router"),
    (LLAMA, ("attn", "attn"), "names a scope twice"), (LLAMA, ("router",), "unknown \\['router'\\]"),
])
def test_checks_name_the_rule(model, scopes, match) -> None:  # type: ignore[no-untyped-def]
    plan = ParallelPlan(dp=8, ep=8 if model.is_moe else 1, micro_batch=1, cuda_graph_scope=scopes)
    with pytest.raises(PlanError, match=match):
        check_plan(model, TRAINING, get_cluster("dgx-h100", 8), plan)


def test_graphs_shorten_a_host_bound_step_and_change_nothing_without_host_cost() -> None:
    cluster = get_cluster("dgx-b200", 8)
    host_bound = default_profile("b200").replace(host_launch_time=20e-6)
    scopes = ("attn", "moe_router", "moe_preprocess")
    plain, graphed = (ParallelPlan(dp=8, ep=8, micro_batch=1, zero=1, cuda_graph_scope=s) for s in ((), scopes))
    slow = simulate(QWEN, TRAINING, cluster, plain, profile=host_bound).step_time
    fast = simulate(QWEN, TRAINING, cluster, graphed, profile=host_bound).step_time
    assert fast < slow
    free = default_profile("b200").replace(host_launch_time=0.0)
    assert simulate(QWEN, TRAINING, cluster, graphed, profile=free).step_time == \
        simulate(QWEN, TRAINING, cluster, plain, profile=free).step_time
    # never below the GPU's own time: the graphed step is at least the step without any host cost
    assert fast >= simulate(QWEN, TRAINING, cluster, plain, profile=free).step_time - 1e-12


def test_scope_names_are_megatron_cores() -> None:
    assert set(CUDA_GRAPH_SCOPES) == {"attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "layer",
                                      "full_iteration"}
    assert ParallelPlan(cuda_graph_scope=("attn", "moe_router")).describe().endswith("cg:attn+moe_router")


def test_megatron_arguments_are_read(tmp_path: Path) -> None:
    script = (Path(__file__).parent / "runlogs" / "megatron_llama3_8b.sh").read_text()
    p = tmp_path / "a.sh"
    p.write_text(script.replace("--bf16", "--bf16 --cuda-graph-impl transformer_engine --cuda-graph-scope attn mlp"))
    assert read_job(p).plan["cuda_graph_scope"] == ("attn", "mlp")
    p.write_text(script.replace("--bf16", "--bf16 --cuda-graph-impl transformer_engine"))
    assert read_job(p).plan["cuda_graph_scope"] == ("layer",)  # no scope: the whole layer
    p.write_text(script.replace("--bf16", "--bf16 --cuda-graph-impl local --cuda-graph-scope full_iteration"))
    assert read_job(p).plan["cuda_graph_scope"] == ("full_iteration",)
    p.write_text(script.replace("--bf16", "--bf16 --enable-cuda-graph"))
    assert read_job(p).plan["cuda_graph_scope"] == ("layer",)
    p.write_text(script.replace("--bf16", "--bf16 --cuda-graph-scope attn"))  # no implementation: no graphs
    job = read_job(p)
    assert "cuda_graph_scope" not in job.plan and any("cuda-graph-scope" in n for n in job.notes)
