"""Jobs that share one cluster: each job's step with the others' traffic on the links they share.

Owns ``Job``, ``colocate`` and its ``Colocation``. Each job runs on its view of the shared cluster
(``clustersim.topologies.colocate.job_views``: its devices, packed or interleaved, on one wiring) with
the flows over time (``fabric_sharing="flows"``), alone first. Then every job is simulated again
with the capacity the others take away (``FabricLoad.taken``, per link id): on each link, the
others' streams' bytes per second averaged over their steps (``Result.link_rates``), taking at
most the share max-min fairness leaves them while this job also sends, 1 - 1 / (1 + others using
the link). Their rates are re-read from the shared runs and averaged with the previous ones (a
damped fixed point) until no step time moves by more than ``tolerance``. The other end of the
band: each job again with every link the others use held at the fair share whenever it sends
(``aligned``: their bursts always coincide with its own), an upper bound of the shared step.

The approximation: a neighbour is a steady stream at its mean rate, not its bursts (the fluid
model of ``clustersim.simulator.network.sharing`` between the jobs' time averages); a job's TP, CP and
in-pass EP traffic priced alone is neither taken from nor counted (it stays inside a server or an
NVLink domain, whose links the jobs do not share). With nothing shared the shared step is the
alone step exactly (a test).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from clustersim.simulator.errors import PlanError
from clustersim.simulator.network import DEFAULT_FIDELITY, FabricLoad, Fidelity, fabric_of
from clustersim.simulator.plan import ParallelPlan
from clustersim.simulator.profile import CalibrationProfile, default_profile
from clustersim.simulator.step.result import Result
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import Cluster
from clustersim.topologies.colocate import JobPlacement, job_views, physical_link
from clustersim.workloads import ModelSpec, TrainingSpec

DAMPING: float = 0.5
"""Weight of the newest rates in the fixed point (the rest: the previous iterate's)."""


@dataclass(frozen=True, kw_only=True)
class Job:
    """One training job: its workload and plan (its devices come from the placement)."""

    name: str
    model: ModelSpec
    training: TrainingSpec
    plan: ParallelPlan
    profile: CalibrationProfile | None = None


@dataclass(frozen=True, kw_only=True)
class JobOutcome:
    """One job's step alone on the shared cluster and beside the others."""

    name: str
    alone: Result
    shared: Result
    """Beside the others' time-averaged traffic (the fixed point)."""
    aligned: Result
    """With the others' bursts always on its own: every link they use at the fair share."""

    @property
    def slowdown(self) -> float:
        """Shared step time over alone, minus 1."""
        return self.shared.step_time / self.alone.step_time - 1.0

    @property
    def slowdown_aligned(self) -> float:
        """Aligned step time over alone, minus 1 (the band's upper end)."""
        return self.aligned.step_time / self.alone.step_time - 1.0


@dataclass(frozen=True, kw_only=True)
class Colocation:
    """What sharing one cluster did to each job."""

    cluster: str
    num_gpus: int
    placement: str
    jobs: tuple[JobOutcome, ...]
    iterations: int
    converged: bool
    shared_links: tuple[dict[str, Any], ...]
    """Links more than one job uses, busiest first: name and each job's utilisation (shared runs)."""

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "num_gpus": self.num_gpus, "placement": self.placement,
                "iterations": self.iterations, "converged": self.converged,
                "jobs": [{"name": o.name, "num_gpus": o.alone.num_gpus, "step_time_alone_s": o.alone.step_time,
                          "step_time_shared_s": o.shared.step_time, "slowdown": o.slowdown,
                          "step_time_aligned_s": o.aligned.step_time, "slowdown_aligned": o.slowdown_aligned,
                          "lost_to_sharing_s": dict(o.shared.fabric.get("lost_to_sharing_s", {}))}
                         for o in self.jobs],
                "shared_links": [dict(x) for x in self.shared_links]}


def colocate(jobs: Sequence[Job], cluster: Cluster, placement: JobPlacement = "packed", *,
             fidelity: Fidelity = DEFAULT_FIDELITY, tolerance: float = 1e-3, max_iterations: int = 20,
             top: int = 10) -> Colocation:
    """Simulate ``jobs`` side by side on ``cluster`` (which holds them all on whole blocks)."""
    if len(jobs) < 2:
        raise PlanError(f"colocate: {len(jobs)} job(s); give two or more to share a cluster")
    if not 0 < tolerance < 1 or max_iterations < 1:
        raise PlanError(f"colocate: tolerance = {tolerance}, max_iterations = {max_iterations}; use 0 < tolerance < 1 "
                        "and at least one iteration")
    views = job_views(cluster, [j.plan.world_size for j in jobs], placement)
    profiles = [j.profile or default_profile(v.accelerator.name) for j, v in zip(jobs, views)]
    capacity = [fabric_of(v, p).capacity for v, p in zip(views, profiles)]

    def run(i: int, load: FabricLoad | None) -> Result:
        j = jobs[i]
        return simulate(j.model, j.training, views[i], j.plan, profile=profiles[i], fidelity=fidelity,
                        fabric_sharing="flows", fabric_load=load)

    alone = [run(i, None) for i in range(len(jobs))]
    rates = [_rates(r) for r in alone]
    shared = alone
    converged, it = False, 0
    for it in range(1, max_iterations + 1):
        new = [run(i, FabricLoad(taken=taken_by_others(rates, i, capacity[i]))) for i in range(len(jobs))]
        moved = max(abs(n.step_time / s.step_time - 1.0) for n, s in zip(new, shared))
        shared = new
        rates = [DAMPING * _rates(n) + (1 - DAMPING) * r for n, r in zip(new, rates)]
        if moved <= tolerance:
            converged = True
            break
    used = [_rates(a) for a in alone]
    aligned = [run(i, FabricLoad(taken=fair_share_taken(used, i))) for i in range(len(jobs))]
    outcomes = tuple(JobOutcome(name=j.name, alone=physical(a, v), shared=physical(s, v), aligned=physical(w, v))
                     for j, v, a, s, w in zip(jobs, views, alone, shared, aligned))
    wiring = cluster.columns()

    def names(e: int) -> str:  # the physical names (every view renames the devices)
        return f"{wiring.nodes[int(wiring.src[e])][0]}->{wiring.nodes[int(wiring.dst[e])][0]}"

    return Colocation(cluster=cluster.name, num_gpus=cluster.num_gpus, placement=placement, jobs=outcomes,
                      iterations=it, converged=converged,
                      shared_links=shared_links([_rates(s) for s in shared], capacity, names, [j.name for j in jobs], top))


def physical(result: Result, view: Cluster) -> Result:
    """``result`` with the links its fabric report and collectives name as on the shared cluster
    (a view names the job's devices ``gpu0 ..``)."""
    fabric = dict(result.fabric)
    if "hottest_links" in fabric:
        fabric["hottest_links"] = [{**x, "link": physical_link(view, x["link"])} for x in fabric["hottest_links"]]
    collectives = tuple({**c, "busiest_link": physical_link(view, c["busiest_link"])} if c.get("busiest_link") else c
                        for c in result.collectives)
    return dataclasses.replace(result, fabric=fabric, collectives=collectives)


def _rates(result: Result) -> np.ndarray:
    assert result.link_rates is not None, "a flows run has link rates"
    return result.link_rates


def taken_by_others(rates: Sequence[np.ndarray], i: int, capacity: np.ndarray) -> np.ndarray:
    """Fraction of each link of job ``i`` the other jobs take: their summed bytes/s over the link's
    capacity, at most 1 - 1 / (1 + k) where k of them use it (the share max-min fairness leaves
    them while job ``i`` sends too)."""
    others = [r for k, r in enumerate(rates) if k != i]
    load = np.sum(others, axis=0) / capacity
    users = np.sum([r > 0 for r in others], axis=0)
    taken: np.ndarray = np.minimum(load, 1.0 - 1.0 / (1.0 + users))
    return taken


def fair_share_taken(rates: Sequence[np.ndarray], i: int) -> np.ndarray:
    """What the others take from job ``i`` if they always send while it does: 1 - 1 / (1 + k) of
    every link k of them use, nothing elsewhere."""
    users = np.sum([r > 0 for k, r in enumerate(rates) if k != i], axis=0)
    taken: np.ndarray = 1.0 - 1.0 / (1.0 + users)
    return taken


def shared_links(rates: Sequence[np.ndarray], capacity: Sequence[np.ndarray], name: Any, jobs: Sequence[str],
                 top: int) -> tuple[dict[str, Any], ...]:
    """The ``top`` links used by two or more jobs, by their summed utilisation."""
    util = np.array([r / c for r, c in zip(rates, capacity)])
    both = np.flatnonzero((util > 0).sum(axis=0) >= 2)
    order = both[np.argsort(-util[:, both].sum(axis=0), kind="stable")][:top]
    return tuple({"link": name(int(e)), **{f"utilisation {n}": float(util[k, e]) for k, n in enumerate(jobs)}}
                 for e in order)
