"""Reading real run descriptions: one normaliser per field, each with the table of spellings it knows.

Owns the precision, sharding, NIC-bandwidth and framework batch-field normalisers that the
published-runs mapping (``validate_rules``) and any log importer use. Each table is a tuple of
(regular expression on the lower-cased text, meaning, spellings covered); the first match wins.
An unknown value raises ``UnknownSpelling`` naming the value and the field, never a silent
default. GPU parts are ``topologies.accelerators.normalise_gpu``, model names
``workloads.presets.resolve_model_name``. It builds no scenario and runs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

from clustersim.workloads.training import Precision

T = TypeVar("T")


class UnknownSpelling(ValueError):
    """A value no table row matches; the message names the field and the value."""


def _match(table: tuple[tuple[str, T, str], ...], field: str, value: str) -> T:
    s = value.strip().lower()
    for pattern, meaning, _ in table:
        if re.search(pattern, s):
            return meaning
    raise UnknownSpelling(f"{field} {value!r}: not a known spelling (see clustersim.simulator.calibration.spellings)")


# ---------------------------------------------------------------- precision
PRECISION_SPELLINGS: tuple[tuple[str, str, str], ...] = (
    (r"nvfp4|\bfp4\b|float4", "nvfp4", "NVFP4, nvfp4, FP4"),
    (r"mxfp8|fp8[-_ ]?mx", "mxfp8", "MXFP8, FP8-MX, FP8-CS (FP8-MX)"),
    (r"fp8|float8|e4m3|e5m2", "fp8", "fp8, FP8, float8, fp8_e4m3, fp8-delayed, FP8-CS, amp_fp8, fp8 (hybrid, TE)"),
    (r"bf16|bfloat16", "bf16", "bf16, BF16, bfloat16, amp_bf16, bf16-mixed, 'fp16/bf16 mixed'"),
    (r"fp16|float16|\bhalf\b", "fp16", "fp16, float16, amp_fp16, 16-mixed, half"),
    (r"fp32|float32|tf32|\bfull\b", "fp32", "fp32, float32, tf32"),
    (r"^16(-mixed|-true)?$", "fp16", "PyTorch Lightning / NeMo trainer.precision 16, 16-mixed, 16-true"),
    (r"^32(-true)?$", "fp32", "PyTorch Lightning / NeMo trainer.precision 32, 32-true"),
)
"""Precision labels: nvfp4 | mxfp8 | fp8 | bf16 | fp16 | fp32."""

TRAINING_PRECISION: Mapping[str, Precision] = {"nvfp4": "fp8", "mxfp8": "fp8", "fp8": "fp8", "bf16": "bf16",
                                         "fp16": "bf16", "fp32": "fp32"}
"""Label -> ``TrainingSpec.precision``: NVFP4 runs its GEMMs at the FP4 peak via the fp8 path
(``validate._accelerator_overrides``); MXFP8 is FP8 GEMMs; FP16 has the BF16 peak."""


def precision_label(value: str) -> str:
    """The precision label of ``value`` (``PRECISION_SPELLINGS``)."""
    return str(_match(PRECISION_SPELLINGS, "precision", value))


# ---------------------------------------------------------------- sharding
@dataclass(frozen=True, kw_only=True)
class Sharding:
    """What a sharding spelling means for ``ParallelPlan``."""

    zero: int = 0
    """ZeRO stage (1 optimizer, 2 + gradients, 3 + weights)."""
    fsdp: str = "none"
    """none | full | hybrid (ParallelPlan.fsdp)."""
    shard_within_node: bool = False
    """HSDP of FSDP1 HYBRID_SHARD: shard inside a node, replicate across nodes."""
    zeropp: bool = False
    """DeepSpeed ZeRO++ on ZeRO-3: qwZ, qgZ and hpZ over a node's ranks, the tutorial's configuration
    (microsoft/DeepSpeed docs/_tutorials/zeropp.md @ 13c52bea: all three on, ``zero_hpz_partition_size``
    "ideal is number of ranks (gpus) per node")."""


SHARDING_SPELLINGS: tuple[tuple[str, Sharding | str, str], ...] = (
    (r"zero\+\+|zeropp", Sharding(zero=3, zeropp=True), "ZeRO++, ZeRO-3++, zeropp (DeepSpeed ZeRO-3 with qwZ, hpZ, qgZ)"),
    (r"hybrid_shard|hybrid shard|\bhsdp\b", Sharding(fsdp="hybrid", shard_within_node=True),
     "FSDP HYBRID_SHARD, _HYBRID_SHARD_ZERO2, HSDP"),
    (r"shard_grad_op|zero[- _]?2\b|zero stage 2|stage[ =:]*2", Sharding(zero=2),
     "FSDP SHARD_GRAD_OP, ZeRO-2, zero_optimization stage 2"),
    (r"zero[- _]?1\b|zero stage 1|stage[ =:]*1|distributed[ _-]optimi[sz]er", Sharding(zero=1),
     "ZeRO-1, Megatron distributed optimizer (--use-distributed-optimizer)"),
    (r"full_shard|fully_shard|fsdp2|megatron[- ]fsdp|maxtext|paxml|fsdp", Sharding(fsdp="full"),
     "FSDP FULL_SHARD, FSDP2 fully_shard, Megatron-FSDP, MaxText/Paxml fsdp axis, 'FSDP'"),
    (r"zero[- _]?3\b|zero stage 3|stage[ =:]*3", Sharding(zero=3), "ZeRO-3, DeepSpeed stage 3"),
    (r"no_shard|\bddp\b|\bnone\b|zero[- _]?0\b|^no$", Sharding(), "FSDP NO_SHARD, DDP, none, ZeRO-0"),
)
"""Sharding spellings; a str meaning is a reason the spelling cannot be simulated (a skip)."""


def sharding(value: str) -> Sharding:
    """The sharding of ``value``; raises ``UnknownSpelling`` for an unknown or unmodelled spelling."""
    meaning = _match(SHARDING_SPELLINGS, "zero_fsdp", value)
    if isinstance(meaning, str):
        raise UnknownSpelling(f"zero_fsdp {value!r}: {meaning}")
    return meaning


# ---------------------------------------------------------------- NIC bandwidth
NIC_SCOPES: tuple[tuple[str, str, str], ...] = (
    (r"per (node|server|host|instance|machine)|node[- ]to[- ]node|/node\b|/instance\b", "node",
     "per node, per instance (EFA 3200 Gbps per p5 instance), node-to-node"),
    (r"per (gpu|hca|nic|port|rail|adapter)|/gpu\b|compute links?", "gpu",
     "per GPU, per HCA, per NIC, per port, compute links"),
)
"""Whom a printed NIC figure is for; a figure with no scope word is per NIC, one NIC per GPU."""

NIC_KINDS: tuple[tuple[str, str, str], ...] = (
    (r"\bndr\b", "400", "InfiniBand NDR (400 Gb/s per port)"), (r"\bhdr\b", "200", "InfiniBand HDR (200 Gb/s)"),
    (r"\bxdr\b", "800", "InfiniBand XDR (800 Gb/s)"), (r"\bedr\b", "100", "InfiniBand EDR (100 Gb/s)"),
    (r"slingshot", "200", "HPE Slingshot-11 (200 Gb/s per NIC)"),
    (r"omni[- ]?path|\bopa\b", "100", "Intel Omni-Path (100 Gb/s)"),
)
"""Link kinds whose speed is fixed by their name (Gb/s per port), used when no figure is printed."""


def nic_gbps_per_gpu(value: str, gpus_per_node: int) -> tuple[float, str]:
    """(Gb/s per GPU, how it was read) from a NIC description; raises ``UnknownSpelling``."""
    s = value.strip().lower()
    m = (re.search(r"(\d+(?:\.\d+)?)\s*(g|t)(?:b(?:it)?)?(?:/s|ps|bps)\b", s)
         or re.search(r"(\d+(?:\.\d+)?)\s*(g|t)\b", s))  # "400G", "ConnectX-7 400G": the port speed, Gb/s
    in_bytes = re.search(r"\d\s*[GT]B(?:/s|ps)\b", value.strip()) is not None  # "50 GB/s": bytes, as printed
    if m is None:
        kind = next((gbps for pattern, gbps, _ in NIC_KINDS if re.search(pattern, s)), None)
        if kind is None:
            raise UnknownSpelling(f"inter_node_interconnect {value!r}: no Gb/s figure and no known link kind")
        return float(kind), f"{kind} Gb/s per NIC from the link kind, one NIC per GPU"
    gbps = float(m.group(1)) * (1000.0 if m.group(2) == "t" else 1.0) * (8.0 if in_bytes else 1.0)
    count = re.search(r"(\d+)\s*[x×]\s*" + re.escape(m.group(0)), s)
    if count:
        gbps *= int(count.group(1))
    scope = next((sc for pattern, sc, _ in NIC_SCOPES if re.search(pattern, s)), "nic")
    unit = " (printed in GB/s, bytes: x 8)" if in_bytes else ""
    if scope == "node" or count:
        return gbps / gpus_per_node, f"{gbps:g} Gb/s per node / {gpus_per_node} GPUs{unit}"
    return gbps, f"{gbps:g} Gb/s per {'GPU' if scope == 'gpu' else 'NIC, one NIC per GPU'}{unit}"


# ---------------------------------------------------------------- framework batch fields
@dataclass(frozen=True, kw_only=True)
class Batch:
    """Global batch and micro-batch in sequences, as ParallelPlan and TrainingSpec count them."""

    global_batch: int
    micro_batch: int


def batch_from_config(framework: str, cfg: Mapping[str, Any], dp: int) -> Batch:
    """The global and micro batch from a framework's own config fields (``dp`` data-parallel ranks).

    torchtitan: ``local_batch_size`` is per data-parallel rank (dp_replicate x dp_shard), so global =
    local x dp; its pipeline micro-batch is ``pipeline_parallel_microbatch_size`` (default 1).
    llm-foundry: ``global_train_batch_size`` is global, ``device_train_microbatch_size`` the micro-batch.
    DeepSpeed: ``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` x dp = global
    (``train_batch_size`` when printed must agree). Megatron: ``global_batch_size``, ``micro_batch_size``.
    """
    fw = framework.strip().lower()
    try:
        if "torchtitan" in fw:
            local = int(cfg["local_batch_size"])
            return Batch(global_batch=local * dp, micro_batch=int(cfg.get("pipeline_parallel_microbatch_size", 1)))
        if "foundry" in fw or "composer" in fw:
            return Batch(global_batch=int(cfg["global_train_batch_size"]), micro_batch=int(cfg["device_train_microbatch_size"]))
        if "deepspeed" in fw:
            mb, ga = int(cfg["train_micro_batch_size_per_gpu"]), int(cfg.get("gradient_accumulation_steps", 1))
            if "train_batch_size" in cfg and int(cfg["train_batch_size"]) != mb * ga * dp:
                raise UnknownSpelling(f"deepspeed train_batch_size = {cfg['train_batch_size']} != micro {mb} x accumulation "
                                      f"{ga} x dp {dp}; fix one of them")
            return Batch(global_batch=mb * ga * dp, micro_batch=mb)
        if "megatron" in fw or "nemo" in fw:
            return Batch(global_batch=int(cfg["global_batch_size"]), micro_batch=int(cfg["micro_batch_size"]))
    except KeyError as exc:
        raise UnknownSpelling(f"{framework} batch config lacks {exc.args[0]!r}") from None
    raise UnknownSpelling(f"framework {framework!r}: batch fields not known (torchtitan, llm-foundry, DeepSpeed, Megatron/NeMo)")
