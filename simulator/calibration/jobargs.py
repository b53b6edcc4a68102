"""Job configurations of real runs -> the model, training and plan parts of a scenario.

Owns reading a job's own description: Megatron-LM command-line arguments (a launch script or
the argument list; ``megatron/training/arguments.py`` names), NeMo / Megatron-Bridge YAML (the
same names with underscores, nested anywhere), a torchtitan TOML (``torchtitan/config/job_config.py``
sections ``[model] [training] [parallelism] [activation_checkpoint] [checkpoint] [validation]``)
and a Composer / llm-foundry YAML (``scripts/train/yamls/pretrain/*.yaml``: ``model``,
``global_train_batch_size``, ``device_train_microbatch_size``, ``precision``, ``fsdp_config``).
Every key read is either used, or listed in ``ignored`` (named in the report); a value the
scenario needs and the file does not give is an error naming the key (or ``--set`` to give it).
The framework's own defaults are applied only where its code documents them, each recorded in
``notes``. It does not read logs (``runlogs``) nor build clusters (the scenario does). This module
is the face: ``read_job`` chooses the reader by file suffix and reads torchtitan and Composer files
itself; the Megatron-LM command lines and NeMo / Megatron-Bridge YAML are ``jobargs_megatron``,
``JobConfig`` and the shared precision and sharding readers are ``jobconfig``.

Values are read with the same normalisers as the published runs (issue 12): precisions
(Megatron ``--fp8-format``/``--fp8-recipe``, NeMo/Lightning ``trainer.precision``, Megatron-Bridge
``mixed_precision`` recipe names, torchtitan ``mixed_precision_param`` and float8/MX
``converters``, Composer ``precision``) by ``spellings.precision_label``, FSDP sharding strategies
by ``spellings.sharding``, model names by ``workloads.presets.resolve_model_name``; a spelling no
table knows is an error naming the key and the value. ``TITAN_FLAVORS`` is this module's own small
table of torchtitan (model, flavor) pairs until the shared normalisers cover them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from clustersim.simulator.calibration.jobargs_megatron import megatron_argv, read_megatron, read_nemo_yaml
from clustersim.simulator.calibration.jobconfig import JobArgsError, JobConfig, read_precision, read_sharding
from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.presets import resolve_model_name

TITAN_FLAVORS: dict[tuple[str, str], str | dict[str, Any]] = {
    ("llama3", "8B"): "llama3-8b",
    ("llama3", "70B"): "llama3-70b",
    ("llama3", "405B"): "llama3-405b",
    # torchtitan/models/llama3/__init__.py "debugmodel": dim 256, 6 layers, 16 heads, rope; vocab 2000 (test tokenizer)
    ("llama3", "debugmodel"): {"name": "torchtitan-llama3-debugmodel", "num_layers": 6, "hidden_size": 256,
                               "num_heads": 16, "num_kv_heads": 16, "ffn_hidden_size": 768, "vocab_size": 2000,
                               "source": "torchtitan/models/llama3/__init__.py llama3_configs['debugmodel']"},
}
"""torchtitan (``[model] name``, ``flavor``) -> a preset name or ModelSpec fields."""


# ---------------------------------------------------------------- torchtitan TOML

TITAN_USED = {
    "model.name", "model.flavor", "training.local_batch_size", "training.batch_size", "training.global_batch_size",
    "training.seq_len", "training.mixed_precision_param", "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree", "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree", "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree", "parallelism.pipeline_parallel_schedule",
    "parallelism.enable_async_tensor_parallel", "activation_checkpoint.mode", "checkpoint.interval",
    "checkpoint.enable", "checkpoint.enable_checkpoint", "validation.enable", "validation.freq",
    "metrics.log_freq", "model.converters",
}


def _leaves(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        path = f"{prefix}.{k}" if prefix else k
        out.update(_leaves(v, path) if isinstance(v, Mapping) else {path: v})
    return out


def _titan_model(name: str, flavor: str, where: str) -> str | dict[str, Any]:
    if (name, flavor) in TITAN_FLAVORS:
        return TITAN_FLAVORS[(name, flavor)]
    try:
        return resolve_model_name(f"{name}-{flavor}")
    except (ValueError, WorkloadError):
        raise JobArgsError(f"{where}: [model] name = {name!r}, flavor = {flavor!r} is not known; known: "
                           f"{sorted(f'{n}/{f}' for n, f in TITAN_FLAVORS)}; pass --set model=PRESET") from None


def _titan_plan(p: Mapping[str, Any], ac: str) -> dict[str, Any]:
    schedule = str(p.get("pipeline_parallel_schedule", "1F1B")).lower()
    plan: dict[str, Any] = {
        "tp": int(p.get("tensor_parallel_degree", 1)), "pp": int(p.get("pipeline_parallel_degree", 1)),
        "cp": int(p.get("context_parallel_degree", 1)), "ep": int(p.get("expert_parallel_degree", 1)),
        "sp": int(p.get("tensor_parallel_degree", 1)) > 1,  # torchtitan's TP plan shards the norms (SequenceParallel)
        "schedule": {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved1f1b": "interleaved"}.get(schedule, "1f1b"),
        "recompute": {"full": "full", "selective": "selective"}.get(ac, "none"),
    }
    shard, replicate = int(p.get("data_parallel_shard_degree", -1)), int(p.get("data_parallel_replicate_degree", 1))
    if shard != 1:
        plan["fsdp"] = "hybrid" if replicate > 1 else "full"
        if replicate > 1 and shard > 0:
            plan["dp_shard"] = shard
    return plan


def _titan_precision(data: Mapping[str, Any], where: str, notes: list[str]) -> str:
    """``[model] converters`` (float8, mx: Float8/MX linears) over ``training.mixed_precision_param``."""
    converters = data.get("model", {}).get("converters", [])
    for conv in converters if isinstance(converters, list) else [converters]:
        spelled = "mxfp8" if re.search(r"(^|\.)mx$", str(conv)) else str(conv)
        if re.search(r"float8|mxfp8", spelled):
            return read_precision(spelled, where, "model.converters", notes)
        notes.append(f"model.converters {conv!r}: not a precision converter, not modelled")
    training = data.get("training", {})
    if "mixed_precision_param" not in training:
        notes.append("precision bf16: torchtitan's default mixed_precision_param")
    return read_precision(training.get("mixed_precision_param", "bfloat16"), where, "training.mixed_precision_param", notes)


def read_torchtitan(data: Mapping[str, Any], where: str) -> JobConfig:
    """A torchtitan job TOML (``torchtitan/config/job_config.py`` sections)."""
    leaves = _leaves(data)
    model, training, par = data.get("model", {}), data.get("training", {}), data.get("parallelism", {})
    missing = [k for k, sec in (("model.name", model), ("model.flavor", model), ("training.seq_len", training)) if k.split(".")[1] not in sec]
    local = training.get("local_batch_size", training.get("batch_size"))
    if local is None and "global_batch_size" not in training:
        missing.append("training.local_batch_size")
    if missing:
        raise JobArgsError(f"{where}: missing {', '.join(missing)}; the scenario needs the model, sequence length and batch")
    notes: list[str] = []
    prec = _titan_precision(data, where, notes)
    ac = str(data.get("activation_checkpoint", {}).get("mode", "selective"))
    ckpt, val = data.get("checkpoint", {}), data.get("validation", {})
    train: dict[str, Any] = {"seq_len": int(training["seq_len"]), "precision": prec}
    if "global_batch_size" in training and int(training["global_batch_size"]) > 0:
        train["global_batch_size"] = int(training["global_batch_size"])
    else:
        train["local_batch_size"] = int(local)  # resolved to a global batch with the dp degree (scenario_mapping)
    return JobConfig(
        framework="torchtitan", source=where, model=_titan_model(str(model["name"]), str(model["flavor"]), where),
        training=train, plan=_titan_plan(par, ac),
        checkpoint_interval=int(ckpt["interval"]) if ckpt.get("enable", ckpt.get("enable_checkpoint")) and "interval" in ckpt else None,
        eval_interval=int(val["freq"]) if val.get("enable") and "freq" in val else None,
        ignored=tuple(sorted(k for k in leaves if k not in TITAN_USED)), notes=tuple(notes))


# ---------------------------------------------------------------- Composer / llm-foundry YAML

COMPOSER_USED = {
    "model.name", "model.d_model", "model.n_heads", "model.n_layers", "model.expansion_ratio", "model.max_seq_len",
    "model.vocab_size", "model.pretrained_model_name_or_path", "model.attn_config.kv_n_heads", "max_seq_len",
    "global_train_batch_size", "device_train_microbatch_size", "precision", "fsdp_config.sharding_strategy",
    "fsdp_config.activation_checkpointing", "save_interval", "eval_interval", "variables.global_seed",
}


def _interval(raw: Any) -> int | None:
    """``1000ba`` / ``1000`` -> 1000 batches; other units (tokens, epochs) -> None."""
    m = re.fullmatch(r"\s*(\d+)\s*(ba)?\s*", str(raw)) if raw is not None else None
    return int(m.group(1)) if m else None


def _composer_model(m: Mapping[str, Any], where: str, seq: int) -> str | dict[str, Any]:
    if m.get("name") == "mpt_causal_lm":
        need = [k for k in ("d_model", "n_heads", "n_layers") if k not in m]
        if need:
            raise JobArgsError(f"{where}: model.{', model.'.join(need)} missing for mpt_causal_lm")
        d, heads = int(m["d_model"]), int(m["n_heads"])
        kv = int(m.get("attn_config", {}).get("kv_n_heads", heads))
        # llm-foundry MPTConfig defaults: expansion_ratio 4, vocab_size 50368, no bias, LayerNorm, ALiBi or learned
        return {"name": f"mpt-d{d}-l{m['n_layers']}", "num_layers": int(m["n_layers"]), "hidden_size": d,
                "num_heads": heads, "num_kv_heads": kv, "ffn_hidden_size": int(float(m.get("expansion_ratio", 4)) * d),
                "vocab_size": int(m.get("vocab_size", 50368)), "gated_mlp": False, "norm": "layernorm",
                "tied_embeddings": True, "max_seq_len": seq, "source": f"llm-foundry mpt_causal_lm {where}"}
    name = m.get("pretrained_model_name_or_path") or m.get("name")
    try:
        return resolve_model_name(str(name).split("/")[-1])
    except (ValueError, WorkloadError):
        raise JobArgsError(f"{where}: model {name!r} is not a preset nor mpt_causal_lm; pass --set model=PRESET") from None


def read_composer(data: Mapping[str, Any], where: str) -> JobConfig:
    """An llm-foundry / Composer training YAML."""
    missing = [k for k in ("model", "global_train_batch_size") if k not in data]
    seq = data.get("max_seq_len", data.get("model", {}).get("max_seq_len") if isinstance(data.get("model"), Mapping) else None)
    if seq is None:
        missing.append("max_seq_len")
    if missing:
        raise JobArgsError(f"{where}: missing {', '.join(missing)}; the scenario needs the model, batch and sequence length")
    notes: list[str] = []
    if "precision" not in data:
        notes.append("precision amp_bf16: Composer's default for llm-foundry runs on GPUs")
    prec = read_precision(data.get("precision", "amp_bf16"), where, "precision", notes)
    fsdp = data.get("fsdp_config") or {}
    if fsdp and "sharding_strategy" not in fsdp:
        notes.append("fsdp_config.sharding_strategy FULL_SHARD: Composer's default")
    sh = read_sharding(fsdp.get("sharding_strategy", "FULL_SHARD" if fsdp else "NO_SHARD"), where,
                       "fsdp_config.sharding_strategy")
    within = sh.pop("shard_within_node")
    plan: dict[str, Any] = {**sh, "recompute": "full" if fsdp.get("activation_checkpointing") else "none"}
    mb = data.get("device_train_microbatch_size")
    if isinstance(mb, int):
        plan["micro_batch"] = mb
    else:
        notes.append(f"device_train_microbatch_size = {mb!r}: micro_batch 1 assumed")
    leaves = _leaves(data)
    return JobConfig(framework="composer", source=where, model=_composer_model(data["model"], where, int(seq)),
                     training={"seq_len": int(seq), "global_batch_size": int(data["global_train_batch_size"]), "precision": prec},
                     plan=plan, shard_within_node=within, checkpoint_interval=_interval(data.get("save_interval")),
                     eval_interval=_interval(data.get("eval_interval")),
                     ignored=tuple(sorted(k for k in leaves if k not in COMPOSER_USED)), notes=tuple(notes))


# ---------------------------------------------------------------- dispatch

def _load_mapping(text: str, where: str, loader: Callable[[str], Any]) -> Mapping[str, Any]:
    try:
        data = loader(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise JobArgsError(f"{where} is not valid {'TOML' if loader is tomllib.loads else 'YAML'}: "
                           f"{str(exc).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise JobArgsError(f"{where} must hold a mapping of job settings")
    return data


def read_job(path: str | Path) -> JobConfig:
    """The job configuration at ``path``: TOML (torchtitan), YAML (Composer, NeMo/Bridge) or a Megatron command line."""
    p = Path(path)
    if not p.is_file():
        raise JobArgsError(f"job configuration {p} does not exist; pass the job's arguments, TOML or YAML")
    text, where = p.read_text(), str(p)
    if p.suffix == ".toml":
        return read_torchtitan(_load_mapping(text, where, tomllib.loads), where)
    if p.suffix in (".yaml", ".yml"):
        data = _load_mapping(text, where, yaml.safe_load)
        return read_composer(data, where) if "global_train_batch_size" in data else read_nemo_yaml(data, where)
    args = megatron_argv(text)
    if not args:
        raise JobArgsError(f"{where}: no --arguments found; pass a Megatron launch script, a .toml or a .yaml")
    return read_megatron(args, where)
