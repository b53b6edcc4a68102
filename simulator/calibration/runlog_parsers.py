"""Training logs of real jobs -> records: one parser per framework's own step line.

Owns reading the per-step lines the frameworks print themselves and marking checkpoint,
evaluation, NaN and restart steps. Each parser follows the framework's own logging code:

- Megatron-LM (and NeMo 2 / Megatron-Bridge, which print the same line):
  ``megatron/training/training.py::training_log`` (NVIDIA/Megatron-LM, commit 001b00c2, 2025):
  ``[date] iteration N/ M | consumed samples: ... | elapsed time per iteration (ms): X |
  throughput per GPU (TFLOP/s/GPU): Y | ... | lm loss: L | ... | number of skipped iterations: k |
  number of nan iterations: k |``. X is the mean over the ``--log-interval`` iterations since the
  previous line; checkpoint saves are excluded from it (``save_checkpoint_and_time`` stops the
  interval timer). Checkpoints: ``saving checkpoint at iteration N`` / ``successfully saved
  checkpoint from iteration N`` (megatron/training/checkpointing.py); evaluation:
  ``validation loss at iteration N``; world size: ``using world size: N`` (arguments.py);
  restarts: a second start-up banner or ``successfully loaded checkpoint from ... at iteration N``
  after steps were logged (the iteration count resumes from N).
- NeMo 1.x (PyTorch Lightning progress bar, e.g. NeMo's llm benchmark recipes):
  ``... global_step=50.0, consumed_samples=..., train_step_timing in s=5.900 ...``.
- torchtitan: ``torchtitan/components/metrics.py::MetricsProcessor.log`` (pytorch/torchtitan,
  commit 00fbaafa, 2025): ``step: N  loss: L  grad_norm: G  memory: M GiB(P%)  tps: T  tflops: F
  mfu: U%`` with ANSI colours; ``tps`` is tokens per second per device over the ``log_freq``
  steps since the previous line, so the step time is (tokens per device per step) / tps, which
  needs the job's batch (``tokens_per_gpu_step``). Validation: ``validate step: N``;
  checkpoints: ``Finished saving the checkpoint ... in S seconds`` (components/checkpoint.py),
  counted in the interval of the next line. The GPU: ``CUDA capacity: NVIDIA H100 80GB HBM3 with
  79.11GiB memory`` (``metrics.py::build_device_memory_monitor``, ``torch.cuda.get_device_name``).
- Composer / llm-foundry: ``composer/loggers/console_logger.py::log_to_console`` (mosaicml/composer,
  commit 02c872e4) prints ``[batch=N/M]:`` then ``\\t Train <name>: <value>`` lines; the step time
  is ``time/secs_per_step`` (``callbacks/speed_monitor.py``, commit 003ec03f: the wall time of
  the last batch) or else 1 / ``throughput/batches_per_sec`` (a rolling mean over
  ``window_size`` batches). Evaluation blocks start with ``[Eval batch=``.

A field the parser needs and cannot find is an error naming it; nothing is guessed. It does not
detect the framework, strip torchrun's rank prefixes nor summarise the steady state (``runlogs``).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from dataclasses import replace

from clustersim.simulator.calibration.runlog_records import LogStep, RunLog, RunLogError

ANSI = re.compile(r"\x1b\[[0-9;]*m")
MEGATRON_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
MEGATRON_KEYS = ("elapsed time per iteration (ms)", "number of nan iterations")
"""Fields every Megatron ``training_log`` line has (the last one closes the line)."""
NEMO_STEP = re.compile(r"global_step=([0-9.]+)")
NEMO_TIME = re.compile(r"train_step_timing in s=([0-9.]+|nan|inf)")
NEMO_LOSS = re.compile(r"reduced_train_loss=([0-9.eE+-]+|nan|inf)")
TITAN_STEP = re.compile(
    r"(?<!validate )step:\s*(\d+)\s+loss:\s*(\S+)\s+(?:grad_norm:\s*\S+\s+)?memory:\s*[0-9.]+GiB\([0-9.]+%\)\s+"
    r"tps:\s*([0-9,]+|nan)\s+tflops:\s*([0-9,.]+|nan)\s+mfu:\s*([0-9.]+|nan)%")
TITAN_PARTIAL = re.compile(r"(?<!validate )step:\s*\d+\s+loss:")
COMPOSER_BATCH = re.compile(r"^\[(?:epoch=\d+\])?\[?batch=(\d+)(?:/(\d+))?\]:?\s*$")
COMPOSER_FIELD = re.compile(r"^\s*Train ([\w/.-]+):\s*(\S+)\s*$")
CHECKPOINT_PATTERNS = {
    "megatron": re.compile(r"(?:saving checkpoint at iteration|successfully saved checkpoint from iteration)\s+(\d+)"),
    "nemo": re.compile(r"saving checkpoint at iteration\s+(\d+)"),
}
EVAL_PATTERN = re.compile(r"validation loss at iteration\s+(\d+)")
WORLD_PATTERN = re.compile(r"using world size:\s*(\d+)")
LOADED_PATTERN = re.compile(r"successfully loaded checkpoint from .* at iteration\s+(\d+)")
STAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})")
TITAN_DEVICE = re.compile(r"(?:CUDA|GPU|ROCM) capacity:\s*(.+?)(?:\s+\(\d+\))?\s+with\s+[0-9.]+GiB memory")
TITAN_CKPT = re.compile(r"Finished saving the checkpoint.*?in\s+([0-9.]+)\s+seconds")


def _stamp(line: str) -> float | None:
    """POSIX seconds of the first ``YYYY-MM-DD HH:MM:SS`` in a line (Megatron, torchtitan prefixes)."""
    m = STAMP.search(line)
    if not m:
        return None
    when = datetime.strptime(m.group(1).replace("T", " "), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return when.timestamp()


def _number(raw: str) -> float:
    return float(raw.replace(",", ""))


def _fields(rest: str) -> dict[str, str]:
    """``key: value |`` pairs of a Megatron line."""
    out: dict[str, str] = {}
    for part in rest.split("|"):
        key, sep, value = part.rpartition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def _truncated(where: str, line_no: int, text: str) -> RunLogError:
    return RunLogError(f"log {where} ends inside a record at line {line_no} ({text.strip()[:60]!r}...): "
                       "the file was cut or the job is still writing it; wait for the line to finish, or "
                       "cut the log before that line")


def _bad_time(where: str, line_no: int, step: int, raw: str, name: str) -> RunLogError:
    return RunLogError(f"log {where} line {line_no}: step {step} has {name} = {raw!r}, not a positive number; "
                       "a NaN/inf time means the timer broke there: cut the log before that line")


def _time(where: str, line_no: int, step: int, raw: str, name: str, scale: float = 1.0) -> float:
    try:
        value = _number(raw) * scale
    except ValueError:
        raise _bad_time(where, line_no, step, raw, name) from None
    if not math.isfinite(value) or value <= 0:
        raise _bad_time(where, line_no, step, raw, name)
    return value


def _loss(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return float("nan")


def _nan_marks(loss: float | None, nan_iters: int = 0, skipped: int = 0) -> tuple[str, ...]:
    marks = ("nan",) if (loss is not None and not math.isfinite(loss)) or nan_iters > 0 else ()
    return marks + (("skipped",) if skipped > 0 else ())


def parse_megatron(text: str, where: str = "<log>") -> RunLog:
    """Megatron-LM / NeMo 2 / Megatron-Bridge ``training_log`` lines (see the module docstring)."""
    lines = text.splitlines()
    steps: list[LogStep] = []
    ckpt: set[int] = set()
    evals: set[int] = set()
    seconds: list[float] = []
    world: int | None = None
    batch: int | None = None
    prev, restarted = 0, False
    for i, line in enumerate(lines, start=1):
        if m := WORLD_PATTERN.search(line):
            world = int(m.group(1)) if world is None else world
            restarted = restarted or bool(steps)  # a second start-up banner: the job was relaunched
        if (m := LOADED_PATTERN.search(line)) and steps:
            prev, restarted = int(m.group(1)), True
        if m := CHECKPOINT_PATTERNS["megatron"].search(line):
            ckpt.add(int(m.group(1)))
        if m := EVAL_PATTERN.search(line):
            evals.add(int(m.group(1)))
        if m := re.search(r"save-checkpoint\s*\.*:\s*\(([0-9.]+),\s*([0-9.]+)\)", line):
            seconds.append(float(m.group(2)) / 1e3)
        m = MEGATRON_ITER.search(line)
        if not m:
            continue
        it, values = int(m.group(1)), _fields(m.group(3))
        missing = [k for k in MEGATRON_KEYS if k not in values]
        if missing and i == len(lines) and not text.endswith("\n"):
            raise _truncated(where, i, line)
        if "elapsed time per iteration (ms)" not in values:
            raise RunLogError(f"log {where} line {i}: iteration {it} lacks 'elapsed time per iteration (ms)'; "
                              "is this a Megatron-LM training_log line?")
        t = _time(where, i, it, values["elapsed time per iteration (ms)"], "elapsed time per iteration (ms)", 1e-3)
        if "global batch size" in values:
            batch = int(_number(values["global batch size"]))
        loss = _loss(values.get("lm loss"))
        marks = _nan_marks(loss, int(_number(values.get("number of nan iterations", "0"))),
                           int(_number(values.get("number of skipped iterations", "0"))))
        span = it - prev
        if span <= 0 or restarted:
            marks, span, restarted = marks + ("restart",), span if span > 0 else 1, False
        tput = values.get("throughput per GPU (TFLOP/s/GPU)")
        steps.append(LogStep(step=it, time_s=t, span=span, line=i, loss=loss, marks=marks, wall_s=_stamp(line),
                             tflops_per_gpu=_number(tput) if tput else None))
        prev = it
    steps = _mark(steps, ckpt, "checkpoint")
    return RunLog(framework="megatron", source=where, steps=tuple(_mark(steps, evals, "eval")),
                  world_size=world, global_batch=batch, checkpoint_seconds=tuple(seconds),
                  notes=("elapsed time per iteration is Megatron's mean over each --log-interval; "
                         "checkpoint saves are excluded from it by Megatron itself",))


def _mark(steps: list[LogStep], at: set[int], mark: str) -> list[LogStep]:
    """Add ``mark`` to the record whose interval an event after step ``s`` falls in: the first
    record closing after ``s`` (the event runs after step s is logged)."""
    out = list(steps)
    for s in sorted(at):
        k = next((k for k, r in enumerate(out) if r.step > s), None)
        if k is not None and mark not in out[k].marks:
            out[k] = replace(out[k], marks=out[k].marks + (mark,))
    return out


def parse_nemo(text: str, where: str = "<log>") -> RunLog:
    """NeMo 1.x Lightning progress-bar records (``global_step=``, ``train_step_timing in s=``)."""
    records: dict[int, LogStep] = {}
    chunks = re.split(r"[\r\n]", text)
    for i, chunk in enumerate(chunks, start=1):
        ms, mt = NEMO_STEP.search(chunk), NEMO_TIME.search(chunk)
        if not ms:
            continue
        step = int(float(ms.group(1)))
        # a refresh still being written: the last chunk, unterminated, before tqdm's closing "]"
        if i == len(chunks) and not text.endswith(("\n", "\r")) and not chunk.rstrip().endswith("]"):
            raise _truncated(where, i, chunk)
        if not mt:
            continue
        t = _time(where, i, step, mt.group(1), "train_step_timing in s")
        ml = NEMO_LOSS.search(chunk)
        loss = _loss(ml.group(1) if ml else None)
        records[step] = LogStep(step=step, time_s=t, span=1, line=i, loss=loss, marks=_nan_marks(loss))
    steps = [records[k] for k in sorted(records)]
    return RunLog(framework="nemo", source=where, steps=tuple(steps),
                  notes=("train_step_timing is the time of the step the progress bar last refreshed at; "
                         "the last refresh of each global_step is kept",))


def parse_torchtitan(text: str, where: str = "<log>", *, tokens_per_gpu_step: float | None = None) -> RunLog:
    """torchtitan ``MetricsProcessor.log`` lines; step time = tokens per GPU per step / tps."""
    if tokens_per_gpu_step is None or tokens_per_gpu_step <= 0:
        raise RunLogError(f"log {where}: torchtitan logs tokens per second per device (tps), not a step time; "
                          "the job's tokens per GPU per step (batch x seq_len / GPUs) is needed: pass the job's TOML")
    lines = ANSI.sub("", text).splitlines()
    steps: list[LogStep] = []
    evals: set[int] = set()
    seconds: list[float] = []
    pending_ckpt = False
    prev = 0
    device: str | None = None
    for i, line in enumerate(lines, start=1):
        if device is None and (m := TITAN_DEVICE.search(line)):
            device = m.group(1).strip()
        if m := re.search(r"validate step:\s*(\d+)", line):
            evals.add(int(m.group(1)))
            continue
        if m := TITAN_CKPT.search(line):
            seconds.append(float(m.group(1)))
            pending_ckpt = True
        m = TITAN_STEP.search(line)
        if not m:
            if TITAN_PARTIAL.search(line) and i == len(lines) and not text.endswith("\n"):
                raise _truncated(where, i, line)
            if TITAN_PARTIAL.search(line):
                raise RunLogError(f"log {where} line {i}: a torchtitan step line without tps/tflops/mfu; "
                                  "expected 'step: N  loss: L  memory: ...  tps: T  tflops: F  mfu: U%'")
            continue
        step = int(m.group(1))
        tps = _time(where, i, step, m.group(3), "tps")
        loss = _loss(m.group(2))
        marks = _nan_marks(loss) + (("checkpoint",) if pending_ckpt else ())
        span = step - prev
        if span <= 0:
            marks, span = marks + ("restart",), 1
        steps.append(LogStep(step=step, time_s=tokens_per_gpu_step / tps, span=span, line=i, loss=loss, wall_s=_stamp(line),
                             tflops_per_gpu=_number(m.group(4)) if m.group(4) != "nan" else None, marks=marks))
        pending_ckpt, prev = False, step
    return RunLog(framework="torchtitan", source=where, steps=tuple(_mark(steps, evals, "eval")),
                  checkpoint_seconds=tuple(seconds), device_name=device,
                  notes=(f"step time = {tokens_per_gpu_step:g} tokens per GPU per step / tps (tps: mean over log_freq)",))


def parse_composer(text: str, where: str = "<log>") -> RunLog:
    """Composer ``ConsoleLogger`` blocks: ``[batch=N/M]:`` then ``Train time/secs_per_step: t``."""
    lines = text.splitlines()
    blocks: list[tuple[int, int, dict[str, str]]] = []
    evals: set[int] = set()
    for i, line in enumerate(lines, start=1):
        if m := COMPOSER_BATCH.match(line.strip()):
            blocks.append((int(m.group(1)), i, {}))
        elif line.strip().startswith("[Eval batch=") and blocks:
            evals.add(blocks[-1][0])
        elif (m := COMPOSER_FIELD.match(line)) and blocks:
            blocks[-1][2][m.group(1)] = m.group(2)
            blocks[-1] = (blocks[-1][0], i, blocks[-1][2])
    if lines and not text.endswith("\n") and (COMPOSER_FIELD.match(lines[-1]) or COMPOSER_BATCH.match(lines[-1].strip())):
        raise _truncated(where, len(lines), lines[-1])  # ConsoleLogger prints whole lines: the last one is cut
    steps: list[LogStep] = []
    rolling = False
    for n, (batch, i, values) in enumerate(blocks):
        last = n == len(blocks) - 1
        if "time/secs_per_step" in values and _number_or_none(values["time/secs_per_step"]) != 0.0:
            t = _time(where, i, batch, values["time/secs_per_step"], "time/secs_per_step")
        elif "throughput/batches_per_sec" in values:
            t = 1.0 / _time(where, i, batch, values["throughput/batches_per_sec"], "throughput/batches_per_sec")
            rolling = True
        elif last and not text.endswith("\n"):
            raise _truncated(where, i, lines[i - 1])
        else:
            continue  # the first blocks, before SpeedMonitor's window fills, carry no time
        loss = _loss(values.get("loss/train/total"))
        steps.append(LogStep(step=batch, time_s=t, span=1, line=i, loss=loss, marks=_nan_marks(loss)))
    note = ("step time from 1 / throughput/batches_per_sec: a rolling mean over SpeedMonitor's window"
            if rolling else "step time from time/secs_per_step: the wall time of the logged batch")
    return RunLog(framework="composer", source=where, steps=tuple(_mark(steps, evals, "eval")), notes=(note,))


def _number_or_none(raw: str) -> float | None:
    try:
        return _number(raw)
    except ValueError:
        return None

