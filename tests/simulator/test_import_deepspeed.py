"""Megatron-DeepSpeed jobs (``calibration.jobargs_deepspeed``): the DeepSpeed JSON a command line names
sets the ZeRO stage, ZeRO++'s switches, the gradient dtype and the precision; its batch fields must
agree with Megatron's; offload and unreadable files are refused with the file and the key."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from clustersim.simulator.calibration.imported_runs import import_run
from clustersim.simulator.calibration.jobargs import read_job
from clustersim.simulator.calibration.jobconfig import JobArgsError

DATA = Path(__file__).parent / "runlogs"
SCRIPT, CONFIG = "megatron_deepspeed_zeropp.sh", "megatron_deepspeed_zeropp.json"


def _job(tmp_path: Path, edit: dict[str, object] | None = None, zero: dict[str, object] | None = None,
         script: str | None = None) -> Path:
    shutil.copy(DATA / SCRIPT, tmp_path / SCRIPT)
    cfg = json.loads((DATA / CONFIG).read_text())
    cfg.update(edit or {})
    cfg["zero_optimization"].update(zero or {})
    (tmp_path / CONFIG).write_text(json.dumps(cfg))
    if script is not None:
        (tmp_path / SCRIPT).write_text(script)
    return tmp_path / SCRIPT


def test_the_json_sets_zero3_and_zeropp() -> None:
    job = read_job(DATA / SCRIPT)
    p = job.plan
    assert (p["zero"], p["param_gather_unit"], p["overlap_param_gather"], p["grad_dtype_bytes"]) == (3, "module", True, 2)
    assert (p["zero_quantized_weights"], p["zero_hpz_partition_size"], p["zero_quantized_gradients"]) == (True, 8, True)
    assert p["recompute"] == "full" and job.num_gpus == 16 and job.training["precision"] == "bf16"
    assert "deepspeed_config" not in job.ignored and "zero-stage" not in job.ignored


def test_import_run_simulates_the_zeropp_plan() -> None:
    run, sc = import_run(DATA / SCRIPT, DATA / "megatron_llama3_8b.log", cluster={"preset": "dgx-h100"})
    assert sc.plan.describe().endswith("zero3 qwZ hpZ8 qgZ") and sc.plan.dp == 16


@pytest.mark.parametrize(("zero", "want"), [({"stage": 2}, (2, False)), ({"stage": 3, "overlap_comm": False}, (3, False)),
                                            ({"stage": 1, "overlap_comm": True}, (1, True))])
def test_overlap_comm_defaults_to_the_stage(tmp_path: Path, zero: dict[str, object], want: tuple[int, bool]) -> None:
    z = {k: v for k, v in json.loads((DATA / CONFIG).read_text())["zero_optimization"].items()
         if not k.startswith("zero_") and k != "overlap_comm"}
    cfg = {"train_batch_size": 128, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
           "zero_optimization": {**z, **zero}}
    shutil.copy(DATA / SCRIPT, tmp_path / SCRIPT)
    (tmp_path / CONFIG).write_text(json.dumps(cfg))
    p = read_job(tmp_path / SCRIPT).plan
    assert (p["zero"], p["overlap_grad_reduce"]) == want
    if zero["stage"] in (1, 2):
        assert p["bucket_size"] == 10_000_000 * 2  # reduce_bucket_size elements x bf16 gradients


def test_fp32_communication_keeps_fp32_gradients(tmp_path: Path) -> None:
    assert read_job(_job(tmp_path, {"communication_data_type": "fp32"})).plan["grad_dtype_bytes"] == 4


@pytest.mark.parametrize(("edit", "zero", "match"), [
    ({"train_batch_size": 256}, None, "train_batch_size = 256 but --global-batch-size = 128"),
    ({"train_micro_batch_size_per_gpu": 2}, None, "train_micro_batch_size_per_gpu = 2 but --micro-batch-size = 1"),
    (None, {"offload_optimizer": {"device": "cpu"}}, "offload_optimizer.device = 'cpu': ZeRO-Offload"),
    (None, {"stage": 4}, "zero_optimization.stage = 4 must be 0, 1, 2 or 3"),
    (None, {"zero_hpz_partition_size": "eight"}, "zero_optimization.zero_hpz_partition_size = 'eight' must be an integer"),
])
def test_refusals_name_the_file_and_key(tmp_path: Path, edit: dict[str, object] | None, zero: dict[str, object] | None,
                                        match: str) -> None:
    with pytest.raises(JobArgsError, match=match):
        read_job(_job(tmp_path, edit, zero))


def test_missing_or_broken_json(tmp_path: Path) -> None:
    job = _job(tmp_path)
    (tmp_path / CONFIG).unlink()
    with pytest.raises(JobArgsError, match="--deepspeed_config .* does not exist"):
        read_job(job)
    (tmp_path / CONFIG).write_text("{not json")
    with pytest.raises(JobArgsError, match="is not readable JSON"):
        read_job(job)
    text = (DATA / SCRIPT).read_text().replace("--deepspeed_config megatron_deepspeed_zeropp.json", "")
    with pytest.raises(JobArgsError, match="--deepspeed without --deepspeed_config"):
        read_job(_job(tmp_path, script=text))


def test_precision_from_the_json_when_the_command_line_gives_none(tmp_path: Path) -> None:
    text = (DATA / SCRIPT).read_text().replace("--position-embedding-type rope --bf16", "--position-embedding-type rope")
    job = read_job(_job(tmp_path, script=text))
    assert job.training["precision"] == "bf16" and any("bf16.enabled" in n or "bf16 from" in n for n in job.notes)


def test_zeropp_keys_below_stage_3_are_noted_unused(tmp_path: Path) -> None:
    job = read_job(_job(tmp_path, zero={"stage": 1}))
    assert job.plan["zero"] == 1 and "zero_quantized_weights" not in job.plan
    assert sum("not used: ZeRO++ extends stage 3" in n for n in job.notes) == 3


def test_auto_values_are_not_checked(tmp_path: Path) -> None:
    # "auto" (the HF Trainer integration's placeholder) is filled from the launcher's arguments
    job = read_job(_job(tmp_path, {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"},
                        {"stage": 2, "reduce_bucket_size": "auto"}))
    assert job.plan["zero"] == 2 and "bucket_size" not in job.plan


def _deepspeed_line(match: "re.Match[str]") -> str:
    """A Megatron-LM iteration line in Megatron-DeepSpeed's ``training_log`` layout: no ``throughput per
    GPU`` field, ``actual seqlen`` before the skipped count, ``samples per second`` and ``TFLOPs`` at the end."""
    line = match.group(0)
    ms = float(re.search(r"elapsed time per iteration \(ms\): ([\d.]+)", line).group(1))  # type: ignore[union-attr]
    tf = re.search(r" throughput per GPU \(TFLOP/s/GPU\): ([\d.]+) \|", line)
    assert tf is not None
    line = line.replace(tf.group(0), "").replace(" number of skipped", " actual seqlen:  8192 | number of skipped")
    return line.rstrip() + f" samples per second: {128 / (ms / 1000):.3f} | TFLOPs: {float(tf.group(1)):.2f} |"


def test_a_megatron_deepspeed_log_reads_like_megatrons(tmp_path: Path) -> None:
    text = (DATA / "megatron_llama3_8b.log").read_text()
    log = tmp_path / "ds.log"
    log.write_text(re.sub(r"^ \[[^\n]*iteration[^\n]*$", _deepspeed_line, text, flags=re.M))
    ds_run, _ = import_run(DATA / SCRIPT, log, cluster={"preset": "dgx-h100"})
    lm_run, _ = import_run(DATA / SCRIPT, DATA / "megatron_llama3_8b.log", cluster={"preset": "dgx-h100"})
    assert ds_run.stats.median_s == pytest.approx(lm_run.stats.median_s) and ds_run.stats.median_s > 0
    assert ds_run.stats.records == lm_run.stats.records
