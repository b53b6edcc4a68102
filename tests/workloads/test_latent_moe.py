"""LatentMoE and patterned, weight-shared MTP (Nemotron 3 Super; issue 12 item 3, issue 13 item 2).

A LatentMoE projects its tokens from h to a latent width after the router and back after the
combine; its routed experts and its EP dispatch run at the latent width. MTP depths may be a
hybrid pattern ("*E") and share one module's weights (Megatron-Core ``mtp_use_repeated_layer``).
Closed forms: parameter counts, the expert and projection GEMM FLOPs, the all-to-all bytes.
"""

from __future__ import annotations

import dataclasses

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import get_cluster
from clustersim.workloads import ModelSpec, TrainingSpec, get_model
from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.flops import attention_flops_per_token, model_flops_per_step
from clustersim.workloads.ops import head_ops, layer_ops

SUPER = get_model("nemotron-3-super")
SMALL = ModelSpec(name="latent-toy", num_layers=4, layer_pattern="M*EE", hidden_size=512, num_heads=8,
                  num_kv_heads=2, ffn_hidden_size=256, vocab_size=4096, gated_mlp=False, num_experts=16,
                  top_k=4, moe_ffn_hidden_size=256, num_shared_experts=1, shared_expert_ffn_hidden_size=512,
                  moe_latent_size=128, mamba_num_heads=8, mamba_head_dim=64, mtp_layers=2,
                  mtp_layer_pattern="*E", mtp_shared_weights=True)
FULL_WIDTH = dataclasses.replace(SMALL, name="full-width-toy", moe_latent_size=None)


def test_the_moe_block_counts_experts_at_the_latent_width_and_both_projections() -> None:
    h, lat, f, E = 512, 128, 256, 16
    experts = E * 2 * lat * f  # non-gated: fc1 lat x f, fc2 f x lat
    shared = 2 * h * 512
    assert SMALL.moe_block_params() == experts + shared + h * E + 2 * h * lat
    assert FULL_WIDTH.moe_block_params() == E * 2 * h * f + shared + h * E
    # one token uses top_k of the experts, every projection, the router and the shared expert
    assert SMALL.layer_active_params(2) == SMALL.layer_params(2) - (E - 4) * 2 * lat * f


def test_the_super_preset_is_the_size_its_name_says() -> None:
    base = dataclasses.replace(SUPER, mtp_layers=0, mtp_layer_pattern=None, mtp_shared_weights=False)
    assert 119.5e9 < base.num_params() < 121.5e9  # "120B"
    assert 11.5e9 < base.num_active_params() < 13.0e9  # "A12B"
    assert SUPER.layer_pattern is not None and len(SUPER.layer_pattern) == SUPER.num_layers == 88
    assert (SUPER.layer_pattern.count("M"), SUPER.layer_pattern.count("E"), SUPER.layer_pattern.count("*")) == (40, 40, 8)
    assert "Nemotron3SuperProvider" in SUPER.source and "stored copy" in SUPER.source


def _ops(model: ModelSpec, layer: int, **kw: int) -> dict[str, object]:
    return {op.name: op for op in layer_ops(model, layer, micro_batch=1, seq_len=256, **kw)}


def test_the_experts_and_the_dispatch_run_at_the_latent_width() -> None:
    lat, full = _ops(SMALL, 2, ep=4), _ops(FULL_WIDTH, 2, ep=4)
    t, h, L = 256, 512, 128
    assert lat["moe_latent_down"].flops == pytest.approx(2 * t * h * L)  # type: ignore[attr-defined]
    assert lat["moe_latent_up"].flops == pytest.approx(2 * t * L * h)  # type: ignore[attr-defined]
    assert "moe_latent_down" not in full
    for name in ("expert_fc1", "expert_fc2"):  # GEMMs: FLOPs scale with the token width
        assert full[name].flops > 0 and lat[name].flops == pytest.approx(full[name].flops * L / h)  # type: ignore[attr-defined]
    for name in ("moe_dispatch", "moe_combine", "moe_permute", "moe_unpermute"):  # token copies: bytes
        assert full[name].bytes > 0 and lat[name].bytes == pytest.approx(full[name].bytes * L / h)  # type: ignore[attr-defined]
    # router and shared expert see the full width either way
    assert lat["router"].flops == full["router"].flops  # type: ignore[attr-defined]
    assert lat["shared_fc1"].flops == full["shared_fc1"].flops  # type: ignore[attr-defined]


def test_the_ep_all_to_all_moves_latent_sized_tokens() -> None:
    cluster = get_cluster("dgx-b200", 16)
    training = TrainingSpec(seq_len=256, global_batch_size=64, precision="bf16")
    plan = ParallelPlan(dp=16, ep=16, zero=1)
    a2a = {m.name: [c for c in simulate(m, training, cluster, plan).collectives
                    if c["kind"] == "all_to_all" and c["axis"] == "ep"] for m in (SMALL, FULL_WIDTH)}
    (lat,), (full,) = a2a["latent-toy"], a2a[FULL_WIDTH.name]
    assert lat["size_bytes"] == pytest.approx(full["size_bytes"] * 128 / 512)


def test_shared_mtp_weights_are_held_once_and_run_every_depth() -> None:
    unshared = dataclasses.replace(SMALL, mtp_shared_weights=False)
    one = SMALL.mtp_module_params()
    assert unshared.num_params() - SMALL.num_params() == one  # two depths, one module held
    assert SMALL.num_active_params() == unshared.num_active_params()  # both depths compute
    training = TrainingSpec(seq_len=256, global_batch_size=8)
    assert model_flops_per_step(SMALL, training) == model_flops_per_step(unshared, training)
    ops = head_ops(SMALL, micro_batch=1, seq_len=256)
    depth0 = sum(o.params for o in ops if o.name.startswith("mtp0_"))
    depth1 = [o for o in ops if o.name.startswith("mtp1_")]
    assert depth0 > 0 and depth1 and all(o.params == 0 for o in depth1)
    # the module's block is its pattern: an attention and an MoE layer, each behind its pre-norm
    names = [o.name for o in ops if o.name.startswith("mtp0_")]
    assert "mtp0_moe_latent_down" in names and any("attn" in n or "qkv" in n for n in names)


def test_pattern_mtp_depths_add_their_attention_to_the_flop_count() -> None:
    none = dataclasses.replace(SMALL, mtp_layers=0, mtp_layer_pattern=None, mtp_shared_weights=False)
    per_layer = attention_flops_per_token(none, 256) / 1  # one '*' in the pattern M*EE
    assert attention_flops_per_token(SMALL, 256) == pytest.approx(per_layer * (1 + 2))


@pytest.mark.parametrize("fields, word", [
    ({"moe_latent_size": 0}, "moe_latent_size"),
    ({"mtp_layers": 0}, "mtp_layers > 0"),
    ({"mtp_layer_pattern": "*X"}, "mtp_layer_pattern"),
])
def test_bad_latent_and_mtp_fields_name_the_field(fields: dict[str, object], word: str) -> None:
    with pytest.raises(WorkloadError, match=word):
        dataclasses.replace(SMALL, **fields)  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match="moe_latent_size"):
        dataclasses.replace(get_model("llama3-8b"), moe_latent_size=64)


def test_a_step_of_the_latent_model_is_bounded_by_its_compute() -> None:
    cluster = get_cluster("dgx-b200", 16)
    training = TrainingSpec(seq_len=256, global_batch_size=64, precision="bf16")
    res = simulate(SMALL, training, cluster, ParallelPlan(dp=16, ep=16, zero=1))
    assert 0 < res.mfu <= 1.0
    assert res.step_time >= res.model_flops / (res.num_gpus * res.peak_flops)


def test_each_mtp_depth_keeps_its_projection_input_block_and_head_on_the_last_stage() -> None:
    from clustersim.workloads.activations import head_activation_bytes, layer_activation_bytes, mtp_activation_bytes

    kw = {"micro_batch": 2, "seq_len": 256, "tp": 2, "sp": True}
    one = (2 * 2 * 2 * 256 * 512 / 2  # the 2h projection input, bf16, sequence-parallel
           + layer_activation_bytes(SMALL, 3, kind="attention", **kw) + layer_activation_bytes(SMALL, 3, kind="moe", **kw)
           + head_activation_bytes(SMALL, **kw))
    assert mtp_activation_bytes(SMALL, **kw) == pytest.approx(2 * one)  # shared weights, two forwards
    none = dataclasses.replace(SMALL, mtp_layers=0, mtp_layer_pattern=None, mtp_shared_weights=False)
    assert mtp_activation_bytes(none, **kw) == 0.0
    # the engine's stage memory carries exactly that on the one (last) stage
    cluster = get_cluster("dgx-b200", 8)
    training = TrainingSpec(seq_len=256, global_batch_size=16, precision="bf16")
    plan = ParallelPlan(tp=2, dp=4, ep=4, zero=1, micro_batch=2, sp=True)
    with_mtp = simulate(SMALL, training, cluster, plan).memory[0]
    without = simulate(dataclasses.replace(SMALL, mtp_layers=1, mtp_shared_weights=False), training, cluster, plan).memory[0]
    assert with_mtp.activations - without.activations == pytest.approx(mtp_activation_bytes(SMALL, **kw) / 2)


def test_tp_must_divide_the_mamba_heads_groups_and_shared_experts_and_search_skips_what_does_not() -> None:
    from clustersim.simulator.errors import PlanError
    from clustersim.simulator.plan.checks import check_plan
    from clustersim.simulator.search.search import search

    # 8 query heads / 2 KV heads allow tp 8 (KV replicated), but the toy's Mamba layers have 8 heads and
    # 8 groups by default: tp 16 would not divide them; a model with 4 groups refuses tp 8 naming the field
    grouped = dataclasses.replace(SMALL, mamba_num_groups=4)
    cluster = get_cluster("dgx-b200", 8)
    training = TrainingSpec(seq_len=256, global_batch_size=16, precision="bf16")
    with pytest.raises(PlanError, match="mamba_num_groups = 4"):
        check_plan(grouped, training, cluster, ParallelPlan(tp=8, sp=True))
    check_plan(grouped, training, cluster, ParallelPlan(tp=4, dp=2, sp=True))  # 4 divides everything
    result = search(grouped, training, cluster, top=3)
    assert result.ranked and all(4 % r.plan.tp == 0 for r in result.ranked)
