"""Megatron-DeepSpeed jobs: the DeepSpeed JSON config a Megatron command line names.

A Megatron-DeepSpeed launch passes Megatron's arguments plus DeepSpeed's own two
(``deepspeed.add_config_arguments``: ``--deepspeed``, ``--deepspeed_config PATH``) and its
``--zero-stage`` (microsoft/Megatron-DeepSpeed megatron/arguments.py ``_add_zero_args``). The JSON
(DeepSpeed's config: ``zero_optimization``, ``train_micro_batch_size_per_gpu``,
``train_batch_size``, ``bf16`` / ``fp16``, ``communication_data_type``) decides what runs:

- ``zero_optimization.stage`` (else ``--zero-stage``, else 0) is ``plan.zero``; stage 3 gathers one
  coalesced buffer per module and prefetches it when ``overlap_comm`` (DeepSpeed's default: on at
  stage 3, off below: deepspeed/runtime/zero/config.py ``DeepSpeedZeroConfig.overlap_comm_valid``,
  find_string id 51916516307);
- ZeRO++'s three keys (``zero_quantized_weights``, ``zero_hpz_partition_size``,
  ``zero_quantized_gradients``; docs/_tutorials/zeropp.md) are the plan's same-named fields at stage 3
  (ZeRO++ extends ZeRO-3; below it they are noted as unused);
- gradients are reduced in the training dtype (2 bytes) unless ``communication_data_type`` is fp32;
  ``reduce_bucket_size`` (elements) sizes the DP buckets of stages 1-2;
- ``offload_optimizer`` / ``offload_param`` to a device (ZeRO-Offload/Infinity) are refused: not modelled;
- the batch fields must agree with Megatron's ``--micro-batch-size`` / ``--global-batch-size``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from clustersim.simulator.calibration.jobconfig import JobArgsError, read_precision

DEEPSPEED_ARGS: frozenset[str] = frozenset({"deepspeed", "deepspeed_config", "deepspeed-config", "zero-stage"})
"""Command-line keys this module reads (MEGATRON_USED adds them)."""
ZEROPP_KEYS: tuple[str, ...] = ("zero_quantized_weights", "zero_hpz_partition_size", "zero_quantized_gradients")


def deepspeed_config_path(args: Mapping[str, Any], where: str) -> Path | None:
    """The JSON a Megatron-DeepSpeed command line names, relative to the arguments' folder; None
    when it names none."""
    raw = args.get("deepspeed_config", args.get("deepspeed-config"))
    if raw is None or raw is True:
        if args.get("deepspeed") is True:
            raise JobArgsError(f"{where}: --deepspeed without --deepspeed_config PATH; pass the DeepSpeed JSON "
                               "the job ran with (its ZeRO stage and batch decide the plan)")
        return None
    path = Path(str(raw))
    return path if path.is_absolute() else Path(where).parent / path


def read_deepspeed(args: Mapping[str, Any], where: str, plan: dict[str, Any], training: dict[str, Any],
                   notes: list[str]) -> None:
    """Update ``plan`` and ``training`` from the DeepSpeed JSON of a Megatron-DeepSpeed command line."""
    path = deepspeed_config_path(args, where)
    if path is None:
        return
    cfg = _load(path, where)
    src = f"{where}: {path.name}"
    zo = cfg.get("zero_optimization", {})
    if not isinstance(zo, Mapping):
        raise JobArgsError(f"{src}: zero_optimization must be an object, not {zo!r}")
    stage = _int(zo.get("stage", args.get("zero-stage", 0)), src, "zero_optimization.stage")
    if stage not in (0, 1, 2, 3):
        raise JobArgsError(f"{src}: zero_optimization.stage = {stage} must be 0, 1, 2 or 3")
    _refuse_offload(zo, src)
    plan.update(zero=stage, fsdp="none")
    overlap = zo.get("overlap_comm")
    overlap = stage == 3 if overlap is None else bool(overlap)
    plan.update(overlap_grad_reduce=overlap, overlap_param_gather=overlap)
    if stage == 3:
        plan["param_gather_unit"] = "module"
        notes.append(f"DeepSpeed ZeRO-3 ({path.name}): one coalesced gather per module, prefetched "
                     f"{'with' if overlap else 'without'} overlap_comm")
    for key in ZEROPP_KEYS:
        if key not in zo:
            continue
        value = _int(zo[key], src, f"zero_optimization.{key}") if key == "zero_hpz_partition_size" else bool(zo[key])
        if stage == 3:
            plan[key] = value
        elif (value > 1) if key == "zero_hpz_partition_size" else value:  # ZeRO++: DeepSpeed's stage-3 code only
            notes.append(f"zero_optimization.{key} = {zo[key]!r} not used: ZeRO++ extends stage 3, the job runs stage {stage}")
    plan["grad_dtype_bytes"] = 4 if str(cfg.get("communication_data_type", "")).lower() in ("fp32", "float32") else 2
    if stage in (1, 2) and _given(zo, "reduce_bucket_size"):
        plan["bucket_size"] = float(_int(zo["reduce_bucket_size"], src, "zero_optimization.reduce_bucket_size")) \
            * plan["grad_dtype_bytes"]
    _check_batch(cfg, plan, training, src)
    _precision(cfg, training, notes, src)


def _load(path: Path, where: str) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise JobArgsError(f"{where}: --deepspeed_config {path} does not exist; put the JSON beside the "
                           "arguments or give its absolute path") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JobArgsError(f"{where}: --deepspeed_config {path} is not readable JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise JobArgsError(f"{where}: --deepspeed_config {path} must hold a JSON object")
    return data


def _int(value: Any, src: str, key: str) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        out = float(value)
        if out != int(out):
            raise ValueError
        return int(out)
    except (TypeError, ValueError):
        raise JobArgsError(f"{src}: {key} = {value!r} must be an integer") from None


def _refuse_offload(zo: Mapping[str, Any], src: str) -> None:
    for key in ("offload_optimizer", "offload_param"):
        device = zo.get(key, {}).get("device", "none") if isinstance(zo.get(key), Mapping) else "none"
        if str(device).lower() not in ("none", ""):
            raise JobArgsError(f"{src}: zero_optimization.{key}.device = {device!r}: ZeRO-Offload/Infinity (optimizer "
                               "or weights on the host or NVMe) is not modelled; import a run without offload")


def _given(cfg: Mapping[str, Any], key: str) -> bool:
    """A key the JSON sets to a value ("auto", the HF Trainer integration's placeholder, is filled from
    the launcher's own arguments, so it says nothing here)."""
    return key in cfg and cfg[key] != "auto"


def _check_batch(cfg: Mapping[str, Any], plan: Mapping[str, Any], training: Mapping[str, Any], src: str) -> None:
    """DeepSpeed's batch fields against Megatron's (``train_batch_size`` = micro x accumulation x dp)."""
    if _given(cfg, "train_micro_batch_size_per_gpu"):
        micro = _int(cfg["train_micro_batch_size_per_gpu"], src, "train_micro_batch_size_per_gpu")
        if micro != plan.get("micro_batch", 1):
            raise JobArgsError(f"{src}: train_micro_batch_size_per_gpu = {micro} but --micro-batch-size = "
                               f"{plan.get('micro_batch', 1)}; the two must agree")
    if _given(cfg, "train_batch_size"):
        total = _int(cfg["train_batch_size"], src, "train_batch_size")
        if total != training["global_batch_size"]:
            raise JobArgsError(f"{src}: train_batch_size = {total} but --global-batch-size = "
                               f"{training['global_batch_size']}; the two must agree")


def _precision(cfg: Mapping[str, Any], training: dict[str, Any], notes: list[str], src: str) -> None:
    """The JSON's bf16 / fp16 section where the command line gave no precision (fp32 then)."""
    on = [k for k in ("bf16", "fp16") if isinstance(cfg.get(k), Mapping) and cfg[k].get("enabled") in (True, "true")]
    if training.get("precision") == "fp32" and on:
        training["precision"] = read_precision(on[0], src, f"{on[0]}.enabled", notes)
        notes.append(f"precision {on[0]} from {src.split(': ')[-1]}: the command line gives none")
