"""clustersim workloads: transformer model specs, per-device ops, activation memory, FLOP
conventions and model presets. A leaf package: imports nothing from simulator/, topologies/
or reports/."""

from clustersim.workloads.activations import (
    RECOMPUTE_MODULES,
    SAVED_OUTPUTS,
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
    mtp_activation_bytes,
    moe_dispatch_buffer_bytes,
)
from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.flops import megatron_flops_per_step, model_flops_per_step, mosaic_flops_per_step
from clustersim.workloads.model import ModelSpec
from clustersim.workloads.ops import Op, embedding_ops, head_ops, layer_ops
from clustersim.workloads.presets import MODEL_PRESETS, get_model, load_model, resolve_model_name
from clustersim.workloads.training import TrainingSpec

__all__ = [
    "MODEL_PRESETS",
    "ModelSpec",
    "RECOMPUTE_MODULES",
    "Op",
    "SAVED_OUTPUTS",
    "TrainingSpec",
    "WorkloadError",
    "embedding_activation_bytes",
    "embedding_ops",
    "get_model",
    "head_activation_bytes",
    "head_ops",
    "layer_activation_bytes",
    "mtp_activation_bytes",
    "layer_ops",
    "load_model",
    "megatron_flops_per_step",
    "moe_dispatch_buffer_bytes",
    "model_flops_per_step",
    "mosaic_flops_per_step",
    "resolve_model_name",
]
