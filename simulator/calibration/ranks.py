"""Per-rank timings in a training log -> which rank or node is slow, and by how much.

Owns reading the two per-rank reports Megatron-LM prints (NeMo 2 and Megatron-Bridge print the
same) and naming the slow rank from them:

- ``--timing-log-option all`` (``megatron/core/timers.py::Timers._get_all_ranks_time_string``,
  NVIDIA/Megatron-LM commit 00caa53a): after each ``training_log`` line, ``times across ranks
  (ms):`` then, per timer, ``  <name>:`` and ``     rank  R: T`` lines (T: ms per iteration, the
  timer's sum over the ``--log-interval`` divided by it). The compute timers of
  ``--timing-log-level 2`` (``forward-compute``, ``backward-compute``) time each rank's own
  kernels; ``forward-backward`` also holds the waits of a synchronous step (the fast ranks wait
  in the gradient reduction for the slow one), so it only stands in when the compute timers are
  absent, and says so. Ranks are compared with the lower quartile of their own pipeline stage
  (stage = rank // (world / pp): Megatron's default order tp-cp-ep-dp-pp puts pp outermost).
- ``--log-straggler`` (``megatron/core/utils.py::StragglerDetector.report``, commit 22e030e9):
  ``| MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | ... | MnClk/Rnk: 1950MHz/28 | ...``:
  the fastest and slowest rank's time in the traced forward steps per iteration, and the ranks of
  the lowest and highest clock, temperature and power. It names the slowest rank, and its lead
  over the fastest one (not over the median: the report holds only the two ends).

A rank is slow when its lead is above ``threshold`` in at least ``consistency`` of the records
(the StragglerDetector: when it is the slowest in that many) and its median lead is too; a node
when at least half of its ranks are slow (ranks per node from the cluster: torchrun numbers them
node by node). It reads text only (torchrun's ``[rankN]:`` line prefixes
removed by ``runlogs.one_rank``); it neither parses the step lines (``runlogs``) nor decides on
the run (``watch``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from clustersim.simulator.calibration.runlogs import one_rank

ALL_RANKS_HEAD = re.compile(r"times across ranks \(ms\):\s*$")
TIMER_NAME = re.compile(r"^\s{1,3}(\S[^:]*):\s*$")
RANK_TIME = re.compile(r"^\s+rank\s+(\d+):\s*([0-9.]+)\s*$")
ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|")
STRAGGLER_FIELD = re.compile(r"(Mn|Mx)(\w+)/Rnk:\s*([0-9.]+)([A-Za-z%]*)/(\d+)")
COMPUTE_TIMERS = ("forward-compute", "backward-compute")
FALLBACK_TIMERS = ("forward-backward",)
CONSISTENCY = 2 / 3
"""Fraction of the reports in which a rank must be slow to be named."""
REFERENCE_QUANTILE = 0.25
"""A rank's lead is over this quantile of its stage's ranks (see ``lead_of_ranks``)."""


@dataclass(frozen=True, kw_only=True)
class RankTimes:
    """One ``times across ranks`` block: ms per iteration of each timer on each rank."""

    step: int
    """The iteration of the training_log line the block follows (0 before any)."""
    timers: dict[str, dict[int, float]]
    """timer name -> rank -> ms per iteration."""


@dataclass(frozen=True, kw_only=True)
class StragglerReport:
    """One StragglerDetector line: each metric's minimum and maximum with its rank."""

    step: int
    """The iteration of the last training_log line before it (0 before any)."""
    ends: dict[str, tuple[float, int, float, int]]
    """metric (Rtt, Clk, Tmp, Pwr, Utl, DRtt, Etpt) -> (min, its rank, max, its rank)."""


@dataclass(frozen=True, kw_only=True)
class SlowRank:
    """The slow rank (or node) a log's per-rank timings name."""

    rank: int
    """The slowest rank."""
    node: int
    """Its node (rank // GPUs per node)."""
    slower: float
    """Its median lead: time / lower quartile of its stage's ranks - 1 (all-ranks timers), or
    slowest / fastest - 1 (StragglerDetector)."""
    share: float
    """Fraction of the records in which it was above the threshold (StragglerDetector: the slowest)."""
    records: int
    """Records used (after the warm-up)."""
    source: str
    """Which report and timers it rests on."""
    node_ranks: tuple[int, ...] = ()
    """Ranks of ``node`` that are slow too; the whole node when at least half of its ranks."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Clock, temperature and what the timers could not separate, in words."""

    @property
    def whole_node(self) -> bool:
        """At least half of the node's ranks are slow: a node-wide cause."""
        return len(self.node_ranks) > 1

    def describe(self) -> str:
        """One line."""
        who = (f"node {self.node} (ranks {', '.join(map(str, self.node_ranks))})" if self.whole_node
               else f"rank {self.rank} (node {self.node})")
        return (f"{who} is {self.slower * 100:.1f}% slower (in {self.share * 100:.0f}% of {self.records} records; "
                f"{self.source})" + "".join(f"; {n}" for n in self.notes))


def parse_rank_times(text: str) -> list[RankTimes]:
    """Every ``times across ranks (ms):`` block of a Megatron log, with the iteration it follows."""
    out: list[RankTimes] = []
    step, name = 0, None
    block: dict[str, dict[int, float]] | None = None
    for line in text.splitlines():
        if block is not None:
            if (m := RANK_TIME.match(line)) and name is not None:
                block[name][int(m.group(1))] = float(m.group(2))
                continue
            if (m := TIMER_NAME.match(line)) and not ITERATION.search(line):
                name = m.group(1).strip()
                block[name] = {}
                continue
            out.append(RankTimes(step=step, timers=block))
            block, name = None, None
        if m := ITERATION.search(line):
            step = int(m.group(1))
        elif ALL_RANKS_HEAD.search(line):
            block = {}
    if block:
        out.append(RankTimes(step=step, timers=block))
    return out


def parse_straggler_reports(text: str) -> list[StragglerReport]:
    """Every StragglerDetector (``--log-straggler``) line, with the iteration it follows."""
    out: list[StragglerReport] = []
    step = 0
    for line in text.splitlines():
        if m := ITERATION.search(line):
            step = int(m.group(1))
            continue
        if "MxRtt/Rnk:" not in line:
            continue
        found: dict[str, dict[str, tuple[float, int]]] = {}
        for end, metric, value, _unit, rank in STRAGGLER_FIELD.findall(line):
            found.setdefault(metric, {})[end] = (float(value), int(rank))
        ends = {k: (v["Mn"][0], v["Mn"][1], v["Mx"][0], v["Mx"][1]) for k, v in found.items() if len(v) == 2}
        if "Rtt" in ends:
            out.append(StragglerReport(step=step, ends=ends))
    return out


def _stage_of(rank: int, world: int, pp: int) -> int:
    return rank // max(world // max(pp, 1), 1)


def _compute_times(block: RankTimes) -> tuple[dict[int, float], str]:
    """rank -> ms of the compute timers (their sum), and which timers."""
    names = [n for n in COMPUTE_TIMERS if n in block.timers] or [n for n in FALLBACK_TIMERS if n in block.timers]
    ranks = set.intersection(*(set(block.timers[n]) for n in names)) if names else set()
    return {r: sum(block.timers[n][r] for n in names) for r in ranks}, "+".join(names)


def lead_of_ranks(block: RankTimes, pp: int) -> tuple[dict[int, float], str]:
    """rank -> its compute time / the reference of its stage, and the timers used. The reference is
    the stage's lower quartile (``REFERENCE_QUANTILE``): a healthy rank even when a whole node,
    half of a two-node stage, is slow (the median would fall between the two groups)."""
    times, names = _compute_times(block)
    if len(times) < 2:
        return {}, names
    world = max(times) + 1
    stages: dict[int, list[float]] = {}
    for r, t in times.items():
        stages.setdefault(_stage_of(r, world, pp), []).append(t)
    ref = {s: float(np.quantile(ts, REFERENCE_QUANTILE)) for s, ts in stages.items()}
    return {r: t / ref[_stage_of(r, world, pp)] for r, t in times.items()}, names


def _node_ranks(slow: set[int], node: int, ranks: Sequence[int], gpus_per_node: int) -> tuple[int, ...]:
    mine = [r for r in ranks if r // gpus_per_node == node]
    hit = tuple(sorted(r for r in mine if r in slow))
    return hit if 2 * len(hit) >= len(mine) and len(hit) > 1 else ()


def slow_rank_from_timers(blocks: Sequence[RankTimes], *, pp: int = 1, gpus_per_node: int = 8, warmup: int = 1,
                          threshold: float = 0.05, consistency: float = CONSISTENCY) -> SlowRank | None:
    """The slow rank of ``times across ranks`` blocks (the one with the largest median lead among
    those above ``threshold`` in at least ``consistency`` of the records), or None."""
    leads, names = [], ""
    for block in blocks[warmup:]:
        lead, names = lead_of_ranks(block, pp)
        if lead:
            leads.append(lead)
    if not leads:
        return None
    ranks = sorted(set.intersection(*(set(lead) for lead in leads)))
    median = {r: float(np.median([lead[r] for lead in leads])) for r in ranks}
    share = {r: sum(lead[r] > 1.0 + threshold for lead in leads) / len(leads) for r in ranks}
    slow = {r for r in ranks if median[r] > 1.0 + threshold and share[r] >= consistency}
    if not slow:
        return None
    rank = max(slow, key=lambda r: (median[r], -r))
    notes = () if names != "forward-backward" else (
        "from forward-backward, which holds the waits of a synchronous step: log --timing-log-level 2 "
        "for forward-compute/backward-compute",)
    node = rank // gpus_per_node
    return SlowRank(rank=rank, node=node, slower=median[rank] - 1.0, share=share[rank], records=len(leads),
                    source=f"Megatron timers {names}, all ranks, vs their stage's lower quartile",
                    node_ranks=_node_ranks(slow, node, ranks, gpus_per_node), notes=notes)


def _hardware_notes(reports: Sequence[StragglerReport], rank: int) -> tuple[str, ...]:
    """Whether the slow rank also has the lowest clock or the highest temperature in most reports."""
    notes = []
    for metric, end, words in (("Clk", "min", "the lowest GPU clock"), ("Tmp", "max", "the highest GPU temperature")):
        hits = [r.ends[metric] for r in reports if metric in r.ends]
        at = [h for h in hits if (h[1] if end == "min" else h[3]) == rank]
        if hits and 2 * len(at) > len(hits):
            lo, hi = float(np.median([h[0] for h in at])), float(np.median([h[2] for h in at]))
            notes.append(f"it has {words} in {len(at)} of {len(hits)} reports ({lo:g} vs {hi:g}): "
                         + ("clock throttling (power or thermal)" if metric == "Clk" else "cooling"))
    return tuple(notes)


def slow_rank_from_straggler(reports: Sequence[StragglerReport], *, gpus_per_node: int = 8, warmup: int = 1,
                             threshold: float = 0.05, consistency: float = CONSISTENCY) -> SlowRank | None:
    """The slow rank of StragglerDetector lines, or None when no rank stands out."""
    use = list(reports[warmup:])
    if not use:
        return None
    worst = Counter(r.ends["Rtt"][3] for r in use)
    rank, count = worst.most_common(1)[0]
    lead = float(np.median([r.ends["Rtt"][2] / r.ends["Rtt"][0] - 1.0 for r in use if r.ends["Rtt"][3] == rank]))
    if lead <= threshold or count < consistency * len(use):
        return None
    return SlowRank(rank=rank, node=rank // gpus_per_node, slower=lead, share=count / len(use), records=len(use),
                    source="Megatron StragglerDetector MxRtt/MnRtt (lead over the fastest rank)",
                    notes=_hardware_notes(use, rank))


def slow_rank(text: str, *, pp: int = 1, gpus_per_node: int = 8, threshold: float = 0.05,
              last: int | None = None) -> SlowRank | None:
    """The slow rank a log's per-rank reports name: the all-ranks timers first, else the straggler
    lines; ``last``: only the last so many reports (a watcher's recent window, no warm-up dropped)."""
    text = one_rank(text)[0]  # torchrun's [rankN]: prefixes: the rank that prints the reports
    blocks, reports = parse_rank_times(text), parse_straggler_reports(text)
    warmup = 1 if last is None else 0
    if last is not None:
        blocks, reports = blocks[-last:], reports[-last:]
    found = slow_rank_from_timers(blocks, pp=pp, gpus_per_node=gpus_per_node, threshold=threshold,
                                  warmup=warmup) if blocks else None
    return found or slow_rank_from_straggler(reports, gpus_per_node=gpus_per_node, threshold=threshold, warmup=warmup)


def detection_reports(last: int, consistency: float = CONSISTENCY) -> int:
    """Slow reports among the last ``last`` before a rank slow from then on is named."""
    return math.ceil(consistency * last - 1e-9)


def has_rank_times(text: str) -> bool:
    """Whether the log carries any per-rank report."""
    return "times across ranks (ms):" in text or "MxRtt/Rnk:" in text
