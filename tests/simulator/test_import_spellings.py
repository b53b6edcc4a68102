"""Job readers call issue 12's normalisers (``calibration/spellings.py``, ``normalise_gpu``,
``resolve_model_name``), so an imported job reads like a published row; unknown spellings are
errors naming the key; and ``clustersim goodput --run`` takes an imported run's measured step
time and the interruptions its log saw.

Argument names: Megatron-LM ``megatron/training/arguments.py`` (``--fp8-format``, ``--fp8-recipe``,
``--fp4-format``, ``--use-torch-fsdp2``); NeMo ``trainer.precision`` (PyTorch Lightning spellings);
Megatron-Bridge ``mixed_precision`` recipe names (``bf16_with_fp8_current_scaling_mixed``, ...);
torchtitan ``[model] converters`` (``float8``, ``mx``) and its ``CUDA capacity: <name> with
<x>GiB memory`` line (``torchtitan/components/metrics.py::build_device_memory_monitor``);
llm-foundry ``precision`` and ``fsdp_config.sharding_strategy``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clustersim.simulator.calibration.imported_runs import import_run, load_run, measured_long_run
from clustersim.simulator.calibration.jobargs import read_job
from clustersim.simulator.calibration.jobconfig import JobArgsError
from clustersim.simulator.calibration.spellings import precision_label

DATA = Path(__file__).parent / "runlogs"
MEGATRON = (DATA / "megatron_llama3_8b.sh").read_text()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("spelled,label", [("16-mixed", "fp16"), ("16", "fp16"), ("16-true", "fp16"),
                                           ("32", "fp32"), ("32-true", "fp32"), ("bf16-mixed", "bf16")])
def test_lightning_precision_spellings(spelled: str, label: str) -> None:
    assert precision_label(spelled) == label


@pytest.mark.parametrize("extra,precision,note", [
    ("--fp8-format hybrid", "fp8", None),
    ("--fp8-format e4m3 --fp8-recipe mxfp8", "fp8", "mxfp8, simulated as fp8"),
])
def test_megatron_fp8_arguments(tmp_path: Path, extra: str, precision: str, note: str | None) -> None:
    p = tmp_path / "job.sh"
    p.write_text(MEGATRON.replace("--bf16", f"--bf16 {extra}"))
    job = read_job(p)
    assert job.training["precision"] == precision
    assert note is None or any(note in n for n in job.notes)
    assert "fp8-recipe" not in job.ignored and "fp8-format" not in job.ignored


def test_megatron_fp4_and_fsdp2(tmp_path: Path) -> None:
    p = tmp_path / "job.sh"
    p.write_text(MEGATRON.replace("--bf16", "--bf16 --fp4-format e2m1"))
    with pytest.raises(JobArgsError, match="--fp4-format = 'fp4 e2m1' is NVFP4 training"):
        read_job(p)
    p.write_text(MEGATRON.replace("--use-distributed-optimizer", "--use-torch-fsdp2"))
    job = read_job(p)
    assert (job.plan["fsdp"], job.plan["zero"]) == ("full", 0)


@pytest.mark.parametrize("value,precision", [("16-mixed", "bf16"), ("32", "fp32"), ("bf16-mixed", "bf16")])
def test_nemo_trainer_precision(tmp_path: Path, value: str, precision: str) -> None:
    data = yaml.safe_load((DATA / "nemo_llama3_8b.yaml").read_text())
    data["trainer"]["precision"] = value
    p = tmp_path / "nemo.yaml"
    p.write_text(yaml.safe_dump(data))
    assert read_job(p).training["precision"] == precision  # fp16 has the BF16 peak (spellings.TRAINING_PRECISION)
    data["trainer"]["precision"] = "int8-weights"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(JobArgsError, match="trainer.precision = 'int8-weights' is not a known precision spelling"):
        read_job(p)


@pytest.mark.parametrize("recipe,precision", [("bf16_mixed", "bf16"), ("bf16_with_fp8_current_scaling_mixed", "fp8"),
                                              ("bf16_with_mxfp8_mixed", "fp8")])
def test_bridge_mixed_precision_recipes(tmp_path: Path, recipe: str, precision: str) -> None:
    data = yaml.safe_load((DATA / "bridge_llama3_8b.yaml").read_text())
    del data["model"]["bf16"]
    data["mixed_precision"] = recipe
    p = tmp_path / "bridge.yaml"
    p.write_text(yaml.safe_dump(data))
    assert read_job(p).training["precision"] == precision


@pytest.mark.parametrize("converters,precision", [(["float8"], "fp8"), (["mx"], "fp8"), ([], "bf16")])
def test_torchtitan_converters(tmp_path: Path, converters: list[str], precision: str) -> None:
    text = (DATA / "torchtitan_llama3_8b.toml").read_text()
    conv = "converters = [" + ", ".join(f'"{c}"' for c in converters) + "]\n"
    p = tmp_path / "t.toml"
    p.write_text(text.replace('flavor = "8B"\n', f'flavor = "8B"\n{conv}'))
    job = read_job(p)
    assert job.training["precision"] == precision and "model.converters" not in job.ignored


def test_composer_spellings_and_hsdp(tmp_path: Path) -> None:
    data = yaml.safe_load((DATA / "composer_mpt_7b.yaml").read_text())
    data["fsdp_config"]["sharding_strategy"] = "HYBRID_SHARD"
    data["precision"] = "amp_fp8"
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    job = read_job(p)
    assert (job.plan["fsdp"], job.shard_within_node, job.training["precision"]) == ("hybrid", True, "fp8")
    run, sc = import_run(p, DATA / "composer_mpt_7b.log", cluster={"preset": "dgx-h100"}, gpus=16)
    assert sc.plan.fsdp == "hybrid" and sc.plan.dp_shard == 8  # one node of the cluster, as validate_rules reads HSDP
    data["fsdp_config"]["sharding_strategy"] = "ZeRO++"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(JobArgsError, match="sharding_strategy = 'ZeRO\\+\\+': ZeRO\\+\\+ is read from published rows only"):
        read_job(p)
    data["fsdp_config"]["sharding_strategy"] = "FULL_SHARD"
    data["precision"] = "amp_int4"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(JobArgsError, match="precision = 'amp_int4' is not a known precision spelling"):
        read_job(p)


def titan_log_on(gpu: str) -> str:
    text = (DATA / "torchtitan_llama3_8b.log").read_text()
    first, rest = text.split("\n", 1)
    return f"{first}\n[titan] 2025-06-01 12:00:02,000 - root - INFO - CUDA capacity: {gpu} with 79.11GiB memory\n{rest}"


def test_torchtitan_gpu_name_is_checked_against_the_cluster(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    log.write_text(titan_log_on("NVIDIA H100 80GB HBM3"))
    out = tmp_path / "ok"
    p = cli("import-run", str(DATA / "torchtitan_llama3_8b.toml"), str(log), "--cluster", "dgx-h100", "--gpus", "8",
            "--out", str(out), "--no-predict")
    assert p.returncode == 0, p.stderr
    log.write_text(titan_log_on("NVIDIA A100-SXM4-80GB"))
    bad = tmp_path / "bad"
    p = cli("import-run", str(DATA / "torchtitan_llama3_8b.toml"), str(log), "--cluster", "dgx-h100", "--gpus", "8",
            "--out", str(bad), "--no-predict")
    assert p.returncode == 2 and "ran on 'NVIDIA A100-SXM4-80GB' (a100)" in p.stderr and "Traceback" not in p.stderr
    assert not bad.exists()


def restart_job(tmp_path: Path) -> tuple[Path, Path]:
    """Megatron arguments for 8 GPUs, global batch 8, and a log of 10 s iterations with one crash
    after iteration 100 and a relaunch from the checkpoint of 50 after 1000 s (tests/simulator/test_runlogs.py)."""
    from tests.simulator.test_runlogs import restart_log
    args = tmp_path / "job.sh"
    args.write_text(MEGATRON.replace("--nnodes 2", "--nnodes 1").replace("--global-batch-size 128", "--global-batch-size 8")
                    .replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 1"))
    log = tmp_path / "restart.log"
    log.write_text(restart_log())
    return args, log


def test_goodput_reads_the_imported_run(tmp_path: Path) -> None:
    args, log = restart_job(tmp_path)
    out = tmp_path / "run"
    p = cli("import-run", str(args), str(log), "--cluster", "dgx-h100", "--out", str(out), "--no-predict",
            "--set", "plan.recompute=full")  # 8k tokens at tp1 fit only with full recompute
    assert p.returncode == 0, p.stderr
    assert f"--run {out}" in " ".join(p.stdout.split())
    doc, scenario = load_run(out)
    seen = measured_long_run(out)
    assert seen.step_time_s == pytest.approx(10.0) and seen.restart_min == pytest.approx(1000.0 / 60)
    assert seen.mtbf_hours == pytest.approx(doc["longrun"]["hours"])
    g = cli("goodput", str(scenario), "--run", str(out), "--days", "2", "--repetitions", "20", "--json", str(tmp_path / "g.json"))
    assert g.returncode == 0, g.stdout + g.stderr
    res = json.loads((tmp_path / "g.json").read_text())
    assert res["step_time_s"] == pytest.approx(10.0)
    assert res["result"]["system_mtbf_s"] == pytest.approx(seen.mtbf_hours * 3600, rel=1e-6)  # type: ignore[operator]
    text = " ".join(g.stdout.split())
    assert "measured steady median" in text and "restart 16.7 min (detection included)" in text
    # an explicit option wins over the log's
    g2 = cli("goodput", str(scenario), "--run", str(out), "--days", "2", "--repetitions", "20", "--mtbf-hours", "50",
             "--restart-min", "10", "--json", str(tmp_path / "g2.json"))
    assert g2.returncode == 0 and "detection included" not in g2.stdout and json.loads((tmp_path / "g2.json").read_text())["result"]["system_mtbf_s"] == pytest.approx(50 * 3600)
    bad = cli("goodput", str(scenario), "--run", str(tmp_path / "nothing"))
    assert bad.returncode == 2 and "no run.json there" in bad.stderr and "Traceback" not in bad.stderr


def test_fp16_reads_alike_in_every_reader(tmp_path: Path) -> None:
    """Megatron --fp16 and NeMo 16-mixed both become the published rows' precision for FP16 (the BF16 peak), noted."""
    p = tmp_path / "job.sh"
    p.write_text(MEGATRON.replace("--bf16", "--fp16"))
    job = read_job(p)
    assert job.training["precision"] == "bf16" and any("fp16, simulated as bf16" in n for n in job.notes)
