"""Spawning ranks on this machine: one process per rank on loopback, always torn down.

Owns starting ``world_size`` fresh Python processes that run ``clustersim.simulator.calibration.torch_backend.runners``
with the torch.distributed environment (MASTER_ADDR 127.0.0.1, a free port found by binding
port 0, RANK, WORLD_SIZE, LOCAL_RANK, OMP_NUM_THREADS), a wall-clock timeout, killing every
rank when one fails, and reading rank 0's JSON results. It does not import torch.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from clustersim.simulator.errors import CalibrationError


class LaunchError(CalibrationError):
    """A rank failed, hung past its timeout, or torch is missing."""

    stage = "torch-backend"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, world_size: int, port: int, threads: int) -> dict[str, str]:
    """The environment of one rank (torch.distributed env:// rendezvous on loopback)."""
    env = dict(os.environ)
    env.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
    )
    if sys.platform.startswith("linux"):  # gloo on the loopback interface ("lo" on Linux)
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def _kill_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def rank_env_diagnostics(env: dict[str, str]) -> dict[str, str]:
    """``env`` with Python's fault handler on (``PYTHONFAULTHANDLER``): a rank that dies on a fatal
    signal (SIGSEGV, SIGABRT from glibc's heap checks, e.g. "malloc(): unaligned tcache chunk
    detected", issue 21) writes every thread's Python stack to its log, which names the call."""
    return {**env, "PYTHONFAULTHANDLER": env.get("PYTHONFAULTHANDLER") or "1"}


FAILURE_GRACE_S = 10.0
"""Seconds the other ranks get to exit on their own after one fails, before they are killed: a
rank that fails tears down the rendezvous store or its connections, and a slower rank then fails
on the lost connection, sometimes before the first has exited (seen at load 14): the launch
reports the rank whose own error ended the run (``primary``), not the echo."""

SECONDARY: tuple[str, ...] = ("DistNetworkError", "Connection was likely closed", "Connection closed by peer",
                              "Connection reset by peer", "Broken pipe")
"""Error lines of a rank that failed because another one went away (not the cause)."""


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float,
              grace: float = FAILURE_GRACE_S) -> list[int] | None:
    """Ranks that failed (in rank order), [-1] past ``timeout``, or None when all exited 0; after
    the first failure the others get ``grace`` seconds to exit, then the rest are killed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0) for c in codes):
            end = min(deadline, time.monotonic() + grace)
            while time.monotonic() < end and any(p.poll() is None for p in procs):
                time.sleep(0.05)
            codes = [p.poll() for p in procs]
            _kill_all(procs)
            return [i for i, c in enumerate(codes) if c not in (None, 0)]
        if all(c == 0 for c in codes):
            return None
        time.sleep(0.05)
    _kill_all(procs)
    return [-1]


def primary(failed: Sequence[int], logs: Path) -> int:
    """The failed rank to report: the first whose log's last error line is not a lost connection
    (``SECONDARY``), else the first."""
    for rank in failed:
        lines = (logs / f"rank{rank}.log").read_text(errors="replace").splitlines() if rank >= 0 else []
        errors = [ln for ln in lines if "Error" in ln or ln.startswith(FATAL)]
        if errors and not any(s in errors[-1] for s in SECONDARY):
            return rank
    return failed[0]


def launch(tasks: Sequence[Mapping[str, object]], world_size: int, *, timeout: float = 300.0,
           threads: int = 1, log_dir: str | os.PathLike[str] | None = None) -> list[dict[str, object]]:
    """Run ``tasks`` on ``world_size`` fresh ranks; rank 0's results, one dict per task.

    Each rank's output goes to ``log_dir/rank{r}.log`` (kept) or to a temporary folder.
    """
    with tempfile.TemporaryDirectory(prefix="clustersim-torch-") as tmp:
        task_file, out_file = Path(tmp) / "tasks.json", Path(tmp) / "results.json"
        logs_at = Path(log_dir) if log_dir is not None else Path(tmp)
        logs_at.mkdir(parents=True, exist_ok=True)
        task_file.write_text(json.dumps(list(tasks)))
        port = free_port()
        cmd = [sys.executable, "-m", "clustersim.simulator.calibration.torch_backend.runners", str(task_file), str(out_file)]
        logs = [open(logs_at / f"rank{r}.log", "wb") for r in range(world_size)]
        procs = []
        try:
            for r in range(world_size):
                procs.append(subprocess.Popen(cmd, env=rank_env_diagnostics(rank_env(r, world_size, port, threads)),
                                              stdout=logs[r], stderr=subprocess.STDOUT))
            failed = _wait_all(procs, timeout)
        finally:
            _kill_all(procs)
            for f in logs:
                f.close()
        if failed is not None:
            rank = primary(failed, logs_at)
            code = procs[rank].returncode if rank >= 0 else None
            raise LaunchError(_failure_message(rank, world_size, timeout, logs_at, code))
        results: list[dict[str, object]] = json.loads(out_file.read_text())
        return results


FATAL: tuple[str, ...] = ("malloc", "free(", "double free", "corrupted", "munmap_chunk")
"""How glibc's heap checks begin the line they print before they abort the process."""


def _how(code: int | None) -> str:
    """"killed by SIGABRT" for a rank a signal ended (Popen's negative return code), else "failed"."""
    if code is None or code >= 0:
        return "failed"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _failure_message(failed: int, world_size: int, timeout: float, logs: Path, code: int | None = None) -> str:
    """One line: which rank failed and how (the signal that ended it, its last error line), and its log."""
    if failed < 0:
        return f"torch backend: {world_size} ranks ran past timeout {timeout:.0f} s; raise --timeout or shrink the model"
    lines = (logs / f"rank{failed}.log").read_text(errors="replace").strip().splitlines() or ["no output"]
    # the C library's own abort message ("malloc(): ...", "double free ...") names the defect best;
    # then Python's error lines; the fault handler's stack follows in the log
    fatal = [ln for ln in lines if ln.startswith(FATAL)]
    errors = fatal or [ln for ln in lines if "Error" in ln] or lines
    return f"torch backend: rank {failed} of {world_size} {_how(code)}: {errors[-1][:300]} (log: {logs / f'rank{failed}.log'})"
