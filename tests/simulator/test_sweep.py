"""Sweeps: grid expansion, point ids, the parts store, resume, executors and Ctrl-C safety.

Evaluates with tests/simulator/sweep_stub.py (a closed-form fake), so these tests check the sweep
machinery, not the simulator.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest
import yaml

from clustersim.simulator.sweep.executors import LocalExecutor, SerialExecutor, SweepError, evaluate_task
from clustersim.simulator.scenario import with_override
from clustersim.simulator.sweep.sweep import SweepInterrupted, consolidate, run_sweep, sweep
from clustersim.simulator.sweep.sweep_spec import SweepSpec, expand_points, load_sweep, point_id
from clustersim.simulator.sweep.sweep_store import parts_dir, read_parts

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STUB = "sweep_stub:evaluate_point"
BASE = {"model": "small", "cluster": {"preset": "fake", "num_gpus": 8, "gpus_per_node": 8},
        "plan": {"tp": 1, "pp": 1}, "stub": {"sleep_s": 0.0}}
GRID = {"cluster.num_gpus": [8, 16, 24], "plan.tp": [1, 2, 16], "model": ["small", "big"]}


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """The stub evaluator importable here and in spawned workers; evaluations logged."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("CLUSTERSIM_STUB_LOG", str(tmp_path / "calls.log"))
    return importlib.import_module("sweep_stub")


def evaluated_ids(tmp_path: Path) -> list[str]:
    """Point ids the stub evaluated, one per call, from its log."""
    log = tmp_path / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [point_id(json.loads(line)) for line in lines]


def spec_of(grid: dict | None = None, **extra: object) -> SweepSpec:
    """The test sweep (BASE x GRID unless a grid is given) with extra sweep keys."""
    return load_sweep({"base": BASE, "grid": GRID if grid is None else grid, **extra})


# ---------------------------------------------------------------- grid and ids

def test_override_deep_merges_and_never_mutates_input() -> None:
    base = copy.deepcopy(BASE)
    out = with_override(base, "cluster.num_gpus", 64)
    out = with_override(out, "cluster", {"preset": "other"})
    out = with_override(out, "plan.new.deep", 3)
    assert with_override(base, "model.num_layers", 2)["model"] == {"preset": "small", "num_layers": 2}
    assert base == BASE
    assert out["cluster"] == {"preset": "other", "num_gpus": 64, "gpus_per_node": 8}
    assert out["plan"] == {"tp": 1, "pp": 1, "new": {"deep": 3}}
    assert with_override(base, "model", {"preset": "x"})["model"] == {"preset": "x"}


def test_grid_is_the_outer_product_in_order_with_stable_ids() -> None:
    tasks = expand_points(spec_of(plan="best", seed=7))
    assert len(tasks) == 3 * 3 * 2
    ids = [pid for pid, _ in tasks]
    assert len(set(ids)) == len(ids) and all(len(pid) == 12 for pid in ids)
    assert [pid for pid, _ in expand_points(spec_of(plan="best", seed=7))] == ids
    first, last = tasks[0][1], tasks[-1][1]
    assert (first["cluster"]["num_gpus"], first["plan"]["tp"], first["model"]) == (8, 1, "small")
    assert (last["cluster"]["num_gpus"], last["plan"]["tp"], last["model"]) == (24, 16, "big")
    assert first["plan_mode"] == "best" and first["seed"] == 7
    reordered = dict(reversed(list(first.items())))
    assert point_id(reordered) == tasks[0][0]


def test_zipped_axes_vary_together_and_duplicates_collapse() -> None:
    tasks = expand_points(spec_of({"cluster.num_gpus,plan.tp": [[8, 1], [16, 2], [8, 1]]}))
    assert [(p["cluster"]["num_gpus"], p["plan"]["tp"]) for _, p in tasks] == [(8, 1), (16, 2)]


def test_changing_any_field_changes_the_id() -> None:
    (a, pa), = expand_points(spec_of({}))
    assert point_id(with_override(pa, "plan.tp", 2)) != a
    (b, _), = expand_points(spec_of({}, plan="best"))
    (c, _), = expand_points(spec_of({}, seed=1))
    assert len({a, b, c}) == 3


@pytest.mark.parametrize("bad, field", [
    ({"grid": {"plan.tp": []}}, "grid.plan.tp"),
    ({"grid": {"plan.tp,plan.pp": [[1, 2], [3]]}}, "grid.plan.tp,plan.pp"),
    ({"plan": "fastest"}, "plan:"),
    ({"seed": "zero"}, "seed:"),
    ({"grids": {}}, "grids"),
])
def test_bad_sweep_files_name_the_field(bad: dict, field: str) -> None:
    with pytest.raises(SweepError, match="sweep") as info:
        load_sweep({"base": BASE, **bad})
    assert field in str(info.value) and "\n" not in str(info.value)


def test_base_path_is_relative_to_the_sweep_file(tmp_path: Path) -> None:
    (tmp_path / "scen").mkdir()
    (tmp_path / "scen" / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"base": "scen/base.yaml", "grid": GRID}, sort_keys=False))
    assert expand_points(load_sweep(tmp_path / "s.yaml")) == expand_points(spec_of())
    (tmp_path / "scen" / "cal.yaml").write_text(yaml.safe_dump({"base": "c.yaml"}))
    (tmp_path / "scen" / "c.yaml").write_text(yaml.safe_dump({**BASE, "calibration": "p.yaml"}))
    (_, point), = expand_points(load_sweep(tmp_path / "scen" / "cal.yaml"))
    assert point["calibration"] == str(tmp_path.resolve() / "scen" / "p.yaml")
    (tmp_path / "bad.yaml").write_text("base: [unclosed\n")
    with pytest.raises(SweepError, match="malformed YAML"):
        load_sweep(tmp_path / "bad.yaml")


# ---------------------------------------------------------------- driver, store, resume

def check_frame(frame: pd.DataFrame, tasks: list, stub: ModuleType) -> None:
    """Every point once, in grid order; ok rows equal the stub's closed form; others are errors."""
    assert list(frame["point_id"]) == [pid for pid, _ in tasks]
    for (pid, point), row in zip(tasks, frame.to_dict("records")):
        if point["cluster"]["num_gpus"] % point["plan"]["tp"]:
            assert row["status"] == "error" and "does not divide" in row["error"]
        else:
            assert row["status"] == "ok"
            for key, value in stub.expected_row(point).items():
                assert row[key] == pytest.approx(value) if isinstance(value, float) else row[key] == value


def test_serial_sweep_writes_every_point_once(stub: ModuleType, tmp_path: Path) -> None:
    spec, out = spec_of(), tmp_path / "out"
    report = run_sweep(spec, out, evaluator=STUB, executor=SerialExecutor(), progress=False)
    tasks = expand_points(spec)
    check_frame(report.frame, tasks, stub)
    assert (report.total, report.skipped, report.computed, report.errors) == (18, 0, 18, 4)
    assert sorted(evaluated_ids(tmp_path)) == sorted(pid for pid, _ in tasks)
    on_disk = pd.read_parquet(out / "results.parquet")
    assert list(on_disk["point_id"]) == list(report.frame["point_id"])
    assert list(pd.read_csv(out / "results.csv")["point_id"]) == list(report.frame["point_id"])
    assert set(on_disk["cluster.num_gpus"]) == {8, 16, 24}  # grid values come along as columns


def test_rerun_computes_only_missing_or_corrupt_parts(stub: ModuleType, tmp_path: Path) -> None:
    spec, out = spec_of(), tmp_path / "out"
    run_sweep(spec, out, evaluator=STUB, executor=SerialExecutor(), progress=False)
    tasks = expand_points(spec)
    (parts_dir(out) / f"{tasks[3][0]}.json").unlink()
    (parts_dir(out) / f"{tasks[5][0]}.json").write_text('{"point_id": "trunc')
    (parts_dir(out) / f".{tasks[6][0]}.123.tmp").write_text("{")  # a killed run's temp file
    (tmp_path / "calls.log").unlink()
    report = run_sweep(spec, out, evaluator=STUB, executor=SerialExecutor(), progress=False)
    assert sorted(evaluated_ids(tmp_path)) == sorted([tasks[3][0], tasks[5][0]])
    assert (report.skipped, report.computed) == (16, 2)
    check_frame(report.frame, tasks, stub)
    assert not list(parts_dir(out).glob(".*.tmp"))
    (tmp_path / "calls.log").unlink()
    done = run_sweep(spec, out, evaluator=STUB, executor=LocalExecutor(workers=2), progress=False)
    assert (done.skipped, done.computed) == (18, 0) and not evaluated_ids(tmp_path)
    pd.testing.assert_frame_equal(done.frame, report.frame)


def test_sweep_api_runs_a_file_and_resumes(stub: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"base": BASE, "grid": GRID}))
    first = sweep(tmp_path / "s.yaml", tmp_path / "out", workers=1, progress=False, evaluator=STUB)
    again = sweep(tmp_path / "s.yaml", tmp_path / "out", workers=1, progress=False, evaluator=STUB)
    pd.testing.assert_frame_equal(first, again)
    assert len(evaluated_ids(tmp_path)) == len(first) == 18


def test_retry_errors_recomputes_only_error_rows(stub: ModuleType, tmp_path: Path) -> None:
    spec, out = spec_of(), tmp_path / "out"
    first = run_sweep(spec, out, evaluator=STUB, executor=SerialExecutor(), progress=False)
    (tmp_path / "calls.log").unlink()
    run_sweep(spec, out, evaluator=STUB, executor=SerialExecutor(), progress=False,
              retry_errors=True)
    errors = first.frame.loc[first.frame["status"] == "error", "point_id"]
    assert sorted(evaluated_ids(tmp_path)) == sorted(errors)


def test_process_pool_gives_the_same_table_as_serial(stub: ModuleType, tmp_path: Path) -> None:
    spec = spec_of()
    serial = run_sweep(spec, tmp_path / "a", evaluator=STUB, executor=SerialExecutor(),
                       progress=False)
    pooled = run_sweep(spec, tmp_path / "b", evaluator=STUB, executor=LocalExecutor(workers=2),
                       progress=False)
    pd.testing.assert_frame_equal(serial.frame, pooled.frame)
    assert len(evaluated_ids(tmp_path)) == 2 * 18


def test_a_dead_worker_loses_points_and_a_rerun_recovers(stub: ModuleType, tmp_path: Path) -> None:
    crash = {"sleep_s": 0.0, "crash_once_file": str(tmp_path / "crashed")}
    spec, out = spec_of({"cluster.num_gpus": [8, 16, 32, 64], "stub": [crash]}), tmp_path / "out"
    first = run_sweep(spec, out, evaluator=STUB, executor=LocalExecutor(workers=2), progress=False)
    assert first.lost and len(first.lost) + len(first.frame) - first.skipped == 4
    assert set(first.lost).isdisjoint(first.frame["point_id"])
    second = run_sweep(spec, out, evaluator=STUB, executor=LocalExecutor(workers=2), progress=False)
    assert second.lost == () and len(second.frame) == 4 and second.computed == len(first.lost)


def test_evaluator_errors_become_rows_and_bad_specs_fail_fast(stub: ModuleType) -> None:
    row = evaluate_task(STUB, "abc", {"model": "m", "cluster": {"num_gpus": 8}, "plan": {"tp": 3}})
    assert (row["status"], row["point_id"]) == ("error", "abc") and "tp=3" in row["error"]
    for bad in ("no_colon", "not_a_module_xyz:f", "sweep_stub:missing"):
        with pytest.raises(SweepError, match="evaluator"):
            list(SerialExecutor().run(bad, [("abc", {})]))


def test_interrupt_in_the_api_keeps_finished_points(stub: ModuleType, tmp_path: Path) -> None:
    class InterruptAfter:
        """An executor whose user presses Ctrl-C after three points."""

        def run(self, evaluator, tasks):
            for number, outcome in enumerate(SerialExecutor().run(evaluator, tasks)):
                if number == 3:
                    raise KeyboardInterrupt
                yield outcome

    spec, out = spec_of(), tmp_path / "out"
    with pytest.raises(SweepInterrupted) as info:
        run_sweep(spec, out, evaluator=STUB, executor=InterruptAfter(), progress=False)
    assert len(info.value.report.frame) == 3 == len(read_parts(out))
    assert len(pd.read_parquet(out / "results.parquet")) == 3
    (out / "results.parquet").unlink()
    rebuilt = consolidate(spec, out)  # the tables come back from the parts alone
    pd.testing.assert_frame_equal(rebuilt, info.value.report.frame)
    assert len(pd.read_csv(out / "results.csv")) == 3


# ---------------------------------------------------------------- the CLI under Ctrl-C

def cli(sweep_file: Path, out: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "clustersim.simulator.cli.sweep", "sweep", str(sweep_file),
               "--out", str(out), "--evaluator", STUB, "--no-progress", *extra]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_ctrl_c_leaves_whole_parts_and_rerun_finishes(stub: ModuleType, tmp_path: Path) -> None:
    base = {**BASE, "stub": {"sleep_s": 0.15}}
    sweep_file, out, gate = tmp_path / "sweep.yaml", tmp_path / "out", tmp_path / "gate"
    sweep_file.write_text(yaml.safe_dump({"base": base, "grid": {
        "cluster.num_gpus": [8, 16, 32, 64, 128], "plan.tp": [1, 2, 4, 8]}}))
    gate.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
    # Four points may run; the next ones wait at the gate, so Ctrl-C always finds work in flight.
    first = cli(sweep_file, out, {**env, stub.GATE_ENV: str(gate), stub.ALLOW_ENV: "4"}, "--workers", "2")
    try:
        deadline = time.monotonic() + 60
        while (len(list(parts_dir(out).glob("*.json"))) < 4 or len(list(gate.glob("ticket-*"))) < 6) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=30)
    finally:
        first.kill()
    assert first.returncode == 130, stderr
    done_before = set(read_parts(out))
    assert len(done_before) == 4
    for part in parts_dir(out).glob("*.json"):
        json.loads(part.read_text())  # every part on disk is whole JSON
    assert set(pd.read_csv(out / "results.csv")["point_id"]) == done_before
    open(tmp_path / "calls.log", "w").close()
    second = cli(sweep_file, out, env, "--workers", "2")
    stdout, stderr = second.communicate(timeout=60)
    assert second.returncode == 0, stderr
    assert not done_before & set(evaluated_ids(tmp_path))
    frame = pd.read_parquet(out / "results.parquet")
    assert len(frame) == 20 == frame["point_id"].nunique()


def test_cli_bad_input_is_one_red_line(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"base": BASE, "plan": "fastest"}))
    done = subprocess.run([sys.executable, "-m", "clustersim.simulator.cli.sweep", "sweep",
                           str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "plan" in done.stderr
