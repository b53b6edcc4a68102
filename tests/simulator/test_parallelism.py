"""Every plan axis against a closed form or an invariant: ZeRO/FSDP memory, EP and CP traffic,
recompute, FP8, validation of each axis."""

from __future__ import annotations

import dataclasses

import pytest

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.collectives import price_collective
from clustersim.simulator.network.pricing import CommPricer
from clustersim.simulator.errors import PlanError
from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.lower import lower
from clustersim.simulator.step.partition import stage_memory
from clustersim.simulator.plan.placement import Placement
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

TRAIN = TrainingSpec(seq_len=4096, global_batch_size=64)
PROFILE = CalibrationProfile()


@dataclasses.dataclass
class RecordingPricer(CommPricer):
    """A CommPricer that remembers every (kind, size, axis) it was asked for."""

    calls: list[tuple[str, float, str]] = dataclasses.field(default_factory=list)

    def time(self, kind: str, size: float, axis: str) -> float:
        self.calls.append((kind, size, axis))
        return super().time(kind, size, axis)


def lowered_calls(model_name: str, gpus: int, plan: ParallelPlan, training: TrainingSpec = TRAIN) -> list[tuple[str, float, str]]:
    model, cluster = get_model(model_name), get_cluster("dgx-h100", gpus)
    pricer = RecordingPricer(cluster, Placement(plan, cluster.gpus_per_node), PROFILE)
    lower(Costing(model, training, plan, cluster.accelerator, PROFILE, pricer))
    return pricer.calls


@pytest.mark.parametrize("dp", [2, 4, 8])
def test_zero_stages_shard_state_by_dp(dp: int) -> None:
    model = get_model("llama3-8b")
    base = ParallelPlan(tp=1, pp=1, dp=dp)
    m0 = stage_memory(model, TRAIN, base, 0)
    m1 = stage_memory(model, TRAIN, dataclasses.replace(base, zero=1), 0)
    m2 = stage_memory(model, TRAIN, dataclasses.replace(base, zero=2), 0)
    m3 = stage_memory(model, TRAIN, dataclasses.replace(base, zero=3), 0)
    assert m1.optimizer == pytest.approx(m0.optimizer / dp)
    assert m1.grads == pytest.approx(m0.grads) and m2.grads == pytest.approx(m0.grads / dp)
    # ZeRO-3 keeps 1/dp of the weights plus two gathered layers in flight
    layer = model.layer_params(0) * TRAIN.param_bytes
    assert m3.weights - 2 * layer == pytest.approx(m0.weights / dp, rel=0.02)
    assert m3.activations == m0.activations


def test_fsdp_full_equals_zero3_memory_and_hybrid_shards_less() -> None:
    model = get_model("llama3-8b")
    z3 = stage_memory(model, TRAIN, ParallelPlan(dp=8, zero=3), 0)
    fsdp = stage_memory(model, TRAIN, ParallelPlan(dp=8, fsdp="full"), 0)
    hsdp = stage_memory(model, TRAIN, ParallelPlan(dp=8, fsdp="hybrid", dp_shard=4), 0)
    assert fsdp.total == pytest.approx(z3.total)
    assert hsdp.optimizer == pytest.approx(fsdp.optimizer * 2)


def test_hsdp_gathers_within_shard_groups_and_reduces_across_replicas() -> None:
    calls = lowered_calls("llama3-8b", 16, ParallelPlan(dp=16, fsdp="hybrid", dp_shard=8))
    axes = {(k, a) for k, _, a in calls}
    assert ("all_gather", "dp_shard") in axes and ("all_reduce", "dp_rep") in axes
    pl = Placement(ParallelPlan(dp=16, fsdp="hybrid", dp_shard=8), 8)
    assert pl.groups("dp_shard").shape == (2, 8) and pl.groups("dp_rep").shape == (8, 2)


def test_all_to_all_bytes_per_device_formula() -> None:
    # tokens x hidden x top-k x (ep-1)/ep x bytes per element, per dispatch (Megatron-Core MoE).
    model, ep, tp = get_model("mixtral-8x7b"), 8, 1
    plan = ParallelPlan(tp=tp, pp=1, dp=8, ep=ep, sp=False)
    calls = [c for c in lowered_calls("mixtral-8x7b", 8, plan) if c[0] == "all_to_all"]
    tokens = plan.micro_batch * TRAIN.seq_len
    size = tokens * model.hidden_size * model.top_k * TRAIN.activation_bytes
    assert calls and all(c[1] == pytest.approx(size) for c in calls)
    cluster = get_cluster("dgx-h100", 8)
    groups = Placement(plan, 8).groups("ep").tolist()
    cost = price_collective("all_to_all", size, groups, cluster, PROFILE)
    assert cost.bytes_per_rank_sent == pytest.approx(size * (ep - 1) / ep)


def test_cp_ring_traffic_formula() -> None:
    # Ring attention passes the K and V chunks of the other cp-1 ranks: (cp-1) x 2 x tokens/cp x kv x d x bytes.
    model, cp = get_model("llama3-8b"), 4
    plan = ParallelPlan(tp=1, pp=1, dp=2, cp=cp)
    calls = [c for c in lowered_calls("llama3-8b", 8, plan) if c[2] == "cp"]
    chunk = 2 * TRAIN.seq_len / cp * model.num_kv_heads * model.attn_head_dim * TRAIN.activation_bytes
    assert calls and all(c[1] == pytest.approx(chunk * cp) for c in calls)
    cluster = get_cluster("dgx-h100", 8)
    cost = price_collective("all_gather", chunk * cp, Placement(plan, 8).groups("cp").tolist(), cluster, PROFILE)
    assert cost.bytes_per_rank_sent == pytest.approx((cp - 1) * chunk)


def test_recompute_trades_memory_for_time() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", 8)
    results = {rc: simulate(model, TRAIN, cluster, ParallelPlan(tp=2, pp=2, dp=2, sp=True, recompute=rc))
               for rc in ("none", "selective", "full")}
    acts = {rc: r.memory[0].activations for rc, r in results.items()}
    times = {rc: r.step_time for rc, r in results.items()}
    assert acts["full"] < acts["selective"] < acts["none"]
    assert times["none"] <= times["selective"] < times["full"]
    assert results["full"].hfu > results["full"].mfu


def test_partial_recompute_layers_sits_between() -> None:
    model, cluster = get_model("llama3-8b"), get_cluster("dgx-h100", 8)
    t = [simulate(model, TRAIN, cluster, ParallelPlan(tp=2, pp=2, dp=2, sp=True, recompute="full", recompute_layers=n)).step_time
         for n in (0, 4, 16)]
    assert t[0] < t[1] < t[2]


def test_fp8_gemms_speed_up_a_compute_bound_step() -> None:
    model, cluster = get_model("llama3-70b"), get_cluster("dgx-h100", 64)
    plan = ParallelPlan(tp=8, pp=4, dp=2, sp=True, zero=1)
    bf16 = simulate(model, TRAIN, cluster, plan)
    fp8 = simulate(model, dataclasses.replace(TRAIN, precision="fp8"), cluster, plan)
    assert fp8.breakdown["compute"] < bf16.breakdown["compute"]
    # attention, norms and the optimizer stay in bf16: less than the 2x of the GEMM peak ratio
    assert fp8.breakdown["compute"] > bf16.breakdown["compute"] / 2


def test_ep_across_nodes_costs_more_than_within() -> None:
    model = get_model("mixtral-8x7b")
    training = TrainingSpec(seq_len=2048, global_batch_size=64)
    cluster = get_cluster("dgx-h100", 32)
    plan = ParallelPlan(tp=1, pp=1, dp=32, ep=8, zero=2, recompute="full")
    inside = simulate(model, training, cluster, plan)
    # ep groups of stride 4 in device order: the 8 experts of a group span 4 servers
    across = simulate(model, training, cluster, dataclasses.replace(plan, ep=8, order="tp-cp-dp-pp"))
    assert inside.breakdown["exposed_ep"] > 0
    assert across.breakdown["exposed_ep"] >= inside.breakdown["exposed_ep"]


@pytest.mark.parametrize("model,plan,match", [
    ("mixtral-8x7b", dict(dp=8, ep=3), "does not divide num_experts"),
    ("llama3-8b", dict(dp=8, ep=2), "has no experts"),
    ("llama3-8b", dict(dp=1, cp=8, tp=1, zero=1), None),
    ("llama3-8b", dict(dp=4, pp=2, vpp=2, schedule="1f1b"), "needs plan.schedule = interleaved"),
    ("llama3-8b", dict(dp=8, fsdp="hybrid", dp_shard=3), "must divide dp"),
    ("llama3-8b", dict(dp=8, fsdp="full", zero=1), "already shards"),
])
def test_validation_of_every_axis(model: str, plan: dict, match: str | None) -> None:
    cluster = get_cluster("dgx-h100", 8)
    p = ParallelPlan(**plan)
    if match is None:
        simulate(get_model(model), TRAIN, cluster, p)
        with pytest.raises(PlanError, match=r"seq_len 4096 is not divisible by 2\*cp = 16|cp"):
            simulate(get_model(model), dataclasses.replace(TRAIN, seq_len=4100), cluster, p)
        return
    with pytest.raises(PlanError, match=match):
        simulate(get_model(model), TRAIN, cluster, p)


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_grad_memory_follows_the_grad_buffer_dtype(zero: int) -> None:
    # the DP gradient buffer holds grad_dtype_bytes per element (fp32 main grads 4, bf16 2), the
    # same figure the gradient collectives are priced with
    model = get_model("llama3-8b")
    fp32 = ParallelPlan(tp=1, pp=1, dp=4, zero=zero)
    bf16 = dataclasses.replace(fp32, grad_dtype_bytes=2)
    m4, m2 = stage_memory(model, TRAIN, fp32, 0), stage_memory(model, TRAIN, bf16, 0)
    assert m2.grads == pytest.approx(m4.grads / 2)
    assert (m2.weights, m2.optimizer, m2.activations) == (m4.weights, m4.optimizer, m4.activations)


def test_fp8_run_stores_fewer_activation_bytes() -> None:
    model, plan = get_model("llama3-8b"), ParallelPlan(tp=2, pp=1, dp=1, sp=True)
    bf16 = stage_memory(model, TRAIN, plan, 0)
    fp8 = stage_memory(model, dataclasses.replace(TRAIN, precision="fp8"), plan, 0)
    h, f = model.hidden_size, model.ffn_hidden_size
    tokens = TRAIN.seq_len * plan.micro_batch
    assert bf16.activations - fp8.activations == pytest.approx(model.num_layers * tokens * (2 * h + f) / plan.tp)
