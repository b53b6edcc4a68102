"""A sweep on a real Dask cluster on loopback survives a worker killed mid-sweep.

Starts a scheduler and two single-threaded workers as subprocesses on 127.0.0.1, runs a sweep of
20 points whose stub evaluator sleeps 0.2 s, SIGKILLs one worker after three results, and checks
every point is in the output exactly once with the stub's closed-form row. Processes are always
torn down.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import distributed
import pandas as pd
import pytest

from clustersim.simulator.sweep.executors import DaskExecutor, SweepError
from clustersim.simulator.sweep.sweep import run_sweep
from clustersim.simulator.sweep.sweep_spec import expand_points, load_sweep
from clustersim.simulator.sweep.sweep_store import parts_dir

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STUB = "sweep_stub:evaluate_point"
SPEC = {"base": {"model": "small", "cluster": {"num_gpus": 8}, "plan": {"tp": 1},
                 "stub": {"sleep_s": 0.2}},
        "grid": {"cluster.num_gpus": [8, 16, 32, 64, 128], "plan.tp": [1, 2, 4, 8]}}


def free_port() -> int:
    """A TCP port nobody listens on right now (bind to port 0, read it, release it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """(scheduler address, [worker processes]) of a live loopback Dask cluster."""
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)]),
           "CLUSTERSIM_STUB_LOG": str(tmp_path / "calls.log")}
    processes = [start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                        address.rsplit(":", 1)[1], "--no-dashboard"], env)]
    try:
        workers = [start(["distributed.cli.dask_worker", address, "--nthreads", "1",
                          "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                          "--name", f"w{index}", "--local-directory", str(tmp_path / "dask")],
                         env) for index in range(2)]
        processes += workers
        with distributed.Client(address, timeout=30, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, workers
    finally:
        for process in reversed(processes):
            process.kill()
            process.wait(timeout=10)


class KillWorkerAfter:
    """Wraps an executor; SIGKILLs a worker process once `after` results have arrived."""

    def __init__(self, inner: DaskExecutor, worker: subprocess.Popen, after: int) -> None:
        self.inner, self.worker, self.after = inner, worker, after

    def run(self, evaluator, tasks):
        for number, outcome in enumerate(self.inner.run(evaluator, tasks), start=1):
            if number == self.after:
                os.kill(self.worker.pid, signal.SIGKILL)
            yield outcome


def test_killed_worker_still_gives_every_point_exactly_once(
        cluster: tuple[str, list[subprocess.Popen]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    import sweep_stub

    address, workers = cluster
    spec, out = load_sweep(SPEC), tmp_path / "out"
    executor = KillWorkerAfter(DaskExecutor(address=address), workers[0], after=3)
    report = run_sweep(spec, out, evaluator=STUB, executor=executor, progress=False)
    assert workers[0].poll() == -signal.SIGKILL  # the worker really died mid-sweep
    tasks = expand_points(spec)
    assert report.lost == () and report.total == 20
    assert list(report.frame["point_id"]) == [pid for pid, _ in tasks]
    assert len(list(parts_dir(out).glob("*.json"))) == 20
    frame = pd.read_parquet(out / "results.parquet")
    assert frame["point_id"].is_unique and len(frame) == 20
    for (_, point), row in zip(tasks, frame.to_dict("records")):
        assert row["status"] == "ok"
        assert row["step_time_s"] == pytest.approx(sweep_stub.expected_row(point)["step_time_s"])
    evaluations = (tmp_path / "calls.log").read_text().splitlines()
    assert len(evaluations) >= 20  # a point the dead worker held may have run twice; output once


def test_unreachable_scheduler_is_a_one_line_error() -> None:
    executor = DaskExecutor(address=f"tcp://127.0.0.1:{free_port()}", connect_timeout_s=1.0)
    with pytest.raises(SweepError, match="--scheduler tcp://127.0.0.1"):
        list(executor.run(STUB, [("abc", {})]))
