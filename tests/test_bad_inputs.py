"""Every bad input of benchmarks/bad_inputs.py: exit 2, one error naming the field, no traceback.

The cases (plan, training, model and cluster fields of the wrong type or out of range, closed
CLI choices, ranges, work limits and output paths) are the ones issue 19 reported, plus those
added with the fix; ``benchmarks/bad_inputs.py`` runs the same list against any version of the
command and prints the before/after table. Here they run in this process (``app.main`` with
``sys.argv`` set), so an exception that escapes ``main`` fails the test with its traceback.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from benchmarks.bad_inputs import CASES, Case, classify, prepare
from clustersim.simulator.bounds import WorkLimitError
from clustersim.simulator.cli.app import main
from clustersim.simulator.scenario import load_scenario

SLOW = {"sweep --scheduler unreachable"}  # waits for the connect timeout (10 s)


def run_main(argv: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["clustersim", *argv])
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return code, capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", [c for c in CASES if c.name not in SLOW], ids=lambda c: c.name)
def test_bad_input_exits_2_naming_the_field(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    prepare(case, tmp_path)
    monkeypatch.chdir(tmp_path)
    code, err = run_main(case.argv, monkeypatch, capsys)
    assert classify(code, err, case.needle) == "good", (code, err)
    assert re.search(case.needle, err)
    assert not [p for p in tmp_path.rglob(".*") if p.name.endswith(".tmp")]  # no temporary file left


def test_force_lifts_a_work_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A scenario past a work limit is refused with a message naming --force; with force it loads."""
    prepare(CASES[0], tmp_path)
    monkeypatch.chdir(tmp_path)
    big = ["cluster.preset=cpu-loopback", "cluster.num_gpus=40000", "plan.dp=10000", "training.global_batch_size=10000"]
    code, err = run_main(("simulate", "s.yaml", *[x for s in big for x in ("--set", s)]), monkeypatch, capsys)
    assert code == 2 and "exceeds the limit of 32,768" in err and "--force" in err
    assert load_scenario(tmp_path / "s.yaml", big, force=True).cluster.num_gpus == 40000
    events = ["training.global_batch_size=400000"]  # 200,000 micro-batches x 2 stages x 2 passes
    with pytest.raises(WorkLimitError, match="engine events per step"):
        load_scenario(tmp_path / "s.yaml", events)
    assert load_scenario(tmp_path / "s.yaml", events, force=True).training.global_batch_size == 400000


def test_a_failed_scale_keeps_the_old_report_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The report folder is replaced as a whole: an error before the swap leaves it untouched."""
    prepare(CASES[0], tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.html").write_text("old")
    code, _ = run_main(("scale", "s.yaml", "--gpus", "8", "--out", "rep", "--set", "plan.tp=four"), monkeypatch, capsys)
    assert code == 2
    assert [p.name for p in (tmp_path / "rep").iterdir()] == ["report.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep", "s.yaml"]
