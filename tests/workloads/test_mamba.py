"""Hybrid Mamba-2/attention/MoE models: pattern, parameter counts, ops, FLOPs, activations, and
the simulator tiers on them (published counts, closed forms, sharding invariants, scaling)."""

from __future__ import annotations

import dataclasses

import pytest

from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.search.estimate import Estimator
from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.topologies import get_cluster
from clustersim.workloads import (
    TrainingSpec,
    WorkloadError,
    get_model,
    layer_activation_bytes,
    layer_ops,
    model_flops_per_step,
    resolve_model_name,
)
from clustersim.workloads.mamba import (mamba_cp_alltoall_bytes, ssd_bwd_flops, ssd_flops, ssd_scan_bwd_bytes_per_token,
                                        ssd_scan_bytes_per_token)

NANO = get_model("nemotron-3-nano")
H = NANO.hidden_size
MAMBA, ATTN, MOE = NANO.layer_pattern.index("M"), NANO.layer_pattern.index("*"), NANO.layer_pattern.index("E")


def test_nano_parameter_counts_match_the_published_figures() -> None:
    # NVIDIA Nemotron 3 announcement / tech report (arXiv 2512.20848): "a 3.2B active (3.6B with
    # embeddings), 31.6B total parameter model"; 3.2B leaves out the input embedding lookup.
    assert NANO.num_params() == pytest.approx(31.6e9, rel=0.03)
    assert NANO.num_active_params() == pytest.approx(3.6e9, rel=0.03)
    lookup = NANO.vocab_size * H
    assert NANO.num_active_params() - lookup == pytest.approx(3.2e9, rel=0.03)


def test_pattern_kinds_counts_and_name_resolution() -> None:
    # Nemotron 3 Nano: 23 Mamba-2, 23 MoE and 6 attention layers (Megatron-Bridge docs, HF config)
    kinds = [NANO.layer_kind(i) for i in range(NANO.num_layers)]
    assert (kinds.count("mamba"), kinds.count("moe"), kinds.count("attention")) == (23, 23, 6)
    assert [NANO.is_moe_layer(i) for i in range(52)] == [k == "moe" for k in kinds]
    assert NANO.num_moe_layers == 23
    assert resolve_model_name("Nemotron_3_Nano") == "nemotron-3-nano"
    assert get_model("llama3-8b").layer_kind(0) == "transformer"


def test_mamba_mixer_parameters_follow_the_mamba2_layout() -> None:
    d_in, g, n, heads, k = 64 * 64, 8, 128, 64, 4
    conv = d_in + 2 * g * n
    expected = H * (2 * d_in + 2 * g * n + heads) + conv * k + conv + 3 * heads + d_in + d_in * H
    assert NANO.mamba_params() == expected
    assert NANO.layer_params(MAMBA) == expected + H  # plus the pre-norm


@pytest.mark.parametrize("tp", [1, 2])
def test_layer_ops_shard_parameters_and_flops_over_tp(tp: int) -> None:
    for i in (MAMBA, ATTN):
        full = layer_ops(NANO, i, micro_batch=1, seq_len=4096)
        part = layer_ops(NANO, i, micro_batch=1, seq_len=4096, tp=tp, sp=True)
        # the pre-norm weight is replicated on every tp rank, everything else is split
        assert sum(o.params for o in part) * tp - (tp - 1) * H == NANO.layer_params(i)
        gemm = lambda ops: sum(o.flops for o in ops if o.kind in ("gemm", "attention"))  # noqa: E731
        assert gemm(part) * tp == pytest.approx(gemm(full))


def test_ssd_scan_flops_are_linear_in_sequence_length() -> None:
    def scan(s: int) -> float:
        return next(o.flops for o in layer_ops(NANO, MAMBA, micro_batch=1, seq_len=s) if o.name == "ssd_scan")

    def core(s: int) -> float:
        return next(o.flops for o in layer_ops(NANO, ATTN, micro_batch=1, seq_len=s) if o.name == "attn_core")

    assert scan(8192) == pytest.approx(2 * scan(4096))
    assert core(8192) == pytest.approx(4 * core(4096))
    # Dao & Gu 2024 sec. 6: 4*d_inner*N + 2*Q*(d_inner + G*N) per token
    assert scan(1024) == pytest.approx(1024 * (4 * 4096 * 128 + 2 * 128 * (4096 + 8 * 128)))
    assert ssd_flops(4096, 8, 128, 256) > ssd_flops(4096, 8, 128, 128)


def test_ssd_scan_backward_counts_mamba_ssm_kernels() -> None:
    """Backward of the chunked scan as _mamba_chunk_scan_combined_bwd runs it (mamba.py docstring):
    recompute C B^T and the chunk states, then dstates, dx, dB, dC, dCB, two bmm_chunk_bwd, ddA."""
    d, g, n, q = 4096, 8, 128, 128  # Nemotron 3 Nano
    dn, qd, qgn = d * n, q * d, q * g * n
    recompute = 2 * qgn + 2 * dn
    kernels = 2 * dn + (2 * dn + 2 * qd) + 2 * dn + 2 * dn + 2 * qd + 4 * qgn + 2 * qd
    assert ssd_bwd_flops(d, g, n, q) == pytest.approx(recompute + kernels)
    # in the d_inner*N terms it is exactly 2x the forward plus the recomputed chunk states ...
    assert ssd_bwd_flops(d, 0, n, 0) == pytest.approx(2.5 * ssd_flops(d, 0, n, 0))
    # ... and 3x in the Q*d_inner (intra-chunk) terms: for Nano 2.69x the forward, not 2x
    assert ssd_bwd_flops(d, g, n, q) / ssd_flops(d, g, n, q) == pytest.approx(2.692, abs=1e-3)
    op = next(o for o in layer_ops(NANO, MAMBA, micro_batch=2, seq_len=4096, tp=2) if o.name == "ssd_scan")
    assert op.bwd_flops == pytest.approx(2 * 4096 * ssd_bwd_flops(d // 2, g // 2, n, q))
    assert op.bwd_flops > 2.5 * op.flops


def test_ssd_scan_backward_bytes_count_mamba_ssm_kernels_and_set_its_time() -> None:
    d, h, g, n, q, a, f = 4096, 64, 8, 128, 128, 2, 4  # Nemotron 3 Nano, bf16, fp32 intermediates
    per_token = h * (a + 22 * f) + 11 * a * d + (11 * a + 4 * f) * g * n + 6 * f * g * q + (6 * f + 5 * a) * d * n / q
    assert ssd_scan_bwd_bytes_per_token(d, h, g, n, q, a) == pytest.approx(per_token)
    ratio = ssd_scan_bwd_bytes_per_token(d, h, g, n, q, a) / ssd_scan_bytes_per_token(d, h, g, n, q, a)
    assert ratio == pytest.approx(2.761, abs=1e-3)  # not the 2x of the other ops
    op = next(o for o in layer_ops(NANO, MAMBA, micro_batch=1, seq_len=4096, tp=2) if o.name == "ssd_scan")
    assert op.bwd_bytes == pytest.approx(4096 * ssd_scan_bwd_bytes_per_token(d // 2, h // 2, g // 2, n, q, a))
    # the scan is HBM-bound (a few tens of FLOP per byte), so its backward time moves with these bytes
    assert op.bwd_flops / op.bwd_bytes < 50


def test_ssd_scan_hbm_traffic_includes_the_fp32_chunk_states() -> None:
    def scan(s: int, tp: int = 1):
        return next(o for o in layer_ops(NANO, MAMBA, micro_batch=1, seq_len=s, tp=tp) if o.name == "ssd_scan")

    # Nano: H 64 heads of P 64 (d_inner 4096), N 128, G 8, Q 128; bf16 inputs, fp32 intermediates
    d, h, g, n, q, a, f = 4096, 64, 8, 128, 128, 2, 4
    per_token = h * (a + 6 * f) + 3 * a * d + 4 * a * g * n + 2 * f * g * q + 4 * f * d * n / q
    assert scan(4096).bytes == pytest.approx(4096 * per_token)
    assert scan(8192).bytes == pytest.approx(2 * scan(4096).bytes)  # linear in the tokens
    # the chunk states (fp32, d_inner x N per chunk) are the largest share: more than the inputs
    assert 4 * f * d * n / q > 3 * a * d
    # tensor parallelism splits heads and groups: every term but none of the tokens
    assert scan(4096, tp=2).bytes == pytest.approx(scan(4096).bytes / 2)


def test_model_flops_count_attention_only_in_attention_layers() -> None:
    training = TrainingSpec(seq_len=8192, global_batch_size=4)
    attention = 6 * 12 * (32 * 128) * 8192  # PaLM 12*L*h_attn*s over the 6 attention layers
    scan = 3 * 23 * (4 * 4096 * 128 + 2 * 128 * (4096 + 8 * 128))
    # 6N over the parameters that multiply: the untied input lookup (V*h) runs no FLOPs
    expected = (6 * (NANO.num_active_params() - NANO.vocab_size * H) + attention + scan) * training.tokens_per_step
    assert model_flops_per_step(NANO, training) == pytest.approx(expected)


def test_activation_bytes_scale_with_tp_and_recompute() -> None:
    kw = dict(micro_batch=1, seq_len=8192)
    for i in (MAMBA, ATTN, MOE):
        one = layer_activation_bytes(NANO, i, **kw)
        sharded = layer_activation_bytes(NANO, i, tp=2, sp=True, **kw)
        assert one / 2 == pytest.approx(sharded, rel=0.35) and sharded < one
        assert layer_activation_bytes(NANO, i, recompute="full", **kw) == 2 * 8192 * H
        assert layer_activation_bytes(NANO, i, seq_len=16384, micro_batch=1) > one
    # a Mamba layer keeps at least its in_proj output z|xBC|dt and the scan input
    assert layer_activation_bytes(NANO, MAMBA, **kw) > 2 * 8192 * (2 * 4096 + 2 * 8 * 128 + 64)


@pytest.mark.parametrize(("field", "value"), [("layer_pattern", "M*E"), ("layer_pattern", "X" * 52),
                                              ("mamba_num_heads", 0), ("mamba_num_groups", 3)])
def test_inconsistent_hybrid_specs_are_rejected(field: str, value: object) -> None:
    with pytest.raises(WorkloadError, match=field.split("_")[0]):
        dataclasses.replace(NANO, **{field: value})


TRAIN = TrainingSpec(seq_len=4096, global_batch_size=16, precision="bf16")


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2)])
def test_engine_and_analytic_tier_agree_on_a_hybrid(tp: int, pp: int) -> None:
    cluster, prof = get_cluster("dgx-b200", 8), CalibrationProfile()
    plan = ParallelPlan(tp=tp, pp=pp, dp=4, ep=4, sp=tp > 1, zero=1)
    res = simulate(NANO, TRAIN, cluster, plan, profile=prof)
    est = Estimator(NANO, TRAIN, cluster, prof).estimate(plan)
    assert 0 < res.mfu < 1 and res.step_time >= res.ideal_compute_s
    assert est.step_time == pytest.approx(res.step_time, rel=0.25)
    assert (res.breakdown["bubble"] > 0) == (pp > 1)


def test_tp_costs_one_block_per_hybrid_layer() -> None:
    training, plan = TRAIN, ParallelPlan(tp=2, pp=1, dp=4, ep=4, sp=True, zero=1)
    cluster, prof = get_cluster("dgx-b200", 8), CalibrationProfile()
    # a hybrid layer has one TP block: one all-gather in, one reduce-scatter out (not two pairs)
    e = Estimator(NANO, training, cluster, prof)
    lt = e._times(MAMBA, 1, 2, 1, 4, 1, True, 1.0)
    size = 4096 * H * training.activation_bytes
    one = e.comm("reduce_scatter", size, 2, 1) + e.comm("all_gather", size, 2, 1)
    assert one > 0 and e._layer_comm(plan, MAMBA, lt)[0] == pytest.approx(one)


def test_context_parallelism_is_not_free_for_mamba_layers() -> None:
    cluster, prof = get_cluster("dgx-b200", 8), CalibrationProfile()
    base = dict(tp=1, pp=1, ep=4, zero=1)
    no_cp = simulate(NANO, TRAIN, cluster, ParallelPlan(dp=8, **base), profile=prof)
    cp = simulate(NANO, TRAIN, cluster, ParallelPlan(dp=4, cp=2, **base), profile=prof)
    est = Estimator(NANO, TRAIN, cluster, prof).estimate(ParallelPlan(dp=4, cp=2, **base))
    # 23 Mamba layers each pay an unhidden all-to-all forward and backward
    assert cp.breakdown["exposed_cp"] > 0 and est.breakdown["exposed_comm"] > 0
    assert mamba_cp_alltoall_bytes(NANO, micro_batch=1, seq_len=4096, cp=1) == 0.0
    assert mamba_cp_alltoall_bytes(NANO, micro_batch=1, seq_len=4096, tp=2, cp=2) == pytest.approx(
        2048 * (2 * 4096 + 4096 + 2048 + 64) / 2 * 2)
    assert no_cp.breakdown["exposed_cp"] == 0.0
