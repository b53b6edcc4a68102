"""What a real step puts on the wire against what the simulator prices: the collective census.

Owns reading the backend's census (``runners.census_plan``: every transport call of one step per
rank, from torch.profiler's ``gloo:*`` events) into a tally of (kind, bytes) -> calls, the same
tally of the simulator's lowering of the plan (``clustersim.simulator.step.lower.step_calls``)
in the transport's terms, and the comparison of the two (``compare``). It times nothing, so it
holds on a loaded machine; it imports no torch.

The transport's terms: bytes in the nccl-tests convention (all-gather and reduce-scatter: the
full buffer); gloo runs ``reduce_scatter_tensor`` as an all-reduce of the full input (its
profiler events say ``all_reduce``), so the simulator's reduce-scatters are tallied as
all-reduces of the same size on gloo; a send and a receive both count as ``send_recv``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from clustersim.simulator.profile import CalibrationProfile, machine_cluster
from clustersim.simulator.calibration.torch_backend.check import model_spec, parallel_plan, training_spec
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan, GPTConfig
from clustersim.simulator.network import CommPricer
from clustersim.simulator.plan import Placement
from clustersim.simulator.step import Costing, step_calls

Tally = Counter[tuple[str, float]]
"""(transport kind, bytes) -> calls in one step on one rank."""

FP32_BYTES = 4
"""The backend trains and communicates in fp32."""

BYTES_TOLERANCE = 0.01
"""Relative tolerance on a call's bytes when matching the two tallies (the simulator counts
parameters from the model's shapes; rounding only)."""


COUNTING_MACHINE: Mapping[str, float] = {"peak_flops": 1e11, "memory_bandwidth": 1e10}
"""Machine figures for a profile-free census: the calls' kinds, sizes and counts do not depend on
them (only their prices would)."""


def measured_tally(rank: Mapping[str, Any], world_size: int) -> Tally:
    """One rank's census entry as a tally; all-gathers from the shard to the full buffer."""
    out: Tally = Counter()
    for op, elements in rank["calls"]:
        size = float(elements) * FP32_BYTES
        kind = {"send": "send_recv", "recv": "send_recv"}.get(str(op), str(op))
        out[(kind, size * world_size if kind == "all_gather" else size)] += 1
    return out


def wire_kind(kind: str, backend: str) -> str:
    """The transport's name for a collective the simulator prices (gloo: reduce-scatter runs as an
    all-reduce of the full buffer)."""
    return "all_reduce" if backend == "gloo" and kind == "reduce_scatter" else kind


def simulated_tallies(plan: BackendPlan, cfg: GPTConfig, backend: str = "gloo",
                      profile: CalibrationProfile | None = None) -> list[Tally]:
    """Per pipeline stage, the calls the simulator's lowering of ``plan`` prices for one device in
    one step, in the transport's terms (every rank of a stage issues the same)."""
    prof = profile or CalibrationProfile(name="census", machine=dict(COUNTING_MACHINE))
    model, training, pplan = model_spec(cfg), training_spec(cfg, plan), parallel_plan(plan, overlap=False)
    cluster = machine_cluster(prof, plan.world_size)
    placement = Placement(pplan, cluster.gpus_per_node)
    costing = Costing(model, training, pplan, cluster.accelerator, prof, CommPricer(cluster, placement, prof))
    out = []
    for calls in step_calls(costing):
        tally: Tally = Counter()
        for call in calls:
            tally[(wire_kind(call.kind, backend), float(call.size))] += call.count
        out.append(tally)
    return out


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    """Calls of one kind and size that one side makes more often than the other."""

    plan: str
    rank: int
    kind: str
    size: float
    """Bytes (nccl-tests convention)."""
    measured: int
    """Calls the real step made."""
    simulated: int
    """Calls the simulator prices."""


def _match(size: float, sizes: Sequence[float]) -> float | None:
    for s in sizes:
        if abs(s - size) <= BYTES_TOLERANCE * max(s, size):
            return s
    return None


def compare(census: Mapping[str, Any], profile: CalibrationProfile | None = None) -> list[Mismatch]:
    """Every (kind, size) whose count differs between a plan's census and the simulator's
    lowering, per rank (rank r of a pipeline is stage r; the others are stage 0). Sizes within
    ``BYTES_TOLERANCE`` count as the same. Empty: every call priced, none invented."""
    plan = BackendPlan(**census["plan"])
    cfg = GPTConfig(**census["model"])
    sims = simulated_tallies(plan, cfg, str(census["backend"]), profile)
    out = []
    for entry in census["ranks"]:
        rank = int(entry["rank"])
        real = measured_tally(entry, int(census["world_size"]))
        sim = Counter(sims[rank if plan.pp > 1 else 0])
        for (kind, size), n in sorted(real.items()):
            same = _match(size, [s for k, s in sim if k == kind])
            got = sim.pop((kind, same), 0) if same is not None else 0
            if got != n:
                out.append(Mismatch(plan=plan.name, rank=rank, kind=kind, size=size, measured=n, simulated=got))
        out += [Mismatch(plan=plan.name, rank=rank, kind=k, size=s, measured=0, simulated=n)
                for (k, s), n in sorted(sim.items()) if n]
    return out


def passes(census: Mapping[str, Any]) -> dict[int, list[tuple[str, int]]]:
    """Per rank, the pipeline passes the real schedule ran, in order, as (F or B, micro-batch)."""
    return {int(r["rank"]): [(str(k), int(mb)) for k, mb in r["passes"]] for r in census["ranks"]}
