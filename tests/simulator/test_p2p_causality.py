"""A pass never starts before its input has arrived over the pipeline link.

The engine ships each pass's output over the p2p link (FIFO, one message at a time); the stage that
needs it may start that pass only once the message has landed, whether it was already waiting
when the send was issued or came to look while the message was still in flight. Checked on the
full run (no extrapolation) of every schedule whose receiving pass carries the sender's label,
with p2p times comparable to the passes so that stages often look while a message is in flight.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from clustersim.simulator.step.costs import Bucket, ChunkCost, StageCost
from clustersim.simulator.step.engine import EngineInput, run


def _input(schedule: str, m: int, pp: int, seed: int) -> EngineInput:
    rng = np.random.default_rng(seed)

    def chunk(k: int) -> ChunkCost:
        f, b, w = rng.uniform(0.5, 1.5), rng.uniform(0.6, 1.8), rng.uniform(0.2, 0.9)
        return ChunkCost(chunk=k, fwd=f, bwd_input=b, bwd_weight=w, recompute=0.0, tp_fwd=0.0, tp_bwd=0.0,
                         cp_fwd=0.0, cp_bwd=0.0, ep_fwd=0.0, ep_bwd=0.0, dp_fwd=0.0, dp_bwd=0.0, flops=1.0,
                         recompute_flops=0.0, buckets=(Bucket(at=1.0, time=0.1),), param_gather=0.0,
                         param_gather_lead=0.0)

    stages = tuple(StageCost(stage=s, chunks=(chunk(s),), p2p=rng.uniform(0.2, 0.9), optimizer=0.1) for s in range(pp))
    return EngineInput(stages=stages, schedule=schedule, microbatches=m, vpp=1, overlap_grad_reduce=True,
                       overlap_param_gather=True, scale=np.ones((1, pp)), step_overhead=0.0)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zb-h1"])
def test_no_pass_starts_before_its_message_lands(schedule: str, seed: int) -> None:
    log, _ = run(_input(schedule, m=12, pp=4, seed=seed), extrapolate=False)
    starts: dict[tuple[int, str], float] = defaultdict(lambda: float("inf"))
    for iv in log:
        if iv.stream == "compute" and iv.category not in ("bubble", "exposed_pp", "exposed_dp"):
            starts[(iv.stage, iv.label)] = min(starts[(iv.stage, iv.label)], iv.start)
    # link (s, fwd) carries s -> s+1, link (s, bwd) carries s+1 -> s (``schedules.destination``)
    arrivals = [(iv.stage + 1 if iv.stream == "p2p-fwd" else iv.stage, iv.label, iv.end)
                for iv in log if iv.category == "p2p"]
    assert arrivals, "the plan sends messages"
    early = [(stage, label, starts[(stage, label)], end) for stage, label, end in arrivals
             if starts[(stage, label)] < end - 1e-12]
    assert not early, f"passes started before their input landed (stage, pass, start, arrival): {early[:5]}"
