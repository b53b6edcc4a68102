"""Where sweep points are evaluated: in this process, on a local process pool, or on a Dask cluster.

Owns: running one evaluator over many points and handing each point's row back to the driver as
soon as it is done, in completion order; stopping the workers when the driver stops listening
(Ctrl-C, an error); turning an evaluator that raises into an error row rather than a crash.

Does not own: the grid, point ids, files, resume or progress (``clustersim.simulator.sweep.sweep``), nor what a
point means (the evaluator, by default ``clustersim.simulator.sweep.points.evaluate_point``). Executors never write
files: the driver does, so Dask workers need no shared disk.

The evaluator travels as a dotted spec ``"package.module:function"`` and each worker imports it
itself; only strings and plain dicts cross process boundaries. On a Dask cluster the workers must
be able to import ``simulator`` and the evaluator's module (install the package on them, or start
them with PYTHONPATH set). ``distributed`` is imported only when a Dask executor runs, so local
pool workers start without paying for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Generator, Protocol

from clustersim.simulator.errors import ClusterSimError

if TYPE_CHECKING:
    from distributed import Client

Task = tuple[str, Mapping[str, object]]
"""One unit of work: (point_id, point mapping)."""

Outcome = tuple[str, dict[str, object] | None, str]
"""What an executor yields: (point_id, row, note); row is None when the point was lost (a worker
crash the executor could not recover from); note then says why."""
Outcomes = Generator[Outcome, None, None]
"""An executor's outcome stream: a generator, so the sweep can close it (stopping the workers)."""


class SweepError(ClusterSimError):
    """A sweep file, an output folder, an evaluator spec or a scheduler address is unusable."""

    stage = "sweep"


class SchedulerLost(SweepError):
    """The Dask scheduler went away mid-sweep (finished points are saved)."""


def resolve_evaluator(spec: str) -> Callable[[dict[str, object]], Mapping[str, object]]:
    """Import ``"package.module:function"`` and return the function."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SweepError(f"evaluator {spec!r}: expected 'package.module:function', e.g. "
                         f"'clustersim.simulator.sweep.points:evaluate_point'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SweepError(f"evaluator {spec!r}: cannot import {module_name!r} ({exc}); install it "
                         f"or put it on PYTHONPATH") from exc
    function: Callable[[dict[str, object]], Mapping[str, object]] | None = getattr(module, attr, None)
    if not callable(function):
        raise SweepError(f"evaluator {spec!r}: {module_name} has no function {attr!r}")
    return function


def evaluate_task(evaluator: str, point_id: str, point: Mapping[str, object]) -> dict[str, object]:
    """Evaluate one point in whatever process runs this; never raises for a bad point.

    A point the evaluator rejects (it raised) becomes a row with ``status="error"`` and the
    message, so one bad point never stops a sweep.
    """
    function = resolve_evaluator(evaluator)
    try:
        row = dict(function(dict(point)))
    except Exception as exc:  # a failing point is a row, not a crash (see module docstring)
        row = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    row.setdefault("status", "ok")
    row.setdefault("error", "")
    row["point_id"] = point_id
    return row


class Executor(Protocol):
    """Anything that turns tasks into outcomes, yielded as they complete."""

    def run(self, evaluator: str, tasks: Sequence[Task]) -> Outcomes:
        """Yield one outcome per task, in completion order; stop workers when closed early."""
        ...


@dataclass(frozen=True, kw_only=True)
class SerialExecutor:
    """Evaluates points one after another in this process (workers=1; easiest to debug)."""

    def run(self, evaluator: str, tasks: Sequence[Task]) -> Outcomes:
        """Yield each task's row in task order."""
        resolve_evaluator(evaluator)  # fail fast on a bad spec, before any point runs
        for point_id, point in tasks:
            yield point_id, evaluate_task(evaluator, point_id, point), ""


def default_workers() -> int:
    """Local pool size when none is given: min(2, CPUs available to this process)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, min(2, len(os.sched_getaffinity(0))))
    return max(1, min(2, os.cpu_count() or 1))


PR_SET_PDEATHSIG = 1
"""Linux prctl option: the signal a process gets when its parent dies."""


def _worker_init(driver_pid: int) -> None:
    """Pool worker initializer: Ctrl-C is the driver's to handle (it then stops the workers),
    and the worker dies with the driver, even when the driver is SIGKILLed: the kernel sends it
    SIGKILL (Linux prctl PR_SET_PDEATHSIG), and a watchdog thread exits when the parent pid
    changes (any POSIX system; also closes the race with a driver dying during start-up)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    threading.Thread(target=_exit_with_parent, args=(driver_pid,), daemon=True, name="parent-watch").start()


def _exit_with_parent(driver_pid: int, poll_s: float = 0.5) -> None:
    while os.getppid() == driver_pid:
        time.sleep(poll_s)
    os._exit(1)


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel queued points and terminate the workers now (running points are abandoned).

    Python 3.11 has no public way to terminate a pool's workers (3.14 adds terminate_workers),
    so this reads the executor's process table; without it, exit would wait for running points.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()


def _pool_outcome(point_id: str, future: Future[dict[str, object]]) -> Outcome:
    """The outcome of a finished pool future; a dead worker loses the point, not the sweep."""
    try:
        return point_id, future.result(), ""
    except Exception as exc:  # BrokenProcessPool: a worker died (OOM-killed, segfault)
        return point_id, None, f"worker failed: {type(exc).__name__}: {exc}"


@dataclass(frozen=True, kw_only=True)
class LocalExecutor:
    """A pool of ``workers`` spawned processes on this machine (concurrent.futures).

    Spawned workers re-import the caller's main module, so drive it from a script, ``-m``
    module, notebook or test, not from code piped into ``python -``.
    """

    workers: int
    """Number of worker processes (>= 1)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise SweepError(f"workers={self.workers}: must be >= 1 (use 1 for serial runs)")

    def run(self, evaluator: str, tasks: Sequence[Task]) -> Outcomes:
        """Submit every task, then yield rows as workers finish them."""
        resolve_evaluator(evaluator)
        # spawn, not fork: the driver runs a progress-bar thread, and fork copies locks held by it
        pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_worker_init, initargs=(os.getpid(),),
                                   mp_context=multiprocessing.get_context("spawn"))
        try:
            futures = {pool.submit(evaluate_task, evaluator, pid, dict(point)): pid
                       for pid, point in tasks}
            for future in as_completed(futures):
                yield _pool_outcome(futures[future], future)
        except BaseException:  # Ctrl-C or the consumer closed us: do not wait for running points
            _kill_pool(pool)
            raise
        pool.shutdown(wait=True)


def task_key(evaluator: str, point_id: str) -> str:
    """Dask key of a point: stable, so resubmitting a point reuses the scheduler's task."""
    tag = hashlib.sha256(evaluator.encode()).hexdigest()[:8]
    return f"clustersim-point-{point_id}-{tag}"


@dataclass(frozen=True, kw_only=True)
class DaskExecutor:
    """Tasks on a running dask.distributed scheduler; a killed worker's tasks are rerun.

    Faults: with no worker alive for ``no_worker_timeout_s`` the remaining points are lost
    (yielded with a note; the driver keeps what finished and exits non-zero); a lost scheduler
    is a ``SchedulerLost`` error, raised after at most ``no_worker_timeout_s``.
    """

    address: str
    """Scheduler address, e.g. ``tcp://10.0.0.5:8786``."""
    connect_timeout_s: float = 10.0
    """Seconds to wait for the scheduler before giving up."""
    no_worker_timeout_s: float = 60.0
    """Seconds without any worker (or without the scheduler) before the remaining points are lost."""
    poll_s: float = 0.2
    """How often the driver looks at the futures' states."""

    def run(self, evaluator: str, tasks: Sequence[Task]) -> Outcomes:
        """Submit every task keyed by its point id; yield rows as they complete."""
        self._probe()  # an unreachable address fails in milliseconds, before distributed is imported
        # deferred import: distributed costs ~1 s to import, and local pool workers import us
        import distributed

        client = self._connect(distributed)
        futures = []
        try:
            ids = [pid for pid, _ in tasks]
            futures = client.map(evaluate_task, [evaluator] * len(tasks), ids,
                                 [dict(point) for _, point in tasks], pure=True,
                                 key=[task_key(evaluator, pid) for pid in ids])
            yield from self._watch(client, dict(zip(futures, ids)))
        except BaseException:
            with contextlib.suppress(Exception):
                client.cancel(futures)  # type: ignore[no-untyped-call]  # distributed leaves Client.cancel unannotated
            raise
        finally:
            with contextlib.suppress(Exception):
                client.close(timeout=2)  # type: ignore[no-untyped-call]  # distributed leaves Client.close unannotated

    def _watch(self, client: Client, pending: dict[object, str]) -> Outcomes:
        """Yield each future's outcome as its state leaves 'pending'; watch workers and scheduler."""
        idle_s = 0.0
        fetch_timeouts: dict[object, int] = {}
        while pending:
            finished = [f for f in pending if f.status != "pending"]  # type: ignore[attr-defined]  # pending maps distributed Futures (typed object: distributed loads lazily)
            if any(f.status == "cancelled" for f in finished) and client.status != "running":  # type: ignore[attr-defined]  # distributed Future.status / Client.status
                raise self._lost(len(pending))  # the client cancels everything when the scheduler goes
            for future in finished:
                result = _dask_result(future)
                if isinstance(result, TimeoutError) and self._refetch(fetch_timeouts, future):
                    continue  # its row was on a worker that died: Dask recomputes it; ask again
                yield _dask_outcome(pending.pop(future), result)
            if finished:
                idle_s = 0.0
                continue
            time.sleep(self.poll_s)
            idle_s = idle_s + self.poll_s if self._no_workers(client) else 0.0
            if idle_s >= self.no_worker_timeout_s:
                if client.status != "running":
                    raise self._lost(len(pending))
                note = f"no Dask worker alive for {self.no_worker_timeout_s:g} s"
                for future, pid in list(pending.items()):
                    yield pid, None, note
                return

    def _refetch(self, timeouts: dict[object, int], future: object) -> bool:
        """True while a finished point whose result could not be fetched (its worker died and Dask
        is recomputing it) may be asked again: up to ``no_worker_timeout_s`` worth of fetches."""
        timeouts[future] = timeouts.get(future, 0) + 1
        return timeouts[future] * FETCH_TIMEOUT_S < self.no_worker_timeout_s

    def _probe(self) -> None:
        """A TCP connection to a ``tcp://host:port`` address opens, or a SweepError says why."""
        scheme, _, rest = self.address.partition("://")
        if scheme != "tcp":
            return  # tls://, ucx://, inproc://: left to distributed
        host, _, port = rest.rpartition(":")
        if not host or not port.isdigit():
            raise SweepError(f"--scheduler {self.address}: expected tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=min(self.connect_timeout_s, 5.0)).close()
        except OSError as exc:
            raise SweepError(f"--scheduler {self.address}: cannot connect ({exc}); start `dask scheduler` there "
                             f"or fix the address") from None

    def _lost(self, not_done: int) -> SchedulerLost:
        return SchedulerLost(f"--scheduler {self.address}: lost the scheduler with {not_done} points not done; "
                             "finished points are saved, restart the scheduler and rerun to resume")

    def _connect(self, distributed: ModuleType) -> Client:
        """A client of the scheduler, or a SweepError naming the address."""
        try:
            client: Client = distributed.Client(self.address, timeout=self.connect_timeout_s,
                                                set_as_default=False)
            return client
        except (OSError, TimeoutError, ValueError) as exc:
            raise SweepError(f"--scheduler {self.address}: cannot connect within "
                             f"{self.connect_timeout_s:g} s ({exc}); start `dask scheduler` there "
                             f"or fix the address") from exc

    @staticmethod
    def _no_workers(client: Client) -> bool:
        """True when the client has lost the scheduler or the scheduler has no worker."""
        if client.status != "running":
            return True
        try:
            return not client.scheduler_info(n_workers=-1).get("workers")
        except Exception:  # the scheduler went away between the status check and the call
            return True

FETCH_TIMEOUT_S = 5.0
"""Seconds to wait for one finished point's row; a fetch that times out is retried (see _refetch)."""


def _dask_result(future: object) -> dict[str, object] | BaseException:
    """A done future's row, or its exception (error, cancelled, lost with the scheduler)."""
    try:
        row: dict[str, object] = future.result(timeout=FETCH_TIMEOUT_S)  # type: ignore[attr-defined]  # a distributed.Future of evaluate_task
        return row
    except BaseException as exc:  # noqa: BLE001 - the point is lost, the sweep goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        return exc


def _dask_outcome(point_id: str, result: dict[str, object] | BaseException) -> Outcome:
    """The outcome of a finished Dask task; an exception (KilledWorker after repeated worker
    deaths, a cancelled task) loses the point."""
    if isinstance(result, BaseException):
        return point_id, None, f"task failed: {type(result).__name__}: {result}"
    return point_id, result, ""


def make_executor(*, scheduler: str | None, workers: int) -> Executor:
    """Dask when a scheduler address is given, else a local pool (serial when workers == 1)."""
    if scheduler:
        return DaskExecutor(address=scheduler)
    if workers == 1:
        return SerialExecutor()
    return LocalExecutor(workers=workers)
