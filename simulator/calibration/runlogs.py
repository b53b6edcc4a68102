"""Training logs of real jobs -> step times: the face, the framework detection and the steady-state summary.

Owns choosing the parser of a log (``detect_framework``: the framework whose step lines the text
holds, or the one named), keeping one rank's lines of a torchrun log (``one_rank``), and the
steady-state statistics (warm-up dropped, median and p99) and restarts of the records. The
per-framework parsers, which follow each framework's own logging code, are ``runlog_parsers``;
the records they return are ``runlog_records``.

A field the parser needs and cannot find is an error naming it; nothing is guessed. It does not
read job configurations (``clustersim.simulator.calibration.jobargs``) nor compare with a prediction
(``clustersim.simulator.calibration.watch``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from clustersim.simulator.calibration.runlog_parsers import (
    ANSI,
    TITAN_PARTIAL,
    parse_composer,
    parse_megatron,
    parse_nemo,
    parse_torchtitan,
)
from clustersim.simulator.calibration.runlog_records import (
    FRAMEWORKS,
    Interruptions,
    RunLog,
    RunLogError,
    StepStats,
)

RANK_PREFIX = re.compile(r"^\[([A-Za-z_]*)(\d+)\]:", re.M)


def detect_framework(text: str) -> str | None:
    """The framework whose step lines the text holds, or None."""
    clean = ANSI.sub("", text)
    if "elapsed time per iteration (ms)" in clean:
        return "megatron"
    if "train_step_timing in s=" in clean:
        return "nemo"
    if TITAN_PARTIAL.search(clean) and "tps:" in clean:
        return "torchtitan"
    if re.search(r"^\s*Train (time/secs_per_step|throughput/batches_per_sec):", clean, re.M):
        return "composer"
    return None


def read_log(path: str | Path, *, framework: str | None = None, tokens_per_gpu_step: float | None = None) -> RunLog:
    """Parse the log at ``path`` (framework detected from its lines unless given)."""
    p = Path(path)
    if not p.is_file():
        raise RunLogError(f"log {p} does not exist; pass the path of the job's training log")
    text = p.read_text(errors="replace")
    return parse_log(text, str(p), framework=framework, tokens_per_gpu_step=tokens_per_gpu_step)


def one_rank(text: str) -> tuple[str, str | None]:
    """The log of one rank, without torchrun's line prefixes, and what was done, in words.

    ``torchrun --role rank --tee 3`` (torchtitan's ``run_train.sh``; ``torch.distributed.elastic``'s
    log line prefix ``[{role}{local_rank}]:``) prefixes every line; without ``--local-ranks-filter``
    every rank's lines interleave, each with the same synchronous step. Kept: the lowest rank whose
    lines hold step records (Megatron prints them on the last rank only), and unprefixed lines."""
    found = RANK_PREFIX.findall(text)
    if not found:
        return text, None
    lines = text.splitlines(keepends=True)
    by_rank: dict[int, list[str]] = {}
    for line in lines:
        if m := RANK_PREFIX.match(line):
            by_rank.setdefault(int(m.group(2)), []).append(line[m.end():])
    ranks = sorted(by_rank)
    keep = next((r for r in ranks if detect_framework("".join(by_rank[r])) is not None), ranks[0])
    kept = []
    for line in lines:
        m = RANK_PREFIX.match(line)
        if m is None:
            kept.append(line)
        elif int(m.group(2)) == keep:
            kept.append(line[m.end():])
    out = "".join(kept)
    note = (f"lines of rank {keep} kept, torchrun's [rank]: prefixes removed"
            + (f" (the log interleaves ranks {', '.join(map(str, ranks))})" if len(ranks) > 1 else ""))
    return out, note


def parse_log(text: str, where: str, *, framework: str | None = None,
              tokens_per_gpu_step: float | None = None) -> RunLog:
    """Parse log text; an empty result is an error naming the lines looked for."""
    text, rank_note = one_rank(text)
    log = _parse_one(text, where, framework=framework, tokens_per_gpu_step=tokens_per_gpu_step)
    return replace(log, notes=log.notes + (rank_note,)) if rank_note else log


def _parse_one(text: str, where: str, *, framework: str | None, tokens_per_gpu_step: float | None) -> RunLog:
    kind = framework or detect_framework(text)
    match kind:
        case "megatron":
            log = parse_megatron(text, where)
        case "nemo":
            log = parse_nemo(text, where)
        case "torchtitan":
            log = parse_torchtitan(text, where, tokens_per_gpu_step=tokens_per_gpu_step)
        case "composer":
            log = parse_composer(text, where)
        case None:
            raise RunLogError(f"log {where}: no step lines of Megatron-LM ('elapsed time per iteration (ms)'), "
                              "NeMo ('train_step_timing in s='), torchtitan ('step: N ... tps:') or Composer "
                              "('Train time/secs_per_step:') found")
        case _:
            raise RunLogError(f"framework {kind!r} unknown; use one of {list(FRAMEWORKS)}")
    if not log.steps:
        raise RunLogError(f"log {where}: no complete {kind} step record found")
    return log


def auto_warmup(log: RunLog, tolerance: float = 0.10) -> int:
    """Steps before the first record within ``tolerance`` of the median of the log's second half."""
    times = np.array([s.time_s for s in log.steps])
    ref = float(np.median(times[len(times) // 2:]))
    first = next((k for k, t in enumerate(times) if abs(t / ref - 1.0) <= tolerance), 0)
    return 0 if first == 0 else log.steps[first - 1].step


def steady_state(log: RunLog, warmup: int | None = None, min_records: int = 3) -> StepStats:
    """Median, p99 and mean step time after ``warmup`` steps (auto when None), marked records left out."""
    skip = auto_warmup(log) if warmup is None else warmup
    marked: dict[str, list[int]] = {}
    for s in log.steps:
        for mark in s.marks:
            marked.setdefault(mark, []).append(s.step)
    use = [s for s in log.steps if s.step > skip and not s.marks]
    if len(use) < min_records:
        raise RunLogError(f"log {log.source}: {len(use)} steady-state record(s) after {skip} warm-up step(s) and "
                          f"{sum(len(v) for v in marked.values())} marked one(s); need >= {min_records}: "
                          "a longer log or a smaller --warmup")
    t = np.array([s.time_s for s in use])
    return StepStats(median_s=float(np.median(t)), p99_s=float(np.percentile(t, 99)), mean_s=float(t.mean()),
                     records=len(use), warmup_steps=skip, marked=marked)



def interruptions(log: RunLog) -> Interruptions | None:
    """Restarts and their cost, from the records' own timestamps (None when the log has none)."""
    timed = [s for s in log.steps if s.wall_s is not None]
    if len(timed) < 2:
        return None
    gaps, lost = [], 0
    for before, after in zip(log.steps, log.steps[1:]):
        if "restart" not in after.marks:
            continue
        lost += before.step - (after.step - after.span)
        if before.wall_s is not None and after.wall_s is not None:
            gaps.append(after.wall_s - before.wall_s - after.span * after.time_s)
    hours = (timed[-1].wall_s - timed[0].wall_s) / 3600.0  # type: ignore[operator]  # timed holds only steps with wall_s
    return Interruptions(count=sum("restart" in s.marks for s in log.steps), hours=hours,
                         restart_s=float(np.median(gaps)) if gaps else None, lost_steps=lost)
