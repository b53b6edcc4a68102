"""The Chrome trace follows the Trace Event Format (JSON Object Format) and says what it shows.

Checked against the spec (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
complete events need name, ph, ts, dur, pid, tid; metadata events name processes and threads;
flow events "s"/"f" share an id, cat and name; ``otherData`` holds the run's metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.step.trace import write_trace
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

PLANS = [ParallelPlan(tp=2, pp=4, dp=2, micro_batch=1, zero=1), ParallelPlan(tp=2, pp=2, dp=4, schedule="interleaved", vpp=2)]


@pytest.fixture(scope="module", params=PLANS, ids=lambda p: p.describe())
def trace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, ParallelPlan]:
    plan = request.param
    result = simulate(get_model("llama2-7b"), TrainingSpec(seq_len=4096, global_batch_size=16), get_cluster("dgx-h100", 16), plan)
    path = write_trace(result, tmp_path_factory.mktemp("trace") / "t.json")
    return json.loads(Path(path).read_text()), plan


def test_events_follow_the_spec(trace: tuple[dict, ParallelPlan]) -> None:
    doc, _ = trace
    assert doc["displayTimeUnit"] in ("ms", "ns")
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M", "s", "f"), e
        assert isinstance(e["pid"], int) and e["pid"] >= 1 and isinstance(e["tid"], int), e
        if e["ph"] == "X":
            assert {"name", "ts", "dur", "cat"} <= set(e) and e["dur"] >= 0 and e["ts"] >= 0
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index") and "args" in e


def test_one_named_process_per_stage(trace: tuple[dict, ParallelPlan]) -> None:
    doc, plan = trace
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == list(range(1, plan.pp + 1))
    assert sorted(names.values()) == sorted(f"stage {s}" for s in range(plan.pp))
    used = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert used == set(names)


def test_slice_args_and_distinct_names(trace: tuple[dict, ParallelPlan]) -> None:
    doc, plan = trace
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    compute = [e for e in xs if e["cat"] == "compute"]
    assert compute and all({"micro_batch", "chunk", "pass"} <= set(e["args"]) for e in compute)
    assert {e["args"]["chunk"] for e in compute} == set(range(plan.vpp))
    p2p = [e for e in xs if e["cat"] == "p2p"]
    size = 1 * 4096 * 4096 * 2 / (plan.tp if plan.sp else 1)  # mb x seq x hidden x bf16 (/ tp with SP)
    assert p2p and all(e["args"]["bytes"] == size for e in p2p)
    assert all(e["args"]["link"].startswith("stage ") for e in p2p)
    tp = [e for e in xs if e["cat"] == "exposed_tp"]
    assert tp and all(e["name"].startswith("exposed TP") and e["args"]["algorithm"] for e in tp)
    assert not {e["name"] for e in tp} & {e["name"] for e in compute}
    dp = [e for e in xs if e["cat"] == "dp_comm"]
    assert dp and any("bytes" in e["args"] for e in dp)  # a gradient bucket names its collective and size


def test_flows_connect_stages(trace: tuple[dict, ParallelPlan]) -> None:
    doc, plan = trace
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert starts and set(starts) == set(ends)
    for i, s in starts.items():
        f = ends[i]
        assert s["name"] == f["name"] and s["cat"] == f["cat"] and f["ts"] >= s["ts"] and f["bp"] == "e"
    receivers = {f["pid"] for f in ends.values()}
    assert receivers == set(range(1, plan.pp + 1))  # activations reach every later stage, gradients every earlier one


def test_run_metadata(trace: tuple[dict, ParallelPlan]) -> None:
    doc, plan = trace
    other = doc["otherData"]
    assert other["model"] == "llama2-7b" and other["num_gpus"] == 16 and other["plan"]["pp"] == plan.pp
    assert other["version"] and other["input_hash"] and other["step_time_s"] > 0
