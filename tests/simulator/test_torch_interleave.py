"""The interleaved measurement protocol without torch: passes over the plans, the pass order, the
stop rule, each plan's median over its passes' medians, and the tasks one launch gets.

Deterministic and untimed: planted step times (a host state that lasts a block of the campaign is
a planted slow-down factor on a time line), closed forms for the medians and the schedule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from clustersim.simulator.calibration.torch_backend import stats, torch_available
from clustersim.simulator.calibration.torch_backend.check import check
from clustersim.simulator.calibration.torch_backend.measure import SMALL_GPT, standard_plans, tasks_for
from clustersim.simulator.calibration.torch_backend.specs import StepRecord, TimingRecipe, record_from_dict
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.profile import CalibrationProfile

PLANS = standard_plans(2)


def _record(times: list[float], passes: list[int] | None = None) -> StepRecord:
    return StepRecord(plan=PLANS[0], model=SMALL_GPT, world_size=2, backend="gloo", device="cpu",
                      step_times=tuple(times), pass_index=tuple(passes or ()))


def test_each_plan_takes_every_position_once_over_as_many_passes() -> None:
    n = len(PLANS)
    orders = [stats.pass_order(n, k) for k in range(n)]
    assert all(sorted(o) == list(range(n)) for o in orders)  # every plan once a pass
    for plan in range(n):  # a Latin square: plan p sits at position (p - k) mod n in pass k
        assert sorted(o.index(plan) for o in orders) == list(range(n))
    assert stats.pass_order(n, n) == stats.pass_order(n, 0)


def test_steps_per_pass_spread_the_minimum_over_the_passes() -> None:
    assert stats.pass_steps(10, 5) == 2 and stats.pass_steps(10, 3) == 3
    assert stats.pass_steps(3, 3) == 1 and stats.pass_steps(2, 3) == 1  # at least one step a pass
    assert stats.pass_steps(10, 1) == 10  # one pass: the old block


def test_the_stop_rule_waits_for_the_passes_and_stops_at_the_cap_or_budget() -> None:
    flat = [[1.0] * 6, [2.0] * 6]  # zero-width intervals: narrow from the start
    rule = dict(min_passes=3, minimum=4, maximum=12, width=0.05, budget=1e9)
    assert not stats.enough_passes(flat, passes_done=2, **rule)  # narrow, but too few passes
    assert stats.enough_passes(flat, passes_done=3, **rule)
    wide = [[1.0, 2.0, 1.0, 2.0, 1.0, 2.0], [2.0] * 6]  # one plan wide: keep going
    assert not stats.enough_passes(wide, passes_done=3, **rule)
    assert stats.enough_passes(wide, passes_done=3, **{**rule, "budget": 21.0})  # 9 + 12 s timed
    assert stats.enough_passes([w * 2 for w in wide], passes_done=3, **rule)  # 12 steps: the cap
    assert not stats.enough_passes([t[:3] for t in flat], passes_done=3, **rule)  # below the minimum


def test_the_median_is_the_median_of_the_passes_medians() -> None:
    # pass 0 slowed x2 by the host for its whole block: the plain median of the 9 steps moves to
    # the slow state's value, the median over passes keeps the two quiet passes' value
    times = [2.0, 2.2, 2.1, 1.0, 1.1, 0.9, 1.05, 0.95, 1.0]
    rec = _record(times, [0, 0, 0, 1, 1, 1, 2, 2, 2])
    assert rec.pass_medians == pytest.approx([2.1, 1.0, 1.0])
    assert rec.median == pytest.approx(1.0)
    assert rec.pass_spread == pytest.approx((2.1 - 1.0) / 1.0)
    assert stats.median(times) == pytest.approx(1.05)  # what the old median was
    block = _record(times)  # a record without passes (measured in one block): as before
    assert block.median == pytest.approx(1.05) and block.pass_spread == 0.0
    back = record_from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back.pass_index == rec.pass_index and back.median == rec.median
    assert rec.to_dict()["pass_medians_s"] == rec.pass_medians


def test_interleaving_lets_a_lasting_host_state_slow_every_plan_alike() -> None:
    # Planted: each plan's true step time, a host that runs x1.6 slower for a stretch of the
    # campaign lasting about two plans' blocks. One block per plan: the plans measured inside the
    # stretch are 60 % slow. Interleaved passes (same steps): the stretch covers a slice of every
    # plan, and the median over passes keeps every ratio to the others.
    true = [1.0, 1.3, 1.6, 2.0, 1.2, 1.1]
    n, passes, per = len(true), 6, 2

    def slow(t: float, total: float) -> float:
        return 1.6 if 0.35 * total <= t < 0.6 * total else 1.0

    def run(schedule: list[tuple[int, int]]) -> list[float]:
        total = sum(true[i] for i, _ in schedule)
        clock, times = 0.0, {i: ([], []) for i in range(n)}  # type: dict[int, tuple[list[float], list[int]]]
        for i, k in schedule:
            took = true[i] * slow(clock, total)
            times[i][0].append(took)
            times[i][1].append(k)
            clock += took
        return [_record(*times[i]).median for i in range(n)]

    block = run([(i, i) for i in range(n) for _ in range(passes * per)])
    interleaved = run([(i, k) for k in range(passes) for i in stats.pass_order(n, k) for _ in range(per)])
    worst_block = max(abs(m / t - 1) for m, t in zip(block, true))
    worst_inter = max(abs(m / t - 1) for m, t in zip(interleaved, true))
    assert worst_block == pytest.approx(0.6)
    assert worst_inter < 0.05 * worst_block


def test_one_launch_times_its_plans_in_one_interleaved_task() -> None:
    timing = TimingRecipe(repeats=10, repeats_max=30, step_passes=5)
    tasks = tasks_for(SMALL_GPT, PLANS, timing, 2, sweep=False)
    steps = [t for t in tasks if t["kind"] in ("step", "steps")]
    assert len(steps) == 1 and steps[0]["kind"] == "steps"
    assert steps[0]["plans"] == [asdict(p) for p in PLANS]
    old = tasks_for(SMALL_GPT, PLANS, replace(timing, step_passes=1), 2, sweep=False, micro_placement="first")
    assert [t["plan"]["name"] for t in old if t["kind"] == "step"] == [p.name for p in PLANS]
    one = tasks_for(SMALL_GPT, standard_plans(1), timing, 1, sweep=False, micro_placement="first")
    assert [t["kind"] for t in one] == ["compute", "step"]  # microbenchmarks first, a single plan: one block
    # the default places the microbenchmarks inside the passes: the single plan is timed in passes too
    assert [t["kind"] for t in tasks_for(SMALL_GPT, standard_plans(1), timing, 1, sweep=False)] == ["steps"]


@pytest.mark.parametrize("field, value", [("step_passes", 0), ("step_passes", 31), ("rewarm", -1)])
def test_a_bad_pass_count_names_its_field(field: str, value: int) -> None:
    with pytest.raises(CalibrationError, match=field):
        TimingRecipe(repeats=10, repeats_max=30, **{field: value})  # type: ignore[arg-type]  # one of the recipe's int fields


def test_check_reports_each_plans_spread_over_its_passes() -> None:
    rec = _record([2.0, 2.2, 1.0, 1.1, 1.0, 0.9], [0, 0, 1, 1, 2, 2])
    profile = CalibrationProfile(machine={"peak_flops": 1e11, "memory_bandwidth": 1e10, "link_bandwidth": 1.5e9})
    row = check([rec], profile)[0]
    assert row.pass_spread == pytest.approx(rec.pass_spread) and row.pass_spread == pytest.approx((2.1 - 0.95) / 1.05)
    assert row.measured == pytest.approx(1.05)  # the median of the passes' medians 2.1, 1.05, 0.95


@pytest.mark.skipif(not torch_available(), reason="calibrate measure asks for torch before its options")
def test_cli_measure_refuses_a_bad_pass_count_with_one_line(tmp_path: Path) -> None:
    # as a user runs it: the installed CLI's one error path (exit 2, one line, no traceback), nothing run
    res = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli", "calibrate", "measure", "--out",
                          str(tmp_path / "never"), "--step-passes", "0"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "step_passes = 0" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "never").exists()
