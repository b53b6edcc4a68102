"""``clustersim import-run`` on each framework's excerpts, and its refusals: a truncated log, a log
with NaN steps, job arguments inconsistent with the cluster (exit 2, one line, nothing written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from clustersim.simulator.calibration.imported_runs import load_run, torch_run
from clustersim.simulator.profile import CalibrationProfile, save_profile
from clustersim.simulator.calibration.torch_backend.check import predict
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig, StepRecord
from clustersim.simulator.calibration.fit_logs import Run, predict as predict_run
from clustersim.simulator.scenario import load_scenario

DATA = Path(__file__).parent / "runlogs"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("job,log,extra,gpus,median", [
    ("megatron_llama3_8b.sh", "megatron_llama3_8b.log", [], 16, 8.8878),
    ("nemo_llama3_8b.yaml", "nemo_llama3_8b.log", [], 8, 4.45),
    ("bridge_llama3_8b.yaml", "megatron_llama3_8b.log", [], 16, 8.8878),
    ("torchtitan_llama3_8b.toml", "torchtitan_llama3_8b.log", ["--gpus", "8"], 8, 1.174),
    ("composer_mpt_7b.yaml", "composer_mpt_7b.log", ["--gpus", "8", "--no-predict"], 8, 6.5448),
])
def test_import_each_framework(tmp_path: Path, job: str, log: str, extra: list[str], gpus: int, median: float) -> None:
    out = tmp_path / "run"
    p = cli("import-run", str(DATA / job), str(DATA / log), "--cluster", "dgx-h100", "--out", str(out), *extra)
    assert p.returncode == 0, p.stderr
    doc, scenario = load_run(out)
    assert doc["num_gpus"] == gpus and doc["steady"]["median_s"] == pytest.approx(median, rel=2e-3)
    assert doc["steady"]["p99_s"] >= doc["steady"]["median_s"]
    sc = load_scenario(scenario)
    assert sc.cluster.num_gpus == gpus and sc.plan.dp * sc.plan.tp * sc.plan.pp * sc.plan.cp == gpus
    assert not list(out.glob(".*"))  # no temporary files left behind


@pytest.mark.parametrize("log,extra,needle", [
    ("megatron_llama3_8b_truncated.log", [], "ends inside a record at line"),
    ("megatron_llama3_8b_nan.log", [], "NaN loss or NaN iterations, first at step 150"),
    ("megatron_llama3_8b_world32.log", [], "GPU counts disagree"),
    ("megatron_llama3_8b.log", ["--cluster", "dgx-a100"], "above the 312 TFLOP/s bf16 peak"),
    ("megatron_llama3_8b.log", ["--gpus", "24"], "GPU counts disagree"),
])
def test_refusals_are_one_line_and_write_nothing(tmp_path: Path, log: str, extra: list[str], needle: str) -> None:
    out = tmp_path / "run"
    args = ["--cluster", "dgx-h100"] if "--cluster" not in extra else []
    p = cli("import-run", str(DATA / "megatron_llama3_8b.sh"), str(DATA / log), "--out", str(out), *args, *extra)
    assert p.returncode == 2, p.stdout + p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3  # one message (rich may wrap it)
    assert not out.exists()


def test_drop_nan_leaves_the_nan_records_out(tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = cli("import-run", str(DATA / "megatron_llama3_8b.sh"), str(DATA / "megatron_llama3_8b_nan.log"),
            "--cluster", "dgx-h100", "--out", str(out), "--drop-nan", "--no-predict")
    assert p.returncode == 0, p.stderr
    doc, _ = load_run(out)
    assert doc["marked"]["nan"] == [150, 160] and doc["steady"]["records"] == 24 - 1  # 160 is also an eval record


def test_indivisible_plan_is_named(tmp_path: Path) -> None:
    p = cli("import-run", str(DATA / "megatron_llama3_8b.sh"), str(DATA / "megatron_llama3_8b.log"), "--cluster", "dgx-h100",
            "--out", str(tmp_path / "r"), "--set", "plan.tp=3")
    assert p.returncode == 2 and "Traceback" not in p.stderr and not (tmp_path / "r").exists()


def test_torch_backend_run_is_the_check_prediction(tmp_path: Path) -> None:
    """The torch backend's record as an imported run predicts what ``calibrate check`` predicts: one code path."""
    profile = CalibrationProfile(machine={"peak_flops": 50e9, "memory_bandwidth": 20e9, "cores": 2.0, "ranks": 2.0,
                                          "link_bandwidth": 1e9, "link_latency": 1e-7})
    cfg = GPTConfig(num_layers=2, hidden_size=64, num_heads=4, seq_len=32, vocab_size=256)
    for plan in (BackendPlan(name="dp2-ddp", dp=2, global_batch=8),
                 BackendPlan(name="pp2-1f1b", pp=2, schedule="1f1b", data_parallel="none", global_batch=8, micro_batches=4)):
        rec = StepRecord(plan=plan, model=cfg, world_size=2, backend="gloo", device="cpu", step_times=(0.03, 0.031, 0.029))
        run = torch_run(rec, "profile.yaml")
        folder = tmp_path / plan.name
        folder.mkdir()
        save_profile(profile, folder / "profile.yaml")
        (folder / "scenario.yaml").write_text(yaml.safe_dump(run.scenario))
        sc = load_scenario(folder / "scenario.yaml")
        r = Run(name=run.name, family=run.family, scenario=sc, base=sc.profile, measured_s=run.stats.median_s)  # type: ignore[arg-type]
        assert predict_run(r, 1.0, 1.0, {}) == pytest.approx(predict(rec, profile), rel=1e-12)
        assert run.stats.median_s == pytest.approx(0.03) and run.family == {"dp2-ddp": "ddp", "pp2-1f1b": "pp"}[plan.name]
    assert json.dumps(run.to_json())  # serialisable
    assert np.isfinite(run.stats.p99_s)


def test_torchtitan_without_a_gpu_count_is_named(tmp_path: Path) -> None:
    p = cli("import-run", str(DATA / "torchtitan_llama3_8b.toml"), str(DATA / "torchtitan_llama3_8b.log"),
            "--cluster", "dgx-h100", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "pass --gpus N" in p.stderr and not (tmp_path / "r").exists()


def _cut_inside_last_record(text: str, needle: str) -> str:
    """The log cut a few characters into the value after the last ``needle`` (no final newline)."""
    at = text.rindex(needle) + len(needle) + 2
    return text[:at]


@pytest.mark.parametrize("job,log,extra,cut,nan", [
    ("nemo_llama3_8b.yaml", "nemo_llama3_8b.log", [], "train_step_timing in s=", ("reduced_train_loss=9.206", "reduced_train_loss=nan")),
    ("torchtitan_llama3_8b.toml", "torchtitan_llama3_8b.log", ["--gpus", "8"], "tflops: ", ("loss:  8.5638", "loss:     nan")),
    ("composer_mpt_7b.yaml", "composer_mpt_7b.log", ["--gpus", "8", "--no-predict"], "Train time/secs_per_step: ",
     ("Train loss/train/total: 9.3148", "Train loss/train/total: nan")),
])
def test_truncated_and_nan_logs_of_every_framework(tmp_path: Path, job: str, log: str, extra: list[str], cut: str,
                                                   nan: tuple[str, str]) -> None:
    """Each framework's log cut inside its last record, and with one NaN loss: exit 2, one line, nothing written."""
    text = (DATA / log).read_text()
    assert nan[0] in text
    for name, body, needle in (("cut", _cut_inside_last_record(text, cut), "ends inside a record at line"),
                               ("nan", text.replace(nan[0], nan[1], 1), "NaN loss or NaN iterations")):
        path = tmp_path / f"{name}.log"
        path.write_text(body)
        out = tmp_path / name
        p = cli("import-run", str(DATA / job), str(path), "--cluster", "dgx-h100", "--out", str(out), *extra)
        assert p.returncode == 2, p.stdout + p.stderr
        assert needle in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 3
        assert not out.exists()
