"""Log parsers and job-configuration readers on excerpts in each framework's format
(tests/simulator/runlogs/, README there names each format's source)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from clustersim.simulator.calibration.jobargs import read_job
from clustersim.simulator.calibration.jobargs_megatron import megatron_argv
from clustersim.simulator.calibration.jobconfig import JobArgsError
from clustersim.simulator.calibration.runlog_records import RunLogError
from clustersim.simulator.calibration.runlogs import auto_warmup, detect_framework, parse_log, read_log, steady_state

DATA = Path(__file__).parent / "runlogs"


def megatron_times(path: Path) -> dict[int, float]:
    """Iteration -> seconds, read with a plain regex (an independent reading of the same lines)."""
    pat = re.compile(r"iteration\s+(\d+)/.*elapsed time per iteration \(ms\): ([0-9.]+)")
    return {int(m.group(1)): float(m.group(2)) / 1e3 for m in map(pat.search, path.read_text().splitlines()) if m}


def test_megatron_records_spans_marks_and_world() -> None:
    log = read_log(DATA / "megatron_llama3_8b.log")
    truth = megatron_times(DATA / "megatron_llama3_8b.log")
    assert log.framework == "megatron" and log.world_size == 16 and log.global_batch == 128
    assert {s.step: s.time_s for s in log.steps} == pytest.approx(truth)
    assert all(s.span == 10 for s in log.steps)  # --log-interval 10: each line averages 10 iterations
    marks = {s.step: s.marks for s in log.steps if s.marks}
    assert [k for k, m in marks.items() if "checkpoint" in m] == [110, 210]  # saves after 100, 200 fall in the next interval
    assert [k for k, m in marks.items() if "eval" in m] == [60, 110, 160, 210, 260]
    assert log.checkpoint_seconds == pytest.approx((41.30512,) * 3)  # saves after 100, 200, 300 (max over ranks)


def test_steady_state_drops_warmup_and_marked_records() -> None:
    log = read_log(DATA / "megatron_llama3_8b.log")
    truth = megatron_times(DATA / "megatron_llama3_8b.log")
    stats = steady_state(log)
    assert stats.warmup_steps == 10  # 14.3 s is more than 10% above the ~8.9 s steady median, 9.65 s is not
    kept = [t for k, t in truth.items() if k > 10 and k not in (60, 110, 160, 210, 260)]
    assert stats.records == len(kept)
    assert stats.median_s == pytest.approx(float(np.median(kept)))
    assert stats.p99_s == pytest.approx(float(np.percentile(kept, 99)))
    assert stats.p99_s >= stats.median_s
    assert steady_state(log, warmup=0).records == len(kept) + 1


def test_truncated_log_names_the_line() -> None:
    with pytest.raises(RunLogError, match=r"ends inside a record at line \d+"):
        read_log(DATA / "megatron_llama3_8b_truncated.log")


def test_nan_loss_is_marked_and_nan_time_refused() -> None:
    log = read_log(DATA / "megatron_llama3_8b_nan.log")
    assert [s.step for s in log.steps if "nan" in s.marks] == [150, 160]
    text = (DATA / "megatron_llama3_8b.log").read_text().replace("elapsed time per iteration (ms): 8", "elapsed time per iteration (ms): nan 8", 1)
    with pytest.raises(RunLogError, match="not a positive number"):
        parse_log(text, "x.log")


def test_nemo_progress_bar_keeps_one_record_per_step() -> None:
    log = read_log(DATA / "nemo_llama3_8b.log")
    assert log.framework == "nemo"
    assert [s.step for s in log.steps] == list(range(60))
    assert log.steps[0].time_s == pytest.approx(9.81)
    assert steady_state(log).median_s == pytest.approx(4.45, rel=0.01)


def test_torchtitan_step_time_is_tokens_over_tps() -> None:
    text = (DATA / "torchtitan_llama3_8b.log").read_text()
    log = parse_log(text, "t.log", tokens_per_gpu_step=8192.0)
    tps = [int(re.search(r"tps: ([0-9,]+)", line).group(1).replace(",", ""))  # type: ignore[union-attr]
           for line in text.splitlines() if "tps:" in line and "validate" not in line]
    assert [s.time_s for s in log.steps] == pytest.approx([8192.0 / t for t in tps])
    assert [s.step for s in log.steps if "checkpoint" in s.marks] == [60, 110, 160]
    assert [s.step for s in log.steps if "eval" in s.marks] == [110]
    assert log.checkpoint_seconds == (25.02,) * 4  # saves after 50, 100, 150, 200 (the last has no next record)
    with pytest.raises(RunLogError, match="tokens per GPU per step"):
        parse_log(text, "t.log")


def test_composer_secs_per_step_and_eval_blocks() -> None:
    log = read_log(DATA / "composer_mpt_7b.log")
    times = [float(x) for x in re.findall(r"secs_per_step: ([0-9.]+)", (DATA / "composer_mpt_7b.log").read_text())]
    assert [s.time_s for s in log.steps] == pytest.approx(times)
    assert [s.step for s in log.steps if "eval" in s.marks] == [21, 41]
    assert auto_warmup(log) == 2


def test_unknown_log_and_framework_are_named() -> None:
    with pytest.raises(RunLogError, match="no step lines of Megatron-LM"):
        parse_log("hello\nworld\n", "x.log")
    with pytest.raises(RunLogError, match="framework 'deepspeed' unknown"):
        parse_log("x\n", "x.log", framework="deepspeed")
    assert detect_framework((DATA / "torchtitan_llama3_8b.log").read_text()) == "torchtitan"


def test_megatron_arguments() -> None:
    job = read_job(DATA / "megatron_llama3_8b.sh")
    assert job.num_gpus == 16 and job.framework == "megatron"
    m = job.model
    assert isinstance(m, dict)
    assert (m["num_layers"], m["hidden_size"], m["num_kv_heads"], m["ffn_hidden_size"], m["vocab_size"]) == (32, 4096, 8, 14336, 128256)
    assert m["gated_mlp"] and m["norm"] == "rmsnorm" and not m["tied_embeddings"] and not m["linear_bias"]
    assert job.plan["tp"] == 2 and job.plan["sp"] and job.plan["zero"] == 1
    assert job.training == {"seq_len": 8192, "global_batch_size": 128, "precision": "bf16"}
    assert (job.checkpoint_interval, job.eval_interval) == (100, 50)
    assert "lr" in job.ignored and "tokenizer-type" in job.ignored  # named, not silently dropped


def test_megatron_defaults_are_noted_and_missing_fields_named(tmp_path: Path) -> None:
    args = megatron_argv("--num-layers 2 --hidden-size 960 --num-attention-heads 8 --seq-length 128 "
                         "--global-batch-size 8 --vocab-size 1000 --swiglu")
    assert args["swiglu"] is True and args["num-layers"] == "2"
    p = tmp_path / "a.sh"
    p.write_text("--num-layers 2 --hidden-size 960 --num-attention-heads 8 --seq-length 128 --global-batch-size 8 "
                 "--vocab-size 1000 --swiglu\n")
    job = read_job(p)
    assert job.model["ffn_hidden_size"] == int(4 * 960 * 2 / 3 / 64) * 64  # type: ignore[index]
    assert any("ffn_hidden_size" in n for n in job.notes) and any("fp32" in n for n in job.notes)
    # dropout: Megatron's 0.1 when not given (noted), the given value otherwise; the FP8 SwiGLU input store read
    assert (job.model["hidden_dropout"], job.model["attention_dropout"]) == (0.1, 0.1)  # type: ignore[index]
    assert any("hidden_dropout = 0.1: Megatron-LM's default" in n for n in job.notes)
    assert job.plan["activation_fp8_input_store"] is False
    p.write_text("--num-layers 2 --hidden-size 960 --num-attention-heads 8 --seq-length 128 --global-batch-size 8 "
                 "--vocab-size 1000 --swiglu --hidden-dropout 0.0 --attention-dropout 0 --activation-func-fp8-input-store\n")
    job = read_job(p)
    assert (job.model["hidden_dropout"], job.model["attention_dropout"]) == (0.0, 0.0)  # type: ignore[index]
    assert job.plan["activation_fp8_input_store"] is True
    assert not any("dropout" in n for n in job.notes)
    p.write_text("--num-layers 2 --hidden-size 960 --num-attention-heads 8 --seq-length 128 --global-batch-size 8 "
                 "--vocab-size 1000 --hidden-dropout none\n")
    with pytest.raises(JobArgsError, match="--hidden-dropout = 'none' is not a number"):
        read_job(p)
    p.write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 128 --global-batch-size 8\n")
    with pytest.raises(JobArgsError, match="vocab size not given"):
        read_job(p)
    p.write_text("--num-layers 2 --hidden-size 64\n")
    with pytest.raises(JobArgsError, match="missing --num-attention-heads, --seq-length, --global-batch-size"):
        read_job(p)


def test_nemo_bridge_torchtitan_composer_configs() -> None:
    nemo = read_job(DATA / "nemo_llama3_8b.yaml")
    assert nemo.num_gpus == 8 and nemo.plan["zero"] == 1 and nemo.training["precision"] == "bf16"
    assert nemo.model["gated_mlp"] and not nemo.model["linear_bias"]  # type: ignore[index]
    assert (nemo.checkpoint_interval, nemo.eval_interval) == (50, 50)
    # a YAML without dropout keys says nothing: the model default (0) with a note, not the command line's 0.1
    assert "hidden_dropout" not in nemo.model and any("hidden_dropout not given: 0" in n for n in nemo.notes)  # type: ignore[operator]
    bridge = read_job(DATA / "bridge_llama3_8b.yaml")
    assert bridge.plan["tp"] == 2 and bridge.plan["sp"] and bridge.num_gpus is None
    titan = read_job(DATA / "torchtitan_llama3_8b.toml")
    assert titan.model == "llama3-8b" and titan.plan["fsdp"] == "full" and titan.plan["recompute"] == "selective"
    assert titan.training["local_batch_size"] == 1 and titan.checkpoint_interval == 50 and titan.eval_interval == 100
    assert "job.description" in titan.ignored
    comp = read_job(DATA / "composer_mpt_7b.yaml")
    assert comp.model["hidden_size"] == 4096 and comp.model["ffn_hidden_size"] == 16384  # type: ignore[index]
    assert comp.plan == {"fsdp": "full", "zero": 0, "recompute": "none", "micro_batch": 8}
    assert (comp.eval_interval, comp.checkpoint_interval) == (20, 1000)


def test_a_yaml_dropout_key_is_read(tmp_path: Path) -> None:
    text = (DATA / "nemo_llama3_8b.yaml").read_text().replace("  bias: false\n", "  bias: false\n  hidden_dropout: 0.1\n"
                                                                "  attention_dropout: 0.05\n")
    (tmp_path / "nemo.yaml").write_text(text)
    job = read_job(tmp_path / "nemo.yaml")
    assert (job.model["hidden_dropout"], job.model["attention_dropout"]) == (0.1, 0.05)  # type: ignore[index]
    assert not any("dropout" in n for n in job.notes)


def test_bad_configs_are_named(tmp_path: Path) -> None:
    p = tmp_path / "j.toml"
    p.write_text("[model]\nname = 'llama3'\nflavor = '3B'\n[training]\nseq_len = 8\nlocal_batch_size = 1\n")
    with pytest.raises(JobArgsError, match="flavor = '3B' is not known"):
        read_job(p)
    p.write_text("[model\n")
    with pytest.raises(JobArgsError, match="is not valid TOML"):
        read_job(p)
    with pytest.raises(JobArgsError, match="does not exist"):
        read_job(tmp_path / "nope.sh")


def restart_log() -> str:
    """Megatron lines, 10 s per iteration, a crash after iteration 100, relaunch from the checkpoint of 50."""
    def line(it: int, clock: float) -> str:
        stamp = f"2025-06-01 {int(clock // 3600):02d}:{int(clock % 3600 // 60):02d}:{int(clock % 60):02d}.000000"
        return (f" [{stamp}] iteration {it:8d}/     200 | consumed samples: {it * 8:12d} | elapsed time per iteration (ms): "
                "10000.0 | global batch size:     8 | lm loss: 2.0E+00 | loss scale: 1.0 | number of skipped iterations:   0 |"
                " number of nan iterations:   0 |\n")
    text = "using world size: 8, data-parallel size: 8\n"
    text += "".join(line(it, 10.0 * it) for it in range(10, 101, 10))
    text += "using world size: 8, data-parallel size: 8\n"
    text += " successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 50\n"
    # the last record is at 1000 s; 1000 s of outage (crash, detection, relaunch, load), then 10 s per iteration from 50
    text += "".join(line(it, 2000.0 + 10.0 * (it - 50)) for it in range(60, 201, 10))
    return text


def test_restarts_give_goodput_inputs() -> None:
    from clustersim.simulator.calibration.runlogs import interruptions
    log = parse_log(restart_log(), "r.log")
    assert [s.step for s in log.steps if "restart" in s.marks] == [60]
    seen = interruptions(log)
    assert seen is not None and seen.count == 1 and seen.lost_steps == 100 - 50
    k = next(k for k, s in enumerate(log.steps) if "restart" in s.marks)
    assert (log.steps[k - 1].step, log.steps[k].span) == (100, 10)  # resumed from 50: the record covers 51-60
    assert seen.restart_s == pytest.approx(1000.0)
    assert seen.hours == pytest.approx((log.steps[-1].wall_s - log.steps[0].wall_s) / 3600)  # type: ignore[operator]
    assert seen.mtbf_hours == pytest.approx(seen.hours)
    assert steady_state(log).records == len(log.steps) - 1  # the restart record left out (no warm-up: every step 10 s)


def test_torchrun_rank_prefixes_and_interleaved_ranks() -> None:
    """``torchrun --role rank --tee 3`` prefixes every line with ``[rankN]:``; without
    --local-ranks-filter the ranks' lines interleave. One rank's records are read, the rest named."""
    text = (DATA / "torchtitan_llama3_8b.log").read_text()
    one = parse_log(text, "t.log", tokens_per_gpu_step=8192.0)
    lines = text.splitlines(keepends=True)
    interleaved = "".join(f"[rank{r}]:{line}" for line in lines for r in (1, 0, 2))
    log = parse_log(interleaved, "t.log", tokens_per_gpu_step=8192.0)
    assert [s.step for s in log.steps] == [s.step for s in one.steps]
    assert [s.time_s for s in log.steps] == pytest.approx([s.time_s for s in one.steps])
    assert not any("restart" in s.marks for s in log.steps)
    assert any("lines of rank 0 kept" in n and "ranks 0, 1, 2" in n for n in log.notes)
    composer = (DATA / "composer_mpt_7b.log").read_text()
    prefixed = parse_log("".join(f"[rank0]:{line}" for line in composer.splitlines(keepends=True)), "c.log")
    assert [s.time_s for s in prefixed.steps] == [s.time_s for s in read_log(DATA / "composer_mpt_7b.log").steps]


SUPER_FIELDS = ("num_layers", "layer_pattern", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "gated_mlp",
                "num_experts", "top_k", "moe_ffn_hidden_size", "num_shared_experts", "shared_expert_ffn_hidden_size",
                "moe_latent_size", "mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups",
                "mtp_layers", "mtp_layer_pattern", "mtp_shared_weights", "vocab_size")


def test_a_nemotron_3_super_command_line_gives_the_preset_shape(tmp_path: Path) -> None:
    # the flags Megatron-LM's hybrid converters pass for Super (--hybrid-override-pattern, --mamba-*, --moe-latent-size,
    # --moe-shared-expert-intermediate-size, --squared-relu, --mtp-num-layers, --mtp-use-repeated-layer, ...)
    from clustersim.workloads import ModelSpec, get_model

    want = get_model("nemotron-3-super")
    p = tmp_path / "super.sh"
    p.write_text(
        f"--num-layers 88 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 2 "
        f"--kv-channels 128 --ffn-hidden-size 2688 --vocab-size 131072 --normalization RMSNorm --squared-relu "
        f"--position-embedding-type none --untie-embeddings-and-output-weights --disable-bias-linear "
        f"--hybrid-override-pattern {want.layer_pattern} --mamba-num-heads 128 --mamba-head-dim 64 --mamba-state-dim 128 "
        f"--mamba-num-groups 8 --num-experts 512 --moe-router-topk 22 --moe-ffn-hidden-size 2688 "
        f"--moe-shared-expert-intermediate-size 5376 --moe-latent-size 1024 --mtp-num-layers 2 "
        f"--mtp-hybrid-override-pattern '*E' --mtp-use-repeated-layer --hidden-dropout 0 --attention-dropout 0 "
        f"--seq-length 8192 --global-batch-size 512\n")
    job = read_job(p)
    got = ModelSpec(**job.model)  # type: ignore[arg-type]
    assert {f: getattr(got, f) for f in SUPER_FIELDS} == {f: getattr(want, f) for f in SUPER_FIELDS}
    assert got.num_params() == want.num_params()
    assert not {"moe-latent-size", "hybrid-override-pattern", "mtp-use-repeated-layer", "squared-relu"} & set(job.ignored)
    # without --mamba-num-heads: Megatron-Core's d_inner = 2h, said in the notes
    p.write_text(p.read_text().replace("--mamba-num-heads 128 ", ""))
    job = read_job(p)
    assert job.model["mamba_num_heads"] == 2 * 4096 // 64 and any("mamba_num_heads" in n for n in job.notes)  # type: ignore[index]
