"""Where a launch times its microbenchmarks (issue 21): interleaved with the steps' passes (the
default) or all before the first step (``--micro-placement first``, the protocol before).

The task lists and the results' sections are checked without torch; the protocol itself with a
planted host slow-down on a fake clock (``runners.time_interleaved`` with its torch calls replaced,
no ranks, nothing timed): a host that turns 1.3x slower once the microbenchmarks that run first are
done makes every step look 1.3x slower than the profile fitted on them, while interleaved blocks
see the same mix of host states as the steps.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clustersim.simulator.calibration.torch_backend import stats
from clustersim.simulator.calibration.torch_backend.measure import (MICRO_PLACEMENTS, TINY_GPT, micro_sections,
                                                                     standard_plans, tasks_for)
from clustersim.simulator.calibration.torch_backend.specs import TimingRecipe
from clustersim.simulator.errors import CalibrationError

TIMING = TimingRecipe(repeats=4, repeats_max=8, step_passes=4, threads_per_rank=1)


def test_interleaved_is_the_default_and_puts_every_microbenchmark_inside_the_steps_task() -> None:
    for world, kinds in ((1, {"compute"}), (2, {"compute", "collectives"})):
        plans = standard_plans(world)
        tasks = tasks_for(TINY_GPT, plans, TIMING, world, sweep=False)
        assert [t["kind"] for t in tasks] == ["steps"]  # one task: nothing runs before the first pass
        micro = tasks[0]["micro"]
        assert isinstance(micro, dict) and set(micro) == kinds
        assert [p["name"] for p in tasks[0]["plans"]] == [p.name for p in plans]  # type: ignore[attr-defined, index]
        # the same microbenchmarks as the old placement runs up front
        first = {t["kind"]: t for t in tasks_for(TINY_GPT, plans, TIMING, world, sweep=False, micro_placement="first")}
        assert all(micro[k] == first[k] for k in kinds)


def test_first_keeps_the_protocol_before() -> None:
    one = tasks_for(TINY_GPT, standard_plans(1), TIMING, 1, sweep=False, micro_placement="first")
    assert [t["kind"] for t in one] == ["compute", "step"]  # one plan: one block, as before
    two = tasks_for(TINY_GPT, standard_plans(2), TIMING, 2, sweep=False, micro_passes=3, micro_placement="first")
    assert [t["kind"] for t in two] == ["compute", "collectives", "steps"] and "micro" not in two[2]
    assert two[0]["passes"] == two[1]["passes"] == 3


def test_an_unknown_placement_is_one_clear_error() -> None:
    with pytest.raises(CalibrationError, match="placement = 'before' is unknown.*interleaved, first"):
        tasks_for(TINY_GPT, standard_plans(2), TIMING, 2, micro_placement="before")
    assert MICRO_PLACEMENTS[0] == "interleaved"


def test_the_cli_rejects_an_unknown_placement_with_exit_2(tmp_path: Path) -> None:
    # as a user runs it: one line, exit 2, no traceback, nothing measured or written
    res = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "measure", "--out",
                          str(tmp_path / "never"), "--micro-placement", "later"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2 and "placement = 'later' is unknown" in res.stderr and "--micro-placement" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "never").exists()


def test_the_sections_come_from_the_steps_task_or_their_own_tasks() -> None:
    steps = {"kind": "steps", "records": [], "compute": {"gemm": [1]}, "collectives": {"entries": [2]}}
    assert micro_sections([steps]) == {"compute": {"kind": "compute", "gemm": [1]},
                                       "collectives": {"kind": "collectives", "entries": [2]}}
    own = [{"kind": "compute", "gemm": [3]}, {"kind": "steps", "records": []}]
    assert micro_sections(own) == {"compute": {"kind": "compute", "gemm": [3]}}


# --- the protocol on a fake clock ------------------------------------------------------------

SLOW = 1.3
"""The planted host slow-down."""


@dataclass
class Host:
    """A fake clock: the host runs at speed 1 until ``switch_at`` seconds, then ``SLOW`` x slower."""

    switch_at: float
    now: float = 0.0

    def run(self, seconds: float) -> float:
        took = seconds * (SLOW if self.now >= self.switch_at else 1.0)
        self.now += took
        return took


@dataclass
class FakeMicro:
    """Stands in for ``runners._Micro``: one block takes 1 s of work and records the slow-down it saw."""

    host: Host
    seen: list[float] = field(default_factory=list)

    def block(self, timing: TimingRecipe) -> None:
        self.seen.append(self.host.run(1.0))


def _protocol(monkeypatch: pytest.MonkeyPatch, host: Host, micro: Any) -> list[Any]:
    runners = pytest.importorskip("clustersim.simulator.calibration.torch_backend.runners")
    monkeypatch.setattr(runners, "build_step", lambda plan, cfg, seed=0: lambda: (host.run(0.5), 1.0))
    monkeypatch.setattr(runners, "warm_up", lambda step, timing: ([], 1))
    monkeypatch.setattr(runners, "timed_step", lambda step: (step()[0], 0.0, (0.0, 1.0)))
    monkeypatch.setattr(runners.microbench, "probe_sample", lambda **kw: {})
    monkeypatch.setattr(runners, "_record", lambda plan, cfg, t: t)
    plans = standard_plans(2)
    return runners.time_interleaved(plans, TINY_GPT, TIMING, micro=micro)  # type: ignore[no-any-return]


def _bias(timed: list[Any], micro: FakeMicro) -> float:
    """Measured / predicted step time of the fake plans, the profile fitted on the micro blocks."""
    step = stats.median([stats.median(t.times) for t in timed])
    return step / (0.5 * stats.median(micro.seen))


def test_a_host_slow_down_after_the_microbenchmarks_biases_the_old_placement_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the same host both ways: 1.3x slower from 12 s on (after 4 passes of 1 s microbenchmarks
    # run up front, or a third of the way through the interleaved passes)
    host = Host(switch_at=12.0)
    first = FakeMicro(host)
    for _ in range(TIMING.step_passes):  # "first": every microbenchmark pass before any plan
        first.block(TIMING)
    before = _bias(_protocol(monkeypatch, host, None), first)
    assert before == pytest.approx(SLOW, rel=0.02)  # every plan predicted 1.3x fast

    host = Host(switch_at=12.0)
    inter = FakeMicro(host)
    timed = _protocol(monkeypatch, host, inter)
    passes = len(set(timed[0].index))
    assert len(inter.seen) == passes >= TIMING.step_passes  # one block in every pass
    assert abs(_bias(timed, inter) - 1.0) < abs(before - 1.0) / 3
    # the block takes every position of the rotation: pass k puts it at position (n - k) mod (n + 1)
    n = len(standard_plans(2))
    assert {stats.pass_order(n + 1, k).index(n) for k in range(n + 1)} == set(range(n + 1))


def test_without_a_slow_down_both_placements_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(switch_at=float("inf"))
    inter = FakeMicro(host)
    assert _bias(_protocol(monkeypatch, host, inter), inter) == pytest.approx(1.0)


# --- a rank that dies on a fatal signal (issue 21: "malloc(): unaligned tcache chunk detected") --


def test_a_rank_killed_by_the_c_library_is_named_with_its_signal_and_abort_message(tmp_path: Path) -> None:
    from clustersim.simulator.calibration.torch_backend.launch import _failure_message, rank_env_diagnostics

    (tmp_path / "rank1.log").write_text("step 3\nValueError: earlier, handled\nmalloc(): unaligned tcache chunk "
                                        "detected\nFatal Python error: Aborted\n\nThread 0x7f (most recent call "
                                        "first):\n  File \"runners.py\", line 1 in step\n")
    msg = _failure_message(1, 2, 60.0, tmp_path, -6)
    assert "rank 1 of 2 killed by SIGABRT: malloc(): unaligned tcache chunk detected" in msg and "\n" not in msg
    (tmp_path / "rank0.log").write_text("ValueError: unknown task kind 'x'\n")
    assert "rank 0 of 2 failed: ValueError: unknown task kind" in _failure_message(0, 2, 60.0, tmp_path, 1)
    # every rank writes its threads' Python stacks on a fatal signal; a setting of the user's stays
    assert rank_env_diagnostics({})["PYTHONFAULTHANDLER"] == "1"
    assert rank_env_diagnostics({"PYTHONFAULTHANDLER": "2"})["PYTHONFAULTHANDLER"] == "2"


def test_the_rank_whose_own_error_ended_the_launch_is_reported_not_the_lost_connection(tmp_path: Path) -> None:
    # seen at load 14: rank 0 failed and took the rendezvous store down, rank 1 failed on the lost
    # connection first, and the launch reported rank 1's "Failed to recv" instead of the cause
    from clustersim.simulator.calibration.torch_backend.launch import primary

    (tmp_path / "rank0.log").write_text("Traceback ...\nValueError: unknown task kind 'nonsense'\n")
    (tmp_path / "rank1.log").write_text("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. "
                                        "Connection was likely closed.\n")
    assert primary([0, 1], tmp_path) == 0 and primary([1, 0], tmp_path) == 0
    assert primary([1], tmp_path) == 1  # only the echo failed: it is all there is to report
    (tmp_path / "rank2.log").write_text("malloc(): unaligned tcache chunk detected\n")
    assert primary([1, 2], tmp_path) == 2
    assert primary([-1], tmp_path) == -1  # past the timeout
