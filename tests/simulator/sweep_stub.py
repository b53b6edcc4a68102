"""A deterministic stand-in for simulator.points.evaluate_point, used only by the sweep tests.

Reads ``cluster.num_gpus``, ``plan.tp`` and ``model`` from the point; raises (an error row) when
tp does not divide the GPU count; sleeps ``stub.sleep_s`` to look like real work; appends the
point's canonical JSON to the file named by $CLUSTERSIM_STUB_LOG after the work (before
any error), so tests can
count evaluations across processes and machines. With ``stub.crash_once_file`` set, the first
call to see that file missing creates it and kills its process (a worker crash).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

LOG_ENV = "CLUSTERSIM_STUB_LOG"


def expected_row(point: Mapping[str, object]) -> dict[str, object]:
    """The row the stub returns for a valid point (a closed form the tests can recompute)."""
    num_gpus, tp = int(point["cluster"]["num_gpus"]), int(point["plan"]["tp"])
    step_time_s = 1.0 + tp / num_gpus + 0.5 * (point["model"] == "big")
    return {"model": point["model"], "num_gpus": num_gpus, "tp": tp, "dp": num_gpus // tp,
            "step_time_s": step_time_s, "tokens_per_s": 1e6 / step_time_s}


def evaluate_point(point: dict[str, object]) -> dict[str, object]:
    """Fake evaluation: validation error if tp does not divide num_gpus, else expected_row."""
    num_gpus, tp = point["cluster"]["num_gpus"], point["plan"]["tp"]
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
