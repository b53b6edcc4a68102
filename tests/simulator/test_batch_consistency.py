"""The printed batch identity GBS = DP x MBS x GA (issue 13: the one published MoE plan predicted out
of memory).

GPT-OSS 120B on 64 H100 (Megatron-Bridge 25.11 performance summary, DGX-H100 table) prints GBS 512,
MBS 4, TP1 PP4 (DP 16), GA 2: 16 x 4 x 2 = 128 != 512, so one of the three is a misprint. The memory
model is not at fault: at micro-batch 4 the stage-0 device holds, by hand, more than an H100 has, even
with the recipe's recompute; the recipe (micro-batch 1, ``["layernorm", "moe_act"]``) fits.
"""

from __future__ import annotations

import pandas as pd
import pytest

from clustersim.simulator.calibration.validate import load_runs, scenario_for_row, validate_row
from clustersim.simulator.calibration.validate_plan import batch_consistent
from clustersim.simulator.step.partition import partition_plan
from clustersim.units import GIB
from clustersim.workloads import get_model, layer_activation_bytes


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return load_runs()


def _row(**cells: object) -> dict[str, object]:
    base: dict[str, object] = {"num_gpus": 64, "tp": 1, "pp": 4, "cp": 1, "micro_batch": 4, "grad_accum": 8,
                               "global_batch_seqs": 512}
    return {**base, **cells}


def test_a_consistent_row_is_returned_as_it_is() -> None:
    notes: list[str] = []
    row = _row()  # dp 16 x 4 x 8 = 512
    assert batch_consistent(row, notes) is row and notes == []
    # without a printed grad_accum (or tp/pp) the identity cannot be checked: nothing changes
    for missing in ("grad_accum", "tp", "pp", "micro_batch"):
        short = _row(**{missing: None})
        assert batch_consistent(short, notes) is short and notes == []


def test_a_printed_dp_is_the_one_checked() -> None:
    notes: list[str] = []
    row = _row(dp=8, grad_accum=16)  # the printed dp (8 x 4 x 16 = 512) wins over 64 / (1 x 4) = 16
    assert batch_consistent(row, notes) is row and notes == []


def test_an_inconsistent_row_lets_its_micro_batch_go_and_says_why() -> None:
    notes: list[str] = []
    out = batch_consistent(_row(grad_accum=2), notes)
    assert out["micro_batch"] is None and out["global_batch_seqs"] == 512 and out["grad_accum"] == 2
    assert len(notes) == 1 and "16 x micro_batch 4 x grad_accum 2 = 128" in notes[0] and "512" in notes[0]


def test_gpt_oss_h100_at_the_printed_micro_batch_cannot_fit_by_hand() -> None:
    # one GPT-OSS layer (openai/gpt-oss-120b config.json: hidden 2880, 64 heads x 64, 8 kv heads,
    # 128 experts of 2880 (SwiGLU), top-4), micro-batch 4 x 4096 = N tokens, bf16, TP 1:
    n, h, pairs = 4 * 4096, 2880, 4 * 4 * 4096
    kept = {"norm inputs": 2 * 2 * n * h, "qkv input (TE LayerNormLinear's norm output)": 2 * n * h,
            "q": 2 * n * 4096, "k, v": 2 * 2 * n * 512,
            "softmax lse": 4 * 64 * n, "out-proj input": 2 * n * 4096,
            "router probs": 4 * n * 128, "fc1 input": 2 * pairs * h, "act input": 2 * pairs * 2 * h,
            "permuted probs (fp32, one per pair, for the weighted activation)": 4 * pairs}
    # no dropout masks (config.json attention_dropout 0.0) and no expert output (the unpermute takes
    # no probabilities: Megatron-Core >= 0.13 applies them in the activation)
    # 'layernorm' frees the MoE block's pre_mlp_layernorm output (the input norm is fused into QKV),
    # 'moe_act' the fc2 input and the clamped copy of the act input (swiglu_limit 7.0: Megatron-Core
    # saves the clamped gate|up beside the fc1 output, workloads/blocks.py expert_act_op)
    freed = {"layernorm": 2 * n * h, "moe_act": 2 * pairs * h + 2 * pairs * 2 * h}
    model = get_model("gpt-oss-120b")
    bare = layer_activation_bytes(model, 0, micro_batch=4, seq_len=4096, ep=8)
    layer = layer_activation_bytes(model, 0, micro_batch=4, seq_len=4096, ep=8, recompute="selective",
                                   recompute_modules=("layernorm", "moe_act"))
    assert bare == pytest.approx(sum(kept.values()) + sum(freed.values()))  # 2,820 MiB
    assert layer == pytest.approx(sum(kept.values()))  # 1,650 MiB with the recipe's recompute
    # 1F1B keeps pp = 4 micro-batches in flight on stage 0, 9 layers each: 36 layers (58 GiB) and the
    # weights, grads and optimizer state (37 GiB) on top exceed 80 GiB
    assert 4 * 9 * layer + 37 * GIB > 80 * GIB


def test_the_gpt_oss_h100_row_fits_with_the_recipe(runs: pd.DataFrame) -> None:
    row = runs[runs.row_id == 549].iloc[0].to_dict()
    sc = scenario_for_row(row)
    assert any("GBS = DP x MBS x GA" in n for n in sc.inferred)
    assert (sc.plan.recompute, sc.plan.recompute_modules) == ("selective", ("layernorm", "moe_act"))
    assert {p.micro_batch for p in sc.candidates} == {1, 2, 4, 8}  # tuned like any unpublished micro-batch
    rec = validate_row(row)
    assert rec["status"] == "ok" and "memory check lifted" not in rec["inferred"]
    plan = rec["_plan"]
    need = max(m.total for m in partition_plan(sc.model, sc.training, plan).memory)
    assert plan.micro_batch == 1 and need <= sc.cluster.accelerator.hbm_capacity
