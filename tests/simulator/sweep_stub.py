"""A deterministic stand-in for clustersim.simulator.sweep.points.evaluate_point, used only by the sweep tests.

Reads ``cluster.num_gpus``, ``plan.tp`` and ``model`` from the point; raises (an error row) when
tp does not divide the GPU count; sleeps ``stub.sleep_s`` to look like real work; appends the
point's canonical JSON to the file named by $CLUSTERSIM_STUB_LOG after the work (before
any error), so tests can
count evaluations across processes and machines. With ``stub.crash_once_file`` set, the first
call to see that file missing creates it and kills its process (a worker crash).

With $CLUSTERSIM_STUB_GATE naming a folder, calls take numbered tickets there (one file each,
created exclusively, so the count holds across processes); the first $CLUSTERSIM_STUB_ALLOW
calls run, later ones block until the folder holds a file named ``release``. Tests use it to
interrupt a sweep at a known point instead of racing its workers.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

LOG_ENV = "CLUSTERSIM_STUB_LOG"
GATE_ENV, ALLOW_ENV = "CLUSTERSIM_STUB_GATE", "CLUSTERSIM_STUB_ALLOW"


def _take_ticket(gate: str) -> int:
    """The number of this call among all calls that passed the gate folder (0, 1, 2, ...)."""
    number = 0
    while True:
        try:
            os.close(os.open(os.path.join(gate, f"ticket-{number}"), os.O_CREAT | os.O_EXCL))
            return number
        except FileExistsError:
            number += 1


def _wait_at_gate() -> None:
    gate = os.environ.get(GATE_ENV)
    if not gate or _take_ticket(gate) < int(os.environ.get(ALLOW_ENV, "0")):
        return
    while not os.path.exists(os.path.join(gate, "release")):
        time.sleep(0.01)


def expected_row(point: Mapping[str, object]) -> dict[str, object]:
    """The row the stub returns for a valid point (a closed form the tests can recompute)."""
    num_gpus, tp = int(point["cluster"]["num_gpus"]), int(point["plan"]["tp"])
    step_time_s = 1.0 + tp / num_gpus + 0.5 * (point["model"] == "big")
    return {"model": point["model"], "num_gpus": num_gpus, "tp": tp, "dp": num_gpus // tp,
            "step_time_s": step_time_s, "tokens_per_s": 1e6 / step_time_s}


def evaluate_point(point: dict[str, object]) -> dict[str, object]:
    """Fake evaluation: validation error if tp does not divide num_gpus, else expected_row."""
    num_gpus, tp = point["cluster"]["num_gpus"], point["plan"]["tp"]
    _wait_at_gate()
    sleep_s = float(point.get("stub", {}).get("sleep_s", 0.0))
    if sleep_s > 0:
        time.sleep(sleep_s)
    crash_marker = point.get("stub", {}).get("crash_once_file")
    if crash_marker and not os.path.exists(crash_marker):  # die like an OOM-killed worker, once
        open(crash_marker, "w").close()
        os._exit(3)
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(point, sort_keys=True) + "\n")
    if num_gpus % tp:
        raise ValueError(f"plan.tp={tp} does not divide cluster.num_gpus={num_gpus}")
    return expected_row(point)
