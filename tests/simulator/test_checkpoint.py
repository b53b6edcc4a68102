"""Checkpoint cost: closed forms of the sharded/gathered and sync/async write and restore times."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.longrun.checkpoint import CheckpointSpec, LongRunError, checkpoint_cost, transfer_time

GB = 1e9


def _cost(spec: CheckpointSpec, per_device: float = 4 * GB, gpus: int = 64, per_node: int = 8):
    return checkpoint_cost(spec, state_bytes_per_device=per_device, num_gpus=gpus, gpus_per_node=per_node)


def test_sharded_node_bound_closed_form() -> None:
    # 8 x 4 GB per node at 10 GB/s = 3.2 s; 64 x 4 GB = 256 GB at 1 TB/s = 0.256 s: the node gates
    cost = _cost(CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=1000 * GB))
    assert cost.blocking_time == pytest.approx(32 * GB / (10 * GB))
    assert cost.persist_time == 0.0
    assert cost.total_bytes == pytest.approx(256 * GB)


def test_sharded_storage_bound_closed_form() -> None:
    # 256 GB at 20 GB/s aggregate = 12.8 s > 32 GB / 10 GB/s per node
    cost = _cost(CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=20 * GB))
    assert cost.blocking_time == pytest.approx(256 / 20)


def test_llama3_tectonic_figures() -> None:
    # Llama 3 paper (The Llama 3 Herd of Models, sec. 3.3.1): Tectonic sustains 2 TB/s; each GPU
    # saves 1 MB to 4 GB of state. 16,384 GPUs x 4 GB / 2 TB/s = 32.77 s when storage gates.
    spec = CheckpointSpec(write_bandwidth_per_node=50 * GB, storage_bandwidth=2e12)
    cost = _cost(spec, per_device=4 * GB, gpus=16384)
    assert cost.blocking_time == pytest.approx(16384 * 4 * GB / 2e12)


def test_gathered_is_never_faster_than_sharded() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        node, storage, size = rng.uniform(1, 100, 3) * GB
        sharded = transfer_time(size * 64, size * 8, node, storage, sharded=True)
        gathered = transfer_time(size * 64, size * 8, node, storage, sharded=False)
        assert gathered >= sharded
        assert gathered == pytest.approx(size * 64 / min(node, storage))


def test_async_stalls_only_for_the_snapshot() -> None:
    sync = _cost(CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=1000 * GB))
    spec = CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=1000 * GB,
                          asynchronous=True, snapshot_bandwidth=50 * GB)
    cost = _cost(spec)
    assert cost.blocking_time == pytest.approx(4 / 50)
    assert cost.persist_time == pytest.approx(sync.blocking_time)
    assert cost.blocking_time < sync.blocking_time


def test_restore_uses_read_bandwidths() -> None:
    spec = CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=1000 * GB,
                          read_bandwidth_per_node=40 * GB)
    cost = _cost(spec)
    assert cost.restore_time == pytest.approx(32 / 40)
    assert cost.restore_time < cost.blocking_time


def test_cost_grows_with_state_bytes() -> None:
    spec = CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=30 * GB)
    times = [_cost(spec, per_device=b * GB).blocking_time for b in (0.5, 1, 2, 4, 8)]
    assert all(a < b for a, b in zip(times, times[1:]))


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(LongRunError, match="storage_bandwidth"):
        _cost(CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=0.0))
    with pytest.raises(LongRunError, match="gpus_per_node"):
        _cost(CheckpointSpec(write_bandwidth_per_node=10 * GB, storage_bandwidth=1 * GB), gpus=12)
