"""Per-device layer ops: FLOP and parameter conservation under sharding, closed forms."""

import dataclasses

import pytest

from clustersim.workloads import Op, WorkloadError, embedding_ops, get_model, head_ops, layer_ops

COMPUTE_KINDS = ("gemm", "attention", "router")


def _flops(ops: tuple[Op, ...], kinds: tuple[str, ...] = COMPUTE_KINDS) -> float:
    return sum(o.flops for o in ops if o.kind in kinds)


def _params(ops: tuple[Op, ...]) -> int:
    return sum(o.params for o in ops)


@pytest.mark.parametrize("name", ["llama3-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt3-175b"])
@pytest.mark.parametrize(("tp", "cp"), [(2, 1), (4, 2), (4, 8)])
def test_flops_conserved_over_tp_and_cp_ranks(name: str, tp: int, cp: int) -> None:
    # Every tp*cp rank of a group does the same work (symmetry), so the group's sum is
    # tp*cp times one rank's; it must equal the unsharded layer's FLOPs.
    model = get_model(name)
    layer = model.num_layers - 1  # MoE layer for the MoE models
    full = layer_ops(model, layer, micro_batch=2, seq_len=4096)
    sharded = layer_ops(model, layer, micro_batch=2, seq_len=4096, tp=tp, cp=cp, etp=1)
    assert tp * cp * _flops(sharded) == pytest.approx(_flops(full), rel=1e-12)


def test_expert_flops_do_not_depend_on_ep_or_etp() -> None:
    # Balanced dropless routing: a device's experts see (T/tp)*etp*top_k token-expert pairs
    # with 1/etp of the columns, so per-device expert FLOPs are set by T/tp and top_k alone.
    model = get_model("qwen3-235b-a22b")
    ref = layer_ops(model, 0, micro_batch=1, seq_len=4096, tp=4)
    for ep, etp in [(2, 1), (8, 1), (4, 2), (16, 4)]:
        ops = layer_ops(model, 0, micro_batch=1, seq_len=4096, tp=4, ep=ep, etp=etp)
        assert _flops(ops, ("gemm",)) == pytest.approx(_flops(ref, ("gemm",)), rel=1e-12)


def test_expert_flops_closed_form() -> None:
    m = get_model("mixtral-8x7b")
    tokens = 4096
    ops = {o.name: o for o in layer_ops(m, 0, micro_batch=1, seq_len=tokens, ep=4)}
    # SwiGLU expert: 3 GEMMs of h x f per token-expert pair, 2 FLOP per multiply-add
    expected = 2 * 3 * m.hidden_size * m.moe_ffn_hidden_size * tokens * m.top_k
    assert ops["expert_fc1"].flops + ops["expert_fc2"].flops == pytest.approx(expected)


@pytest.mark.parametrize("name", ["llama3-70b", "deepseek-v3", "mixtral-8x7b", "tiny-moe"])
def test_params_summed_over_shards_equal_layer_params(name: str) -> None:
    # Sum over tp ranks of tp-sharded params + replicated params once, then over ep ranks the
    # expert params, equals layer_params (no biases in these models).
    model = get_model(name)
    layer = model.num_layers - 1
    tp, ep = 2, 2
    ops = layer_ops(model, layer, micro_batch=1, seq_len=512, tp=tp, ep=ep)
    replicated = {"attn_norm", "mlp_norm", "q_down", "kv_down", "q_latent_norm",
                  "kv_latent_norm", "router"}
    experts = {"expert_fc1", "expert_fc2"}
    total = sum(o.params for o in ops if o.name in replicated)
    total += tp * sum(o.params for o in ops if o.name not in replicated | experts)
    total += ep * sum(o.params for o in ops if o.name in experts)
    assert total == model.layer_params(layer)


def test_dense_gemm_flops_are_two_per_param_per_token() -> None:
    model = get_model("llama3-8b")
    tokens = 2 * 2048
    ops = layer_ops(model, 0, micro_batch=2, seq_len=2048)
    norms = 2 * model.norm_params(model.hidden_size)
    assert _flops(ops, ("gemm",)) == pytest.approx(2 * tokens * (model.layer_params(0) - norms))


def test_attention_core_closed_form_and_causal_fraction() -> None:
    m = get_model("llama3-8b")
    b, s, tp, cp = 1, 8192, 4, 2
    core = next(o for o in layer_ops(m, 0, micro_batch=b, seq_len=s, tp=tp, cp=cp)
                if o.kind == "attention")
    # QK^T and AV: 4*b*s*s*heads*head_dim over tp*cp ranks, full s^2 convention
    assert core.flops == pytest.approx(4 * b * s * s * m.num_heads * m.attn_head_dim / (tp * cp))
    assert core.bwd_flops == pytest.approx(2 * core.flops)
    assert core.causal_flops_fraction == 0.5 and core.recompute_selective and not core.fp8


def test_sliding_window_core_counts_the_band() -> None:
    m = get_model("gpt-oss-120b")
    sliding, full = (next(o for o in layer_ops(m, i, micro_batch=1, seq_len=4096)
                          if o.kind == "attention") for i in (0, 1))
    assert sliding.flops == pytest.approx(full.flops * 128 / 4096)
    assert sliding.causal_flops_fraction == 1.0 and full.causal_flops_fraction == 0.5


def test_gemm_backward_is_twice_forward_and_fp8_marks_linears() -> None:
    ops = layer_ops(get_model("llama3-8b"), 0, micro_batch=1, seq_len=1024, tp=2)
    for op in ops:
        if op.kind == "gemm":
            assert op.bwd_flops == 2 * op.flops and op.fp8
            m, n, k = op.gemm_shape
            assert op.flops == pytest.approx(2 * m * n * k)


def test_sequence_parallel_shards_norms_only() -> None:
    m = get_model("llama3-8b")
    with_sp = {o.name: o for o in layer_ops(m, 0, micro_batch=1, seq_len=1024, tp=4, sp=True)}
    without = {o.name: o for o in layer_ops(m, 0, micro_batch=1, seq_len=1024, tp=4, sp=False)}
    assert with_sp["attn_norm"].flops == pytest.approx(without["attn_norm"].flops / 4)
    assert with_sp["qkv"].flops == without["qkv"].flops


def test_embedding_and_head_ops() -> None:
    m = get_model("llama3-8b")
    tp, tokens = 4, 4096
    (emb,) = embedding_ops(m, micro_batch=1, seq_len=tokens, tp=tp)
    norm, out, loss = head_ops(m, micro_batch=1, seq_len=tokens, tp=tp)
    assert emb.params * tp == m.vocab_size * m.hidden_size and emb.flops == 0
    assert out.flops * tp == pytest.approx(2 * tokens * m.vocab_size * m.hidden_size)
    assert loss.kind == "loss" and norm.kind == "norm"
    tied = get_model("gpt3-175b")
    assert head_ops(tied, micro_batch=1, seq_len=2048)[1].params == 0


def test_mtp_head_runs_one_more_layer_and_the_shared_head() -> None:
    base, mtp = get_model("deepseek-v3"), get_model("deepseek-v3-mtp")
    kwargs = dict(micro_batch=1, seq_len=1024, tp=2, ep=8)
    plain = head_ops(base, **kwargs)
    extra = head_ops(mtp, **kwargs)[len(plain):]
    layer = layer_ops(base, base.num_layers - 1, **kwargs)
    h = base.hidden_size
    proj_flops = 2 * 1024 * (2 * h) * (h // 2)  # 2h -> h projection, column-parallel over tp=2
    assert _flops(extra) == pytest.approx(_flops(layer) + _flops(plain) + proj_flops)
    # the block, the projection's tp shard and three RMSNorms; the output head is shared
    assert sum(o.params for o in extra) == sum(o.params for o in layer) + 2 * h * h // 2 + 3 * h


def test_mla_and_moe_ops_present() -> None:
    names = [o.name for o in layer_ops(get_model("deepseek-v3"), 3, micro_batch=1, seq_len=256)]
    for expected in ("q_down", "kv_up", "router", "moe_dispatch", "expert_fc1", "shared_fc1"):
        assert expected in names
    dense = [o.name for o in layer_ops(get_model("deepseek-v3"), 0, micro_batch=1, seq_len=256)]
    assert "mlp_fc1" in dense and "router" not in dense


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tp": 3}, "num_heads"),
    ({"cp": 5}, "seq_len"),
    ({"ep": 3}, "num_experts"),
])
def test_indivisible_sharding_names_the_field(kwargs: dict[str, int], field: str) -> None:
    model = dataclasses.replace(get_model("tiny-moe"), num_heads=16, num_kv_heads=8)
    with pytest.raises(WorkloadError, match=field):
        layer_ops(model, 3, micro_batch=1, seq_len=768, **kwargs)


def test_kv_heads_replicate_when_tp_is_a_multiple_and_fail_otherwise() -> None:
    # Megatron-Core replicates KV groups when tp > num_query_groups and tp % groups == 0 (tp 16, 8 KV
    # heads: one KV head per rank); tp 12 with 8 KV heads neither divides nor replicates evenly
    model = dataclasses.replace(get_model("tiny-moe"), num_heads=16, num_kv_heads=8)
    assert layer_ops(model, 3, micro_batch=1, seq_len=768, tp=16)
    wide = dataclasses.replace(get_model("tiny-moe"), num_heads=24, num_kv_heads=8, hidden_size=24 * 64)
    with pytest.raises(WorkloadError, match="num_kv_heads"):
        layer_ops(wide, 3, micro_batch=1, seq_len=768, tp=12)


def test_ops_are_deterministic() -> None:
    m = get_model("deepseek-v3")
    a = layer_ops(m, 10, micro_batch=1, seq_len=4096, tp=8, ep=8, cp=2)
    assert a == layer_ops(m, 10, micro_batch=1, seq_len=4096, tp=8, ep=8, cp=2)


def test_unfused_attention_keeps_model_flops_and_moves_every_score() -> None:
    m = get_model("gpt3-175b")
    b, s, tp = 2, 2048, 8
    fused = layer_ops(m, 0, micro_batch=b, seq_len=s, tp=tp)
    unfused = layer_ops(m, 0, micro_batch=b, seq_len=s, tp=tp, attention_kernel="unfused")
    core = next(o for o in fused if o.kind == "attention")
    bmm = next(o for o in unfused if o.kind == "bmm")
    softmax = next(o for o in unfused if o.name == "attn_softmax")
    assert not any(o.kind == "attention" for o in unfused)
    # same model FLOPs, but the unfused GEMMs compute the whole (masked) square
    assert bmm.flops == pytest.approx(core.flops) and bmm.causal_flops_fraction == 1.0
    scores = b * s * s * m.num_heads / tp
    dt = 2
    assert bmm.bytes - core.bytes == pytest.approx(2 * dt * scores)  # scores written, dropped probs read
    assert softmax.bytes == pytest.approx((4 * dt + 1) * scores)  # softmax r/w, dropout r/w + mask
    assert softmax.bwd_bytes == pytest.approx((5 * dt + 1) * scores)
    assert bmm.recompute_selective and softmax.recompute_selective
    # the ops outside the attention core are the same
    rest = lambda ops: [o for o in ops if not o.recompute_selective]  # noqa: E731
    assert rest(fused) == rest(unfused)


def test_attention_kernel_is_validated_and_carried_to_the_core_op() -> None:
    from clustersim.workloads import TrainingSpec
    with pytest.raises(WorkloadError, match="attention_kernel"):
        TrainingSpec(seq_len=2048, global_batch_size=8, attention_kernel="flash9")  # type: ignore[arg-type]
    m = get_model("llama3-8b")
    core = next(o for o in layer_ops(m, 0, micro_batch=1, seq_len=2048, attention_kernel="flash2")
                if o.kind == "attention")
    assert core.kernel == "flash2"
