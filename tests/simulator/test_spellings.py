"""Tests of clustersim.simulator.calibration.spellings: one case per spelling of each table, the
refusals, and the framework batch semantics worked by hand."""

from __future__ import annotations

import pytest

from clustersim.simulator.calibration.spellings import (
    Sharding, UnknownSpelling, batch_from_config, nic_gbps_per_gpu, precision_label, sharding,
)


@pytest.mark.parametrize(("text", "label"), [
    ("NVFP4", "nvfp4"), ("nvfp4", "nvfp4"), ("MXFP8", "mxfp8"), ("FP8-MX", "mxfp8"), ("FP8-CS (FP8-MX)", "mxfp8"),
    ("fp8", "fp8"), ("FP8", "fp8"), ("float8", "fp8"), ("fp8_e4m3", "fp8"), ("fp8-delayed", "fp8"), ("FP8-CS", "fp8"),
    ("amp_fp8 (MP mode DEFAULT)", "fp8"), ("fp8 (hybrid, Transformer Engine)", "fp8"), ("bf16", "bf16"),
    ("BF16", "bf16"), ("bfloat16", "bf16"), ("amp_bf16 (MP mode DEFAULT)", "bf16"), ("bf16-mixed", "bf16"),
    ("fp16/bf16 mixed (not specified)", "bf16"), ("fp16", "fp16"), ("float16", "fp16"), ("16-mixed half", "fp16"),
    ("fp32", "fp32"), ("tf32", "fp32"),
])
def test_precision_spelling(text: str, label: str) -> None:
    assert precision_label(text) == label


def test_unknown_precision_names_the_value() -> None:
    with pytest.raises(UnknownSpelling, match="'int4-awq'"):
        precision_label("int4-awq")


@pytest.mark.parametrize(("text", "want"), [
    ("FSDP FULL_SHARD (ZeRO-3-like: params+grads+optimizer sharded)", Sharding(fsdp="full")),
    ("fully_shard", Sharding(fsdp="full")), ("FSDP2", Sharding(fsdp="full")), ("FSDP", Sharding(fsdp="full")),
    ("Megatron-FSDP (shard group = GPUs/(TP*PP))", Sharding(fsdp="full")), ("MaxText fsdp axis", Sharding(fsdp="full")),
    ("Paxml FSDP", Sharding(fsdp="full")),
    ("FSDP SHARD_GRAD_OP (ZeRO-2-like: grads+optimizer sharded)", Sharding(zero=2)), ("ZeRO-2", Sharding(zero=2)),
    ("DeepSpeed zero stage 2", Sharding(zero=2)), ("ZeRO-3 (no model parallelism)", Sharding(zero=3)),
    ("ZeRO-1", Sharding(zero=1)), ("distributed optimizer", Sharding(zero=1)),
    ("DDP + distributed optimizer (FSDP=0)", Sharding(zero=1)), ("--use-distributed-optimizer", Sharding(zero=1)),
    ("HYBRID_SHARD", Sharding(fsdp="hybrid", shard_within_node=True)),
    ("HSDP", Sharding(fsdp="hybrid", shard_within_node=True)),
    ("none (PTD-P)", Sharding()), ("NO_SHARD", Sharding()), ("DDP", Sharding()),
])
def test_sharding_spelling(text: str, want: Sharding) -> None:
    assert sharding(text) == want


@pytest.mark.parametrize(("text", "match"), [("tensor-sliced ring", "'tensor-sliced ring'")])
def test_sharding_refusals_name_the_value(text: str, match: str) -> None:
    with pytest.raises(UnknownSpelling, match=match):
        sharding(text)


@pytest.mark.parametrize(("text", "gpus_per_node", "gbps"), [
    ("InfiniBand HDR 200 Gb/s per HCA", 8, 200.0), ("InfiniBand 400 Gb/s compute links", 8, 400.0),
    ("RoCE, 1600 Gbps node-to-node (per section title)", 8, 200.0), ("EFA 3200 Gbps per instance", 8, 400.0),
    ("400 Gb/s per instance", 8, 50.0), ("8x 400 Gb/s NDR", 8, 400.0), ("3.2 Tbps per node", 8, 400.0),
    ("400 Gbps per GPU", 8, 400.0), ("InfiniBand NDR", 8, 400.0), ("InfiniBand HDR", 8, 200.0),
    ("HPE Slingshot-11", 4, 200.0), ("Omni-Path", 8, 100.0), ("RoCE 400 Gb/s per port", 8, 400.0),
    ("8x 200G RoCE", 8, 200.0), ("ConnectX-7 400G", 8, 400.0), ("400G NDR per GPU", 8, 400.0),
    ("50 GB/s per GPU", 8, 400.0), ("400 GB/s per node", 8, 400.0), ("1.6T per node", 8, 200.0),
])
def test_nic_spelling(text: str, gpus_per_node: int, gbps: float) -> None:
    assert nic_gbps_per_gpu(text, gpus_per_node)[0] == pytest.approx(gbps)


def test_unknown_nic_names_the_value() -> None:
    with pytest.raises(UnknownSpelling, match="'fast ethernet-ish'"):
        nic_gbps_per_gpu("fast ethernet-ish", 8)


def test_batch_semantics_by_framework() -> None:
    # torchtitan local_batch_size is per data-parallel rank: 8 x dp 64 = 512 sequences
    assert batch_from_config("torchtitan", {"local_batch_size": 8}, dp=64).global_batch == 512
    foundry = batch_from_config("llm-foundry", {"global_train_batch_size": 1024, "device_train_microbatch_size": 4}, dp=128)
    assert (foundry.global_batch, foundry.micro_batch) == (1024, 4)
    ds = batch_from_config("DeepSpeed", {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}, dp=16)
    assert (ds.global_batch, ds.micro_batch) == (128, 2)
    with pytest.raises(UnknownSpelling, match="train_batch_size"):
        batch_from_config("DeepSpeed", {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 100}, dp=16)
    with pytest.raises(UnknownSpelling, match="'jax-mystery'"):
        batch_from_config("jax-mystery", {}, dp=1)


def test_a_row_with_a_power_capped_gpu_is_simulated_slower_not_skipped() -> None:
    from clustersim.simulator.calibration.validate import load_runs, validate_row
    runs = load_runs()
    row = runs[(runs.source_id == "mosaicml-llmfoundry") & (runs.gpu_type == "H100")].iloc[-1].to_dict()
    full = validate_row(row)
    capped = validate_row({**row, "gpu_type": "H100 SXM5 450W"})
    assert full["status"] == capped["status"] == "ok"
    assert capped["predicted_step_time_s"] > full["predicted_step_time_s"]
    unknown = validate_row({**row, "gpu_type": "TPU v5p"})
    assert unknown["status"] == "skipped" and "'TPU v5p'" in unknown["reason"]
