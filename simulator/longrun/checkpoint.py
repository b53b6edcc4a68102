"""Checkpoint cost: how long a job stalls to save its state, when it is durable, how long a restore takes.

Owns ``CheckpointSpec`` (the storage path: per-node write bandwidth, shared-storage aggregate
bandwidth, synchronous or asynchronous, sharded or gathered) and ``checkpoint_cost``, which turns
the bytes each device holds into a ``CheckpointCost``. It also owns ``LongRunError``, the error of
the long-run (phase 5) modules. It does not decide when to checkpoint (``clustersim.simulator.longrun.goodput``) nor
what a device holds (``clustersim.simulator.step.partition``; ``clustersim.simulator.cli.goodput`` turns ``Result.memory``
into the bytes each device writes).

Model (all times in seconds, bytes, bytes/s):
- sharded: every node writes its own shards at once; the slower of the node link and the
  storage aggregate gates: ``max(bytes_per_node / node_bw, total_bytes / storage_bw)``.
- gathered: the state is gathered to one writer node, which writes it alone:
  ``total_bytes / min(node_bw, storage_bw)``.
- synchronous: training stalls for the whole write; the checkpoint is durable when it ends.
- asynchronous: training stalls only for the device-to-host snapshot
  (``state_bytes_per_device / snapshot_bandwidth``); the host persists it in the background and
  the checkpoint is durable ``persist_time`` after the snapshot ends.
- restore: the same formula with the read bandwidths (default: the write bandwidths).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustersim.simulator.errors import ClusterSimError

# PCIe 5.0 x16: 32 GT/s x 16 lanes x 128b/130b ~= 63 GB/s per direction (PCI-SIG PCIe 5.0 base
# specification); the H100 SXM host link is PCIe Gen5 x16 (NVIDIA H100 datasheet).
PCIE5_X16_BANDWIDTH = 63.0e9


class LongRunError(ClusterSimError):
    """A checkpoint, failure or long-run input is out of range."""

    stage = "long-run"


@dataclass(frozen=True, kw_only=True)
class CheckpointSpec:
    """Where checkpoints go and how they are written."""

    write_bandwidth_per_node: float
    """Bytes/s one node can write to the checkpoint storage (its front-end NIC share)."""
    storage_bandwidth: float
    """Bytes/s the shared storage sustains for all writers together (aggregate)."""
    asynchronous: bool = False
    """True: stall only for the device-to-host snapshot and persist in the background."""
    sharded: bool = True
    """True: every node writes its own shards; False: gathered to one writer node."""
    snapshot_bandwidth: float = PCIE5_X16_BANDWIDTH
    """Bytes/s per device of the device-to-host copy used by asynchronous checkpoints."""
    read_bandwidth_per_node: float | None = None
    """Bytes/s one node reads on restore; None = write_bandwidth_per_node."""
    storage_read_bandwidth: float | None = None
    """Aggregate bytes/s the storage serves on restore; None = storage_bandwidth."""


@dataclass(frozen=True, kw_only=True)
class CheckpointCost:
    """What one checkpoint and one restore cost for a given job."""

    blocking_time: float
    """Seconds training stalls per checkpoint (write if synchronous, snapshot if asynchronous)."""
    persist_time: float
    """Seconds after the stall ends until the checkpoint is durable (0 if synchronous)."""
    restore_time: float
    """Seconds to read the last checkpoint back after a restart."""
    total_bytes: float
    """Bytes written per checkpoint by the whole job."""
    bytes_per_node: float
    """Bytes written per checkpoint by one node."""


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise LongRunError(f"CheckpointSpec.{name} must be a positive finite bytes/s value, got {value}")


def _validate(spec: CheckpointSpec, state_bytes_per_device: float, num_gpus: int, gpus_per_node: int) -> None:
    _check_positive("write_bandwidth_per_node", spec.write_bandwidth_per_node)
    _check_positive("storage_bandwidth", spec.storage_bandwidth)
    _check_positive("snapshot_bandwidth", spec.snapshot_bandwidth)
    for name in ("read_bandwidth_per_node", "storage_read_bandwidth"):
        value = getattr(spec, name)
        if value is not None:
            _check_positive(name, value)
    if state_bytes_per_device < 0:
        raise LongRunError(f"state_bytes_per_device must be >= 0, got {state_bytes_per_device}")
    if gpus_per_node < 1 or num_gpus < 1 or num_gpus % gpus_per_node:
        raise LongRunError(
            f"num_gpus ({num_gpus}) must be a positive multiple of gpus_per_node ({gpus_per_node})"
        )


def transfer_time(total_bytes: float, bytes_per_node: float, node_bandwidth: float,
                  storage_bandwidth: float, sharded: bool) -> float:
    """Seconds to move one checkpoint between the nodes and the storage (see module docstring)."""
    if sharded:
        return max(bytes_per_node / node_bandwidth, total_bytes / storage_bandwidth)
    return total_bytes / min(node_bandwidth, storage_bandwidth)


def checkpoint_cost(spec: CheckpointSpec, *, state_bytes_per_device: float, num_gpus: int,
                    gpus_per_node: int) -> CheckpointCost:
    """The stall, persistence delay and restore time of one checkpoint of this job.

    ``state_bytes_per_device`` is what each device writes (its unique shard of the state), so a
    checkpoint holds ``state_bytes_per_device * num_gpus`` bytes.
    """
    _validate(spec, state_bytes_per_device, num_gpus, gpus_per_node)
    total = state_bytes_per_device * num_gpus
    per_node = state_bytes_per_device * gpus_per_node
    write = transfer_time(total, per_node, spec.write_bandwidth_per_node, spec.storage_bandwidth,
                          spec.sharded)
    read_node = spec.read_bandwidth_per_node or spec.write_bandwidth_per_node
    read_storage = spec.storage_read_bandwidth or spec.storage_bandwidth
    restore = transfer_time(total, per_node, read_node, read_storage, spec.sharded)
    if spec.asynchronous:
        blocking, persist = state_bytes_per_device / spec.snapshot_bandwidth, write
    else:
        blocking, persist = write, 0.0
    return CheckpointCost(blocking_time=blocking, persist_time=persist, restore_time=restore,
                          total_bytes=total, bytes_per_node=per_node)
