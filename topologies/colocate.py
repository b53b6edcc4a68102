"""Several jobs on one cluster: which devices each job holds, and the cluster each job sees.

A scheduler hands a job whole servers, or whole NVLink domains where a domain spans several
servers (an NVL72 rack: Slurm's block or segment placement), so a block (``job_block``) is the
unit here. ``job_devices`` lays the jobs' blocks out ``packed`` (each job's blocks one after
another, as a topology-aware scheduler does) or ``interleaved`` (one block of each job in turn,
the fragmented case where neighbours share every leaf switch). ``job_views`` gives each job a
``Cluster`` of its own size whose wiring is the shared cluster's, with its devices renamed
``gpu0 .. gpu{n-1}`` in their physical order (the other jobs' and the idle devices after them):
the job is simulated as usual, and since no edge moves, edge ``e`` of every view is the same
physical link, so one job's link loads apply to another's links by edge id
(``clustersim.simulator.step.colocate``). It places nothing in time and prices nothing.
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

from clustersim.topologies.cluster import Cluster, ensure_valid, register_view
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.graph import Wiring, gpu_name

JobPlacement = Literal["packed", "interleaved"]
JOB_PLACEMENTS: tuple[str, ...] = ("packed", "interleaved")


def job_block(cluster: Cluster) -> int:
    """Devices a scheduler hands out together: one NVLink domain where it spans several servers
    (and holds whole servers), else one server."""
    dom, node = cluster.nvlink_domain_size, cluster.gpus_per_node
    return dom if dom > node and dom % node == 0 else node


def blocks_needed(sizes: Sequence[int], block: int) -> list[int]:
    """Blocks each job needs (its last one may be partly idle)."""
    for i, n in enumerate(sizes):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TopologyError(f"job {i + 1}: {n!r} devices; use a positive integer")
    return [-(-n // block) for n in sizes]


def joint_size(sizes: Sequence[int], block: int) -> int:
    """Devices of the smallest cluster that holds every job on whole blocks."""
    return sum(blocks_needed(sizes, block)) * block


def job_devices(sizes: Sequence[int], block: int, placement: JobPlacement = "packed") -> list[np.ndarray]:
    """Physical device indices of each job, rank order: ``packed`` gives job 0 the first blocks,
    job 1 the next ones, ...; ``interleaved`` deals one block to each job still short of blocks in
    turn. A job uses the first ``n`` devices of its blocks in order."""
    if placement not in JOB_PLACEMENTS:
        raise TopologyError(f"job placement {placement!r}; use one of {list(JOB_PLACEMENTS)}")
    need = blocks_needed(sizes, block)
    owner: list[int] = []
    if placement == "packed":
        for j, k in enumerate(need):
            owner += [j] * k
    else:
        left = list(need)
        while any(left):
            for j in range(len(left)):
                if left[j]:
                    owner.append(j)
                    left[j] -= 1
    out = []
    for j, n in enumerate(sizes):
        mine = [b for b, o in enumerate(owner) if o == j]
        out.append((np.array(mine, dtype=np.int64)[:, None] * block + np.arange(block)).ravel()[:n])
    return out


def job_views(joint: Cluster, sizes: Sequence[int], placement: JobPlacement = "packed") -> tuple[Cluster, ...]:
    """One ``Cluster`` per job: its devices named ``gpu0 ..`` in order on ``joint``'s wiring (every
    edge kept in place, so edge ids are shared by all views)."""
    block = job_block(joint)
    need = joint_size(sizes, block)
    if need > joint.num_gpus:
        raise TopologyError(f"jobs of {list(sizes)} devices need {need} devices on whole blocks of {block}; "
                            f"cluster {joint.name!r} has {joint.num_gpus}: build it with num_gpus >= {need}")
    ensure_valid(joint)
    wiring = joint.columns()
    views = []
    for j, devices in enumerate(job_devices(sizes, block, placement)):
        view = Cluster(name=f"{joint.name} [job {j + 1} of {len(sizes)}, {placement}]", accelerator=joint.accelerator,
                       num_gpus=len(devices), gpus_per_node=joint.gpus_per_node, fabric=joint.fabric,
                       params=joint.params, nic_bandwidth=joint.nic_bandwidth,
                       nvlink_domain_size=joint.nvlink_domain_size, cost_per_gpu_hour=joint.cost_per_gpu_hour,
                       wiring=renamed(wiring, devices, joint.gpus_per_node))
        register_view(view, joint)
        views.append(view)
    return tuple(views)


def renamed(wiring: Wiring, devices: np.ndarray, gpus_per_node: int) -> Wiring:
    """``wiring`` with physical device ``devices[r]`` named ``gpu{r}`` (rank slot r, server
    r // gpus_per_node, local r % gpus_per_node) and the other devices after them in physical
    order; other nodes and every edge unchanged."""
    total = sum(1 for _, a in wiring.nodes if a.get("kind") == "gpu")
    order = list(int(d) for d in devices) + sorted(set(range(total)) - set(int(d) for d in devices))
    new_index = {physical: logical for logical, physical in enumerate(order)}
    nodes = []
    for name, attrs in wiring.nodes:
        if attrs.get("kind") == "gpu":
            i = new_index[int(attrs["rank_slot"])]
            attrs = {**attrs, "rank_slot": i, "server": i // gpus_per_node, "local": i % gpus_per_node,
                     "physical": name}
            name = gpu_name(i)
        nodes.append((name, attrs))
    return Wiring(name=wiring.name, nodes=nodes, src=wiring.src, dst=wiring.dst, bandwidth=wiring.bandwidth,
                  latency=wiring.latency, link_class=wiring.link_class)


def physical_link(view: Cluster, link: str) -> str:
    """A ``"u->v"`` link name of ``view`` with its devices named as on the shared cluster."""
    names = {n: str(a["physical"]) for n, a in (view.wiring.nodes if view.wiring is not None else [])
             if a.get("kind") == "gpu" and "physical" in a}
    u, sep, v = link.partition("->")
    return f"{names.get(u, u)}{sep}{names.get(v, v)}"
