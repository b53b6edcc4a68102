"""What a job's configuration says, in scenario terms, and the spellings every reader shares.

Owns ``JobConfig`` (the model, training and plan parts of a scenario read from one job file), the
error an unreadable file raises, and the two normalisers each framework's reader calls on its own
keys: precisions (``spellings.precision_label``, priced by ``spellings.TRAINING_PRECISION``) and
FSDP/ZeRO sharding strategies (``spellings.sharding``). It does not read any file format: the
Megatron-LM and NeMo readers are ``jobargs_megatron``, torchtitan, Composer and the dispatch by file
suffix are ``jobargs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustersim.simulator.calibration.spellings import TRAINING_PRECISION, UnknownSpelling, precision_label, sharding
from clustersim.simulator.errors import CalibrationError


class JobArgsError(CalibrationError):
    """A job configuration that cannot be read into a scenario."""

    stage = "import-run"


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """What a job's configuration says, in scenario terms."""

    framework: str
    """megatron, nemo, torchtitan or composer."""
    source: str
    """Path of the configuration."""
    model: str | dict[str, Any]
    """A preset name or ModelSpec fields (the scenario's ``model``)."""
    training: dict[str, Any]
    """TrainingSpec fields."""
    plan: dict[str, Any]
    """ParallelPlan fields except ``dp`` (derived from the GPU count)."""
    num_gpus: int | None = None
    """GPUs the configuration names (nodes x GPUs per node), else None."""
    shard_within_node: bool = False
    """FSDP HYBRID_SHARD: the shard group is one node (``dp_shard`` is set once the cluster is known)."""
    checkpoint_interval: int | None = None
    """Steps between checkpoint saves, when configured."""
    eval_interval: int | None = None
    """Steps between evaluations, when configured."""
    ignored: tuple[str, ...] = ()
    """Keys read and not used by the simulator."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Framework defaults applied, in words."""

    @property
    def model_parallel(self) -> int:
        """tp x pp x cp: GPUs of one data-parallel replica."""
        return int(self.plan.get("tp", 1)) * int(self.plan.get("pp", 1)) * int(self.plan.get("cp", 1))



def read_precision(value: Any, where: str, key: str, notes: list[str]) -> str:
    """``TrainingSpec.precision`` of a precision spelling (``spellings.precision_label``), noted
    where the label is not the precision itself (MXFP8 runs FP8 GEMMs, FP16 has the BF16 peak)."""
    try:
        label = precision_label(str(value))
    except UnknownSpelling:
        raise JobArgsError(f"{where}: {key} = {value!r} is not a known precision spelling "
                           "(clustersim.simulator.calibration.spellings.PRECISION_SPELLINGS); pass --set training.precision=bf16|fp8|fp32") from None
    if label == "nvfp4":  # validate prices NVFP4 with the FP4 peak of the published row's GPU; an import has no such row
        raise JobArgsError(f"{where}: {key} = {value!r} is NVFP4 training, which import-run does not model; "
                           "pass --set training.precision=fp8 to price it at the FP8 peak")
    precision = TRAINING_PRECISION[label]
    if label != precision:
        notes.append(f"{key} = {value!r}: {label}, simulated as {precision} (spellings.TRAINING_PRECISION)")
    return precision


def read_sharding(value: Any, where: str, key: str) -> dict[str, Any]:
    """ParallelPlan sharding fields of an FSDP/ZeRO spelling (``spellings.sharding``)."""
    try:
        sh = sharding(str(value))
    except UnknownSpelling as exc:
        raise JobArgsError(f"{where}: {key} = {value!r}: {str(exc).split(': ', 1)[-1]}; "
                           "pass --set plan.fsdp=none|full|hybrid (or plan.zero=N)") from None
    if sh.zeropp:  # no job format read here spells ZeRO++; its hpZ group needs the cluster
        raise JobArgsError(f"{where}: {key} = {value!r}: ZeRO++ is read from published rows only; pass --set "
                           "plan.zero=3 plan.zero_quantized_weights=true plan.zero_quantized_gradients=true "
                           "plan.zero_hpz_partition_size=<GPUs per node>")
    return {"fsdp": sh.fsdp, "zero": sh.zero, "shard_within_node": sh.shard_within_node}

