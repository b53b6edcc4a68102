"""Training-run description: sequence length, batch, numeric precision, optimizer.

Owns `TrainingSpec` and the per-parameter byte counts that follow from precision and optimizer.
Does not know about parallel plans or memory placement (simulator/step/partition.py does that).
"""

import math
from dataclasses import dataclass
from typing import Literal

from clustersim.workloads.errors import WorkloadError

Precision = Literal["bf16", "fp16", "fp8", "fp32"]
Optimizer = Literal["adam", "sgd"]
AttentionKernel = Literal["flash3", "flash2", "unfused"]
ATTENTION_KERNELS: tuple[str, ...] = ("flash3", "flash2", "unfused")
MAX_SEQ_LEN = 1 << 24
"""Longest sequence accepted (16M tokens; the longest published contexts are ~1M)."""
MAX_GLOBAL_BATCH = 1 << 24
"""Most sequences per step accepted (16M; published runs use up to ~16k sequences)."""


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    """What one optimizer step trains on, and in which numeric formats."""

    seq_len: int
    """Tokens per sequence."""
    global_batch_size: int
    """Sequences per optimizer step (all data-parallel replicas and micro-batches together)."""
    precision: Precision = "bf16"
    """Compute precision of the GEMMs; fp8 keeps bf16 weights/activations and FP8 GEMM inputs."""
    optimizer: Optimizer = "adam"
    """Optimizer whose state is kept per parameter."""
    optimizer_state_dtype_bytes: int = 4
    """Bytes per element of each optimizer moment: 4 fp32 (default), 2 bf16/fp16, 1 fp8 (Megatron-Core
    ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` with ``use_precision_aware_optimizer``; Apex
    ``DistributedFusedAdam(dtype=...)``, NeMo 1 ``optim.dtype``)."""
    master_param_dtype_bytes: int = 4
    """Bytes per main (master) parameter the optimizer keeps in mixed precision: 4 fp32 (default), 2
    (Megatron-Core ``main_params_dtype`` fp16; Apex ``DistributedFusedAdam`` keeps its parameter shard
    in its state ``dtype``)."""
    attention_kernel: AttentionKernel = "flash3"
    """How attention runs. 'flash3': today's fused kernels (FlashAttention-3, cuDNN fused attention
    through Transformer Engine), the profile's attention curve. 'flash2': fused kernels before the
    Hopper-specific ones (FlashAttention 1/2, Triton flash attention; 2022-2023), the curve times
    the profile's ``attention_kernel_efficiency["flash2"]``. 'unfused': frameworks before fused
    attention (before 2022): score GEMMs over the whole s x s square, softmax and dropout through
    HBM, the 5as/h activations kept (Korthikanti et al. 2022)."""

    def __post_init__(self) -> None:
        _check_count("seq_len", self.seq_len, MAX_SEQ_LEN, "tokens per sequence")
        _check_count("global_batch_size", self.global_batch_size, MAX_GLOBAL_BATCH, "sequences per step")
        if self.precision not in ("bf16", "fp16", "fp8", "fp32"):
            raise WorkloadError(f"precision = {self.precision!r}: use one of bf16, fp16, fp8, fp32")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise WorkloadError(f"attention_kernel = {self.attention_kernel!r}: use one of {', '.join(ATTENTION_KERNELS)}")
        if self.optimizer not in ("adam", "sgd"):
            raise WorkloadError(f"optimizer = {self.optimizer!r}: use one of adam, sgd")
        for name, allowed in (("optimizer_state_dtype_bytes", (1, 2, 4)), ("master_param_dtype_bytes", (2, 4))):
            value = getattr(self, name)
            if isinstance(value, bool) or value not in allowed:
                raise WorkloadError(f"{name} = {value!r}: use one of {', '.join(map(str, allowed))} "
                                    "(bytes per element: 4 fp32, 2 bf16/fp16, 1 fp8)")

    @property
    def flash_attention(self) -> bool:
        """A fused attention kernel (no s x s tensor in HBM or in the saved activations)."""
        return self.attention_kernel != "unfused"

    @property
    def tokens_per_step(self) -> int:
        """Tokens consumed by one optimizer step: global_batch_size * seq_len."""
        return self.global_batch_size * self.seq_len

    @property
    def param_bytes(self) -> int:
        """Bytes per parameter of the working weights (fp8 runs keep bf16 weights, as TE does)."""
        return 4 if self.precision == "fp32" else 2

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element (Megatron accumulates grads in fp32 main_grad buffers)."""
        return 4

    @property
    def master_param_bytes(self) -> int:
        """Bytes per master weight kept by the optimizer in mixed precision (``master_param_dtype_bytes``;
        0 when training in fp32, where the weights are the master copy)."""
        return 0 if self.precision == "fp32" else self.master_param_dtype_bytes

    @property
    def optimizer_state_bytes(self) -> int:
        """Optimizer state bytes per parameter: Adam two moments (8 in fp32), SGD one momentum (4),
        each of ``optimizer_state_dtype_bytes``.

        Source: Rajbhandari et al. 2020 (ZeRO), section 3.1: mixed-precision Adam holds 16 bytes per
        parameter = 2 (fp16 weights) + 2 (fp16 grads) + 12 (fp32 weights, momentum, variance).
        """
        return (2 if self.optimizer == "adam" else 1) * self.optimizer_state_dtype_bytes

    @property
    def gemm_input_bytes(self) -> int:
        """Bytes per element of an activation saved only as a linear layer's input: 1 in FP8 runs
        (Transformer Engine saves the FP8-quantised input for the weight-gradient GEMM), else the
        activation dtype."""
        return 1 if self.precision == "fp8" else self.activation_bytes

    @property
    def activation_bytes(self) -> int:
        """Bytes per stored activation element (fp8 runs keep bf16 activations between layers)."""
        return 4 if self.precision == "fp32" else 2


def _check_count(field: str, value: object, upper: int, what: str) -> None:
    """An integer (not a bool, float or string) in 1..upper, else a WorkloadError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        shown = value if not isinstance(value, float) or math.isfinite(value) else str(value)
        raise WorkloadError(f"{field} = {shown!r}: must be an integer in 1..{upper:,} ({what})")
