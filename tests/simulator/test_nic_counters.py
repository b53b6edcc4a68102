"""The per-NIC counter tracks of the trace (``fabric_sharing="flows"``): the rates the engine logs
on each stage's representative NIC carry exactly the bytes that NIC moves (the integral of the
counter), never exceed the link, survive the steady-state extrapolation (merged, and said so in
the trace), and are absent from the static pricing."""

from __future__ import annotations

import pytest

from clustersim.simulator.plan.plan import ParallelPlan
from clustersim.simulator.profile import default_profile
from clustersim.simulator.step.fluid import category_rate
from clustersim.simulator.step.interval import Interval
from clustersim.simulator.step.simulate import simulate
from clustersim.simulator.step.trace import NIC_TRACKS, trace_events
from clustersim.topologies import get_cluster
from clustersim.workloads import TrainingSpec, get_model

LLAMA = get_model("llama3-8b")
PLAN = ParallelPlan(tp=8, pp=4, dp=1, micro_batch=1)  # pipeline only, sp off: whole activations
CLUSTER = get_cluster("dgx-h100", 32)


def _bytes(intervals: tuple[Interval, ...], stage: int, stream: str) -> float:
    return sum(category_rate(iv.category) * (iv.end - iv.start) for iv in intervals
               if iv.stream == stream and iv.stage == stage)


@pytest.mark.parametrize("gbs", [16, 1024])  # 1,024 micro-batches: the steady state is extrapolated
def test_nic_rates_integrate_to_the_bytes_each_nic_moves(gbs: int) -> None:
    # stage s's GPU 0 sends m activations forward (out) and m gradients back (out, unless it is the
    # first stage) and receives the same from its neighbours (in): m x act bytes per message kind
    training = TrainingSpec(seq_len=2048, global_batch_size=gbs)
    r = simulate(LLAMA, training, CLUSTER, PLAN, fabric_sharing="flows")
    act = 2048 * LLAMA.hidden_size * training.activation_bytes
    for s in range(4):
        sends = (s < 3) + (s > 0)  # forward to s+1, gradient back to s-1
        assert _bytes(r.intervals, s, "nic-out") == pytest.approx(gbs * sends * act, rel=1e-3)
        assert _bytes(r.intervals, s, "nic-in") == pytest.approx(gbs * sends * act, rel=1e-3)
    cap = float(CLUSTER.nic_bandwidth) * default_profile(CLUSTER.accelerator.name).link_eff("nic")
    rates = [category_rate(iv.category) for iv in r.intervals if iv.stream in NIC_TRACKS]
    assert rates and max(rates) <= cap * (1 + 1e-3) and min(rates) > 0
    events = trace_events(r)
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} >= {"NIC out gpu0->nic0 (GB/s)", "NIC in nic0->gpu0 (GB/s)"}
    assert not any(e["ph"] == "X" and e["cat"].startswith("nic_rate") for e in events)  # counters, not slices
    said = [e for e in events if e["ph"] == "i" and "extrapolated" in e["name"]]
    assert bool(said) == (gbs == 1024)  # merged periods are said to be merged, only then


def test_trace_counter_integral_is_the_logged_bytes() -> None:
    # the counter track as Perfetto draws it (each value held until the next sample)
    training = TrainingSpec(seq_len=2048, global_batch_size=16)
    r = simulate(LLAMA, training, CLUSTER, PLAN, fabric_sharing="flows")
    track = sorted((e["ts"], e["args"]["GB/s"]) for e in trace_events(r)
                   if e["ph"] == "C" and e["name"] == "NIC out gpu0->nic0 (GB/s)")
    drawn = sum(v * 1e9 * (t1 - t0) * 1e-6 for (t0, v), (t1, _) in zip(track, track[1:]))
    assert track[-1][1] == 0.0
    assert drawn == pytest.approx(_bytes(r.intervals, 0, "nic-out"), rel=1e-9)


def test_static_pricing_logs_no_nic_rates() -> None:
    r = simulate(LLAMA, TrainingSpec(seq_len=2048, global_batch_size=16), CLUSTER, PLAN)
    assert not any(iv.stream in NIC_TRACKS for iv in r.intervals)
    assert not any(e["ph"] == "C" for e in trace_events(r))
