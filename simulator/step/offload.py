"""Activation CPU offloading: the time its host copies add to a chunk's forward and backward.

Owns the time model of Megatron-Core's ``cpu_offloading_num_layers`` (``plan.cpu_offloading_num_layers``),
which hands the first n of a chunk's L layers to Transformer Engine's CPU offload context, the
double-buffered handler ``AsyncDoubleBufferGroupOffloadHandler`` of NVIDIA/TransformerEngine
``transformer_engine/pytorch/cpu_offload.py`` (the windowed 2025 version, stored copy 2533685364,
which Megatron-Core calls with ``num_model_group`` = L):

- ``layer_window_map`` spreads the n copies over the L layers: group k (layer k) must be on the host
  by the commit of layer ``w_k`` (``layer_windows``: w_k ~ (k + 1) L / n - 1, the remainder spread
  over the first groups, w_{n-1} = L - 1).
- forward: group 0's device-to-host copy starts at layer 0's commit; at the commit of ``w_k`` the
  compute stream waits for the copy stream (``synchronize_on_group_commit_forward``, "stream
  synchronization both ways") and group k + 1's copy starts. Copy k thus runs behind the forward of
  the layers ``w_{k-1} + 1 .. w_k`` (``1 .. w_0`` for k = 0); what it outlasts them by is exposed.
- backward: at the backward commit of ``w_k`` the compute stream waits for the previous reload and
  group k's host-to-device copy starts (``on_group_commit_backward``); it runs behind the backward of
  the same layers, ``w_k`` down to ``w_{k-1} + 1``, before layer k needs it.

Exposed per micro-batch, each direction: sum over k of max(0, bytes_k / host_bandwidth - window_k),
window_k the compute seconds of its layers. With one layer per window (n > L / 2 for most groups)
this is the per-layer max(0, copy - next layer's compute). The two directions run on their own
streams over a full-duplex link, each at ``AcceleratorSpec.host_bandwidth``. The windows count the
layers' compute alone (their exposed communication would lengthen them: an upper bound there). Not
modelled: the host synchronisations' launch gaps. The memory side is ``step.partition.kept_layer_bytes``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from clustersim.simulator.step.costing import Costing
from clustersim.simulator.step.partition import layer_bytes
from clustersim.workloads import Op


def copy_time(nbytes: float, host_bandwidth: float) -> float:
    """Seconds to move ``nbytes`` one way over the GPU-host link: bytes / bandwidth."""
    return nbytes / host_bandwidth


def layer_windows(num_layers: int, offloaded: int) -> tuple[range, ...]:
    """The layers behind which each offloaded group's copy runs: TE's ``layer_window_map``
    (w_k = (L // n)(k + 1) - 1, plus k + 1 for the first L % n groups and L % n after them),
    group k's window the layers w_{k-1} + 1 .. w_k (w_{-1} = 0)."""
    base, extra = divmod(num_layers, offloaded)
    ends = [base * (k + 1) - 1 + (k + 1 if k < extra else extra) for k in range(offloaded)]
    starts = [1] + [end + 1 for end in ends[:-1]]
    return tuple(range(s, e + 1) for s, e in zip(starts, ends))


def exposed_copies(copies: Sequence[float], windows: Sequence[float]) -> float:
    """Seconds the copies outlast their windows: the sum over groups of max(0, copy_k - window_k)."""
    return sum(max(0.0, cp - w) for cp, w in zip(copies, windows, strict=True))


def offload_exposure(nbytes: Sequence[float], fwd: Sequence[float], bwd: Sequence[float],
                     host_bandwidth: float) -> tuple[float, float]:
    """(forward, backward) seconds exposed per micro-batch when the first ``len(nbytes)`` layers of a
    chunk are offloaded, ``fwd`` / ``bwd`` the compute seconds of each of its layers (module docstring)."""
    if not nbytes:
        return 0.0, 0.0
    windows = layer_windows(len(fwd), len(nbytes))
    copies = [copy_time(b, host_bandwidth) for b in nbytes]
    fwd_windows = [sum(fwd[j] for j in w) for w in windows]
    bwd_windows = [sum(bwd[j] for j in w) for w in windows]
    return exposed_copies(copies, fwd_windows), exposed_copies(copies, bwd_windows)


def chunk_offload(c: Costing, layers: range, per_layer: Sequence[tuple[list[Op], bool]]) -> tuple[float, float]:
    """(forward, backward) exposed offload seconds of one micro-batch of the chunk holding ``layers``
    (``per_layer``: each layer's ops and MoE-ness, as ``step.lower`` builds them)."""
    n = min(c.plan.cpu_offloading_num_layers, len(layers) - 1)
    if n <= 0:
        return 0.0, 0.0
    nbytes = [layer_bytes(c.model, c.training, c.plan, layers[j]) for j in range(n)]
    seconds: dict[int, tuple[float, float]] = {}  # layers of one kind share their ops list
    for ops, _ in per_layer:
        if id(ops) not in seconds:
            seconds[id(ops)] = (c.time(ops, "fwd"), c.time(ops, "bwd_input") + c.time(ops, "bwd_weight"))
    fwd = [seconds[id(ops)][0] for ops, _ in per_layer]
    bwd = [seconds[id(ops)][1] for ops, _ in per_layer]
    return offload_exposure(nbytes, fwd, bwd, c.accelerator.host_bandwidth)
