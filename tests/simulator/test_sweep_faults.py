"""Sweeps under faults: every worker killed, the scheduler killed, the driver signalled.

Local pool (the CLI as a subprocess, its stub points held at a gate so the faults always find
work in flight) and a real Dask cluster on loopback. Checked: the finished points are kept and
the tables written, the lost points are named, the exit status says what happened, no
traceback, and no process of the sweep is left behind when its driver is killed (SIGTERM or
SIGKILL).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import distributed
import pandas as pd
import pytest
import yaml

from clustersim.simulator.sweep.executors import DaskExecutor, SchedulerLost
from clustersim.simulator.sweep.sweep import run_sweep
from clustersim.simulator.sweep.sweep_spec import load_sweep
from clustersim.simulator.sweep.sweep_store import parts_dir, read_parts
from tests.simulator.test_dask_sweep import free_port, start

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STUB = "sweep_stub:evaluate_point"
GRID = {"cluster.num_gpus": [8, 16, 32, 64, 128], "plan.tp": [1, 2, 4, 8]}
BASE = {"model": "small", "cluster": {"num_gpus": 8}, "plan": {"tp": 1}}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux /proc)."""
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            todo += sorted(children - found)
            found |= children
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (zombies count as gone)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(pid)
    return out


def wait_until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(sweep file, out folder, env) of a 20-point stub sweep whose first 2 points run and the
    rest wait at a gate that opens only when the test creates gate/release."""
    sweep_file, out, gate = tmp_path / "sweep.yaml", tmp_path / "out", tmp_path / "gate"
    sweep_file.write_text(yaml.safe_dump({"base": {**BASE, "stub": {"sleep_s": 0.05}}, "grid": GRID}))
    gate.mkdir()
    env = {**ENV, "CLUSTERSIM_STUB_GATE": str(gate), "CLUSTERSIM_STUB_ALLOW": "2"}
    yield sweep_file, out, env
    (gate / "release").touch()


def driver(sweep_file: Path, out: Path, env: dict[str, str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "clustersim.simulator.cli.sweep", "sweep", str(sweep_file), "--out", str(out),
               "--evaluator", STUB, "--no-progress", "--workers", "2"]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def started(process: subprocess.Popen, out: Path) -> set[int]:
    """Wait for two finished points and two workers held at the gate; the driver's descendants."""
    wait_until(lambda: len(list(parts_dir(out).glob("*.json"))) >= 2 and len(descendants(process.pid)) >= 2)
    time.sleep(0.5)  # the workers have taken their gate tickets and wait
    return descendants(process.pid)


@pytest.mark.timeout(120)
def test_every_local_worker_killed_loses_the_rest_and_keeps_what_finished(gated) -> None:
    sweep_file, out, env = gated
    process = driver(sweep_file, out, env)
    try:
        children = started(process, out)
        workers = {pid for pid in children if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()}
        assert len(workers) == 2
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr and "lost 18 point(s)" in stderr and "rerun" in stderr
    assert len(pd.read_csv(out / "results.csv")) == 2 == len(read_parts(out))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_driver_takes_its_pool_with_it(gated, signum: int) -> None:
    sweep_file, out, env = gated
    process = driver(sweep_file, out, env)
    try:
        children = started(process, out)
        assert len(children) >= 2
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
        wait_until(lambda: not alive(children), timeout_s=10)  # nothing left behind
    finally:
        process.kill()
    assert process.returncode == (128 + signum if signum == signal.SIGTERM else -signal.SIGKILL)
    if signum == signal.SIGTERM:
        assert "interrupted (SIGTERM)" in stderr and "Traceback" not in stderr
        assert len(pd.read_csv(out / "results.csv")) == 2


@pytest.mark.timeout(120)
def test_repeated_ctrl_c_still_writes_the_tables(gated) -> None:
    sweep_file, out, env = gated
    process = driver(sweep_file, out, env)
    try:
        children = started(process, out)
        for _ in range(3):
            process.send_signal(signal.SIGINT)
            time.sleep(0.02)
        _, stderr = process.communicate(timeout=30)
        wait_until(lambda: not alive(children), timeout_s=10)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted (SIGINT): 2 of 20 points saved" in stderr and "Traceback" not in stderr
    assert len(pd.read_csv(out / "results.csv")) == 2


# ---------------------------------------------------------------- Dask

@pytest.fixture
def dask_cluster(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen, list[subprocess.Popen]]]:
    """(address, scheduler, workers) of a loopback Dask cluster with two one-thread workers."""
    address = f"tcp://127.0.0.1:{free_port()}"
    scheduler = start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                       address.rsplit(":", 1)[1], "--no-dashboard"], ENV)
    processes = [scheduler]
    try:
        processes += [start(["distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny",
                             "--no-dashboard", "--host", "127.0.0.1", "--name", f"w{i}",
                             "--local-directory", str(tmp_path / "dask")], ENV) for i in range(2)]
        with distributed.Client(address, timeout=30, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, scheduler, processes[1:]
    finally:
        for process in reversed(processes):
            process.kill()
            process.wait(timeout=10)


class KillAfter:
    """Wraps an executor; SIGKILLs ``victims`` once ``after`` results have arrived."""

    def __init__(self, inner: DaskExecutor, victims: list[subprocess.Popen], after: int) -> None:
        self.inner, self.victims, self.after = inner, victims, after

    def run(self, evaluator, tasks):
        for number, outcome in enumerate(self.inner.run(evaluator, tasks), start=1):
            if number == self.after:
                for victim in self.victims:
                    victim.kill()
                    victim.wait(timeout=10)
            yield outcome


SPEC = {"base": {**BASE, "stub": {"sleep_s": 0.3}}, "grid": GRID}


@pytest.mark.timeout(180)
def test_every_dask_worker_killed_times_out_and_names_the_lost_points(dask_cluster, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    address, _, workers = dask_cluster
    executor = KillAfter(DaskExecutor(address=address, no_worker_timeout_s=3.0), workers, after=2)
    started_at = time.monotonic()
    report = run_sweep(load_sweep(SPEC), tmp_path / "out", evaluator=STUB, executor=executor, progress=False)
    assert time.monotonic() - started_at < 60  # it gave up instead of waiting forever
    done = set(read_parts(tmp_path / "out"))
    assert len(done) >= 2 and len(report.lost) == 20 - len(done) and not done & set(report.lost)
    assert set(pd.read_csv(tmp_path / "out" / "results.csv")["point_id"]) == done


@pytest.mark.timeout(180)
def test_a_killed_scheduler_is_one_error_and_keeps_what_finished(dask_cluster, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    address, scheduler, _ = dask_cluster
    executor = KillAfter(DaskExecutor(address=address, no_worker_timeout_s=3.0), [scheduler], after=2)
    with pytest.raises(SchedulerLost, match="lost the scheduler") as info:
        run_sweep(load_sweep(SPEC), tmp_path / "out", evaluator=STUB, executor=executor, progress=False)
    assert "\n" not in str(info.value)
    done = set(read_parts(tmp_path / "out"))
    assert len(done) >= 2
    assert set(pd.read_csv(tmp_path / "out" / "results.csv")["point_id"]) == done
