"""The logits a cross entropy keeps for its backward (``plan.cross_entropy_fusion_impl``): Megatron's
own keeps the fp32 softmax (4 bytes per logit), Transformer Engine's keeps the logits in their dtype
(2), on the stage that holds the loss only; the arguments and YAML keys that choose it are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.simulator.calibration.jobargs import read_job
from clustersim.simulator.errors import PlanError
from clustersim.simulator.plan import ParallelPlan, check_plan
from clustersim.simulator.step.partition import stage_memory
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model
from clustersim.workloads.op_primitives import split_padded

MODEL = get_model("llama3-8b")
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=16, precision="bf16")
DATA = Path(__file__).parent / "runlogs"


@pytest.mark.parametrize("pp", [1, 2])
def test_te_keeps_the_logits_in_bf16_on_the_loss_stage(pp: int) -> None:
    plans = {impl: ParallelPlan(tp=2, pp=pp, dp=8 // (2 * pp), micro_batch=2, sp=True, cross_entropy_fusion_impl=impl)
             for impl in ("native", "te")}
    mem = {impl: [stage_memory(MODEL, TRAINING, p, s) for s in range(pp)] for impl, p in plans.items()}
    logits = 2 * 4096 * split_padded(MODEL.vocab_size, 2)  # tokens x V/t of one micro-batch
    last = pp - 1
    saved = mem["native"][last].activations - mem["te"][last].activations
    assert saved == pytest.approx(2 * logits, rel=1e-12)  # 4 - 2 bytes per logit, one micro-batch at the peak
    for s in range(last):  # the stages without the loss are untouched
        assert mem["native"][s].activations == mem["te"][s].activations


def test_unknown_impl_is_refused() -> None:
    with pytest.raises(PlanError, match="cross_entropy_fusion_impl = 'triton' is unknown"):
        check_plan(MODEL, TRAINING, get_cluster("dgx-h100", 8), ParallelPlan(dp=8, cross_entropy_fusion_impl="triton"))  # type: ignore[arg-type]


def test_arguments_and_yaml_choose_it(tmp_path: Path) -> None:
    script = (DATA / "megatron_llama3_8b.sh").read_text()
    p = tmp_path / "a.sh"
    p.write_text(script.replace("--bf16", "--bf16 --cross-entropy-loss-fusion --cross-entropy-fusion-impl te"))
    assert read_job(p).plan["cross_entropy_fusion_impl"] == "te"
    p.write_text(script.replace("--bf16", "--bf16 --cross-entropy-fusion-impl te"))  # no fusion: the impl is unused
    assert "cross_entropy_fusion_impl" not in read_job(p).plan
    y = tmp_path / "b.yaml"
    y.write_text((DATA / "bridge_llama3_8b.yaml").read_text().replace("model:\n", "model:\n  cross_entropy_fusion_impl: te\n", 1))
    assert read_job(y).plan["cross_entropy_fusion_impl"] == "te"  # Bridge providers fuse by default
    assert ParallelPlan(cross_entropy_fusion_impl="te").describe().endswith("ce-te")
