"""Several jobs on one cluster (``topologies.colocate``): which devices each job holds, and views
that keep every edge of the shared wiring in place."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.topologies import TopologyError, ensure_valid, get_cluster
from clustersim.topologies.colocate import job_block, job_devices, job_views, joint_size


def test_packed_and_interleaved_blocks() -> None:
    packed = job_devices([16, 8], 8, "packed")
    assert packed[0].tolist() == list(range(16)) and packed[1].tolist() == list(range(16, 24))
    mixed = job_devices([16, 8], 8, "interleaved")
    assert mixed[0].tolist() == [*range(8), *range(16, 24)] and mixed[1].tolist() == list(range(8, 16))
    partial = job_devices([12, 8], 8, "packed")  # the last block of job 0 is partly idle
    assert partial[0].tolist() == list(range(12)) and partial[1].tolist() == list(range(16, 24))
    assert joint_size([12, 8], 8) == 24


def test_blocks_are_servers_or_whole_nvlink_domains() -> None:
    assert job_block(get_cluster("dgx-h100", 64)) == 8
    assert job_block(get_cluster("gb200-nvl72", 144)) == 72


@pytest.mark.parametrize("placement", ["packed", "interleaved"])
def test_views_rename_devices_and_keep_every_edge(placement: str) -> None:
    joint = get_cluster("dgx-h100", 32)
    views = job_views(joint, [16, 8], placement)
    wiring = joint.columns()
    for view, devices in zip(views, job_devices([16, 8], 8, placement)):
        ensure_valid(view)  # registered: its graph holds the other job's devices too
        assert view.num_gpus == len(devices)
        assert np.array_equal(view.wiring.src, wiring.src) and np.array_equal(view.wiring.dst, wiring.dst)
        nodes = dict(view.wiring.nodes)
        for r, d in enumerate(devices):
            assert nodes[f"gpu{r}"]["physical"] == f"gpu{d}" and nodes[f"gpu{r}"]["server"] == r // 8
        graph, physical = view.graph, joint.graph
        for r, d in enumerate(devices):  # the same switch and NIC as the physical device
            assert set(graph.successors(f"gpu{r}")) == set(physical.successors(f"gpu{d}"))


def test_bad_job_layouts_name_the_fix() -> None:
    joint = get_cluster("dgx-h100", 16)
    with pytest.raises(TopologyError, match="build it with num_gpus >= 24"):
        job_views(joint, [16, 8])
    with pytest.raises(TopologyError, match="use one of"):
        job_devices([8, 8], 8, "scattered")  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="job 2: 0 devices"):
        job_devices([8, 0], 8)


def test_link_names_read_back_as_on_the_shared_cluster() -> None:
    from clustersim.topologies.colocate import physical_link

    second = job_views(get_cluster("dgx-h100", 32), [8, 8], "interleaved")[1]  # devices 8..15
    assert physical_link(second, "gpu0->nvsw1") == "gpu8->nvsw1"
    assert physical_link(second, "leaf0->spine0") == "leaf0->spine0"
