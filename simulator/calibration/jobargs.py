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
``notes``. It does not read logs (``runlogs``) nor build clusters (the scenario does).

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
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from clustersim.simulator.calibration.spellings import TRAINING_PRECISION, UnknownSpelling, precision_label, sharding
from clustersim.simulator.errors import CalibrationError
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


# ---------------------------------------------------------------- Megatron-LM command lines

def megatron_argv(text: str) -> dict[str, str | bool]:
    """``--key value`` / ``--flag`` pairs of a launch script or argument list (after the script name)."""
    joined = re.sub(r"\\\r?\n", " ", text)
    tokens: list[str] = []
    for line in joined.splitlines():
        try:
            tokens += shlex.split(line, comments=True)
        except ValueError as exc:
            raise JobArgsError(f"arguments: cannot split {line.strip()[:60]!r}: {exc}") from None
    out: dict[str, str | bool] = {}
    k = 0
    while k < len(tokens):
        tok = tokens[k]
        if tok.startswith("--") and len(tok) > 2:
            key, eq, value = tok[2:].partition("=")
            if eq:
                out[key] = value
            elif k + 1 < len(tokens) and not tokens[k + 1].startswith("--"):
                out[key] = tokens[k + 1]
                k += 1
            else:
                out[key] = True
        k += 1
    return out


MEGATRON_REQUIRED = ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "global-batch-size")

MEGATRON_USED = {
    "num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "group-query-attention",
    "num-query-groups", "kv-channels", "seq-length", "max-position-embeddings", "global-batch-size",
    "micro-batch-size", "vocab-size", "swiglu", "normalization", "untie-embeddings-and-output-weights",
    "disable-bias-linear", "position-embedding-type", "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
    "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
    "expert-model-parallel-size", "sequence-parallel", "num-layers-per-virtual-pipeline-stage",
    "num-virtual-stages-per-pipeline-rank", "recompute-granularity", "recompute-num-layers",
    "use-distributed-optimizer", "bf16", "fp16", "fp8-format", "save-interval", "eval-interval",
    "nnodes", "nproc_per_node", "nproc-per-node", "overlap-grad-reduce", "overlap-param-gather",
    "fp8-recipe", "fp4-format", "mixed-precision", "lightning-precision", "use-torch-fsdp2", "use-megatron-fsdp",
}


def _int(args: Mapping[str, Any], key: str, where: str) -> int:
    raw = args[key]
    try:
        return int(str(raw))
    except ValueError:
        raise JobArgsError(f"{where}: {key} = {raw!r} must be an integer") from None


def _opt_int(args: Mapping[str, Any], key: str, where: str) -> int | None:
    return _int(args, key, where) if key in args and args[key] is not True else None


def _flag(args: Mapping[str, Any], key: str) -> bool:
    v = args.get(key, False)
    return v is True or str(v).lower() in ("true", "1", "yes")


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
    return {"fsdp": sh.fsdp, "zero": sh.zero, "shard_within_node": sh.shard_within_node}


def megatron_model(a: Mapping[str, Any], where: str, notes: list[str]) -> dict[str, Any]:
    """ModelSpec fields from Megatron names (defaults of megatron/training/arguments.py, noted)."""
    h, heads = _int(a, "hidden-size", where), _int(a, "num-attention-heads", where)
    if "vocab-size" not in a:
        raise JobArgsError(f"{where}: vocab size not given (Megatron takes it from the tokenizer); "
                           "add --vocab-size N to the arguments or pass --set model.vocab_size=N")
    swiglu = _flag(a, "swiglu")
    ffn = _opt_int(a, "ffn-hidden-size", where)
    if ffn is None:
        # arguments.py: ffn_hidden_size = 4h, or int((4h * 2/3) / 64) * 64 with --swiglu
        ffn = int(4 * h * 2 / 3 / 64) * 64 if swiglu else 4 * h
        notes.append(f"ffn_hidden_size = {ffn}: Megatron's default for hidden {h}{' with --swiglu' if swiglu else ''}")
    kv = _opt_int(a, "num-query-groups", where) if _flag(a, "group-query-attention") else heads
    fields: dict[str, Any] = {
        "name": f"megatron-l{_int(a, 'num-layers', where)}-h{h}", "num_layers": _int(a, "num-layers", where),
        "hidden_size": h, "num_heads": heads, "num_kv_heads": kv or heads, "ffn_hidden_size": ffn,
        "vocab_size": _int(a, "vocab-size", where), "gated_mlp": swiglu,
        "norm": "rmsnorm" if str(a.get("normalization", "LayerNorm")).lower() == "rmsnorm" else "layernorm",
        "tied_embeddings": not _flag(a, "untie-embeddings-and-output-weights"),
        "linear_bias": not _flag(a, "disable-bias-linear"),
        "learned_position_embeddings": str(a.get("position-embedding-type", "learned_absolute")) == "learned_absolute",
        "source": f"Megatron-LM arguments {where}",
    }
    if "kv-channels" in a:
        fields["head_dim"] = _int(a, "kv-channels", where)
    if _opt_int(a, "num-experts", where):
        fields.update(num_experts=_int(a, "num-experts", where), top_k=_opt_int(a, "moe-router-topk", where) or 2)
        if "moe-ffn-hidden-size" in a:
            fields["moe_ffn_hidden_size"] = _int(a, "moe-ffn-hidden-size", where)
    return fields


def megatron_plan(a: Mapping[str, Any], where: str, layers: int) -> dict[str, Any]:
    """ParallelPlan fields (all but dp) from Megatron's parallelism arguments."""
    pp = _opt_int(a, "pipeline-model-parallel-size", where) or 1
    vpp = _opt_int(a, "num-virtual-stages-per-pipeline-rank", where)
    per_stage = _opt_int(a, "num-layers-per-virtual-pipeline-stage", where)
    if vpp is None and per_stage:
        vpp = layers // (pp * per_stage)
    plan: dict[str, Any] = {
        "tp": _opt_int(a, "tensor-model-parallel-size", where) or 1, "pp": pp,
        "cp": _opt_int(a, "context-parallel-size", where) or 1, "ep": _opt_int(a, "expert-model-parallel-size", where) or 1,
        "sp": _flag(a, "sequence-parallel"), "micro_batch": _opt_int(a, "micro-batch-size", where) or 1,
        "vpp": vpp or 1, "schedule": "interleaved" if (vpp or 1) > 1 else "1f1b",
        "zero": 1 if _flag(a, "use-distributed-optimizer") else 0,
        "overlap_grad_reduce": _flag(a, "overlap-grad-reduce"), "overlap_param_gather": _flag(a, "overlap-param-gather"),
    }
    for flag, spelled in (("use-torch-fsdp2", "FSDP2 fully_shard"), ("use-megatron-fsdp", "Megatron-FSDP")):
        if _flag(a, flag):  # arguments.py: FSDP2 / Megatron-FSDP instead of DDP + distributed optimizer
            sh = read_sharding(spelled, where, f"--{flag}")
            plan.update(fsdp=sh["fsdp"], zero=sh["zero"])
    gran = a.get("recompute-granularity")
    if gran in ("selective", "full"):
        plan["recompute"] = gran
        if gran == "full" and "recompute-num-layers" in a:
            plan["recompute_layers"] = _int(a, "recompute-num-layers", where)
    return plan


def _megatron_precision(a: Mapping[str, Any], where: str, notes: list[str]) -> str:
    if "fp4-format" in a:  # arguments.py --fp4-format e2m1 (NVFP4 recipes)
        return read_precision(f"fp4 {a['fp4-format']}", where, "--fp4-format", notes)
    if "fp8-format" in a:  # arguments.py --fp8-format e4m3|hybrid, --fp8-recipe delayed|tensorwise|mxfp8|blockwise
        recipe = a.get("fp8-recipe", "delayed")
        return read_precision(f"fp8 {a['fp8-format']} {recipe}", where, "--fp8-format/--fp8-recipe", notes)
    if "mixed-precision" in a:  # Megatron-Bridge recipe names: bf16_mixed, bf16_with_fp8_delayed_scaling_mixed, ...
        return read_precision(a["mixed-precision"], where, "mixed_precision", notes)
    if "lightning-precision" in a:  # NeMo trainer.precision: bf16-mixed, 16-mixed, 32, ...
        return read_precision(a["lightning-precision"], where, "trainer.precision", notes)
    for flag in ("bf16", "fp16"):  # fp16 is priced at the BF16 peak, as the published rows are
        if _flag(a, flag):
            return read_precision(flag, where, f"--{flag}", notes)
    notes.append("precision fp32: neither --bf16, --fp16 nor --fp8-format given (Megatron's default)")
    return "fp32"


def read_megatron(args: Mapping[str, Any], where: str, framework: str = "megatron") -> JobConfig:
    """A JobConfig from Megatron argument names (dashes; NeMo/Bridge YAML keys are converted)."""
    missing = [k for k in MEGATRON_REQUIRED if k not in args]
    if missing:
        raise JobArgsError(f"{where}: missing {', '.join('--' + k for k in missing)}; "
                           "the scenario needs the model shape, sequence length and global batch")
    notes: list[str] = []
    model = megatron_model(args, where, notes)
    training = {"seq_len": _int(args, "seq-length", where), "global_batch_size": _int(args, "global-batch-size", where),
                "precision": _megatron_precision(args, where, notes)}
    nodes, per = _opt_int(args, "nnodes", where), _opt_int(args, "nproc_per_node", where) or _opt_int(args, "nproc-per-node", where)
    return JobConfig(framework=framework, source=where, model=model, training=training,
                     plan=megatron_plan(args, where, model["num_layers"]),
                     num_gpus=nodes * per if nodes and per else None,
                     checkpoint_interval=_opt_int(args, "save-interval", where),
                     eval_interval=_opt_int(args, "eval-interval", where),
                     ignored=tuple(sorted(k for k in args if k not in MEGATRON_USED)), notes=tuple(notes))


# ---------------------------------------------------------------- NeMo / Megatron-Bridge YAML

NEMO_KEYS = {
    "encoder_seq_length": "seq-length", "seq_length": "seq-length", "num_attention_heads": "num-attention-heads",
    "tensor_model_parallel_size": "tensor-model-parallel-size", "pipeline_model_parallel_size": "pipeline-model-parallel-size",
    "context_parallel_size": "context-parallel-size", "expert_model_parallel_size": "expert-model-parallel-size",
    "virtual_pipeline_model_parallel_size": "num-virtual-stages-per-pipeline-rank",
    "sequence_parallel": "sequence-parallel", "num_query_groups": "num-query-groups",
    "activations_checkpoint_granularity": "recompute-granularity", "recompute_granularity": "recompute-granularity",
    "activations_checkpoint_num_layers": "recompute-num-layers", "recompute_num_layers": "recompute-num-layers",
    "use_distributed_optimizer": "use-distributed-optimizer", "val_check_interval": "eval-interval",
    "eval_interval": "eval-interval", "every_n_train_steps": "save-interval", "save_interval": "save-interval",
    "devices": "nproc_per_node", "num_nodes": "nnodes", "padded_vocab_size": "vocab-size",
    "gated_linear_unit": "swiglu", "untie_embeddings_and_output_weights": "untie-embeddings-and-output-weights",
}
"""NeMo 1 (``model.encoder_seq_length``, ``trainer.devices``) and Megatron-Bridge spellings that
differ from Megatron's argument names; every other key maps by ``_`` -> ``-``."""


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, str, Any]]:
    """(key, dotted path, value) of every leaf of nested mappings, in file order."""
    out: list[tuple[str, str, Any]] = []
    if isinstance(data, Mapping):
        for k, v in data.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            out += _flatten(v, path) if isinstance(v, Mapping) else [(str(k), path, v)]
    return out


def read_nemo_yaml(data: Mapping[str, Any], where: str) -> JobConfig:
    """NeMo / Megatron-Bridge YAML: keys anywhere in the tree, converted to Megatron names."""
    args: dict[str, Any] = {}
    for key, path, value in _flatten(data):
        if value is None or NEMO_KEYS.get(key, key.replace("_", "-")) in args:
            continue  # the first occurrence of a key wins
        if path.endswith("optim.name"):  # NeMo: distributed_fused_adam is the distributed optimizer
            args.update({"use-distributed-optimizer": True} if str(value).startswith("distributed") else {})
            continue
        name = NEMO_KEYS.get(key, key.replace("_", "-"))
        if key == "precision":  # NeMo trainer.precision: bf16, bf16-mixed, 16, 16-mixed, 32 (spellings)
            args["lightning-precision"] = str(value)
            continue
        if key == "mixed_precision" and isinstance(value, str):  # Megatron-Bridge recipe name
            args["mixed-precision"] = value
            continue
        if key in ("bf16", "fp16"):
            args.update({key: True} if value is True else {})
            continue
        if key == "fp8" and value not in (False, None, "None"):
            args["fp8-format"] = str(value)
            continue
        if key in ("bias", "add_bias_linear"):  # NeMo model.bias / Megatron-Core add_bias_linear
            args.update({} if value else {"disable-bias-linear": True})
            continue
        if key == "activation":  # NeMo model.activation: gelu, swiglu, fast-swiglu, ...
            args.update({"swiglu": True} if "swiglu" in str(value) else {})
            continue
        if key == "share_embeddings_and_output_weights":
            args.update({} if value else {"untie-embeddings-and-output-weights": True})
            continue
        if key == "normalization":
            args[name] = "RMSNorm" if str(value).lower() == "rmsnorm" else "LayerNorm"
            continue
        if key == "position_embedding_type":
            args[name] = "learned_absolute" if str(value) == "learned_absolute" else str(value)
            continue
        args[name] = True if value is True else (False if value is False else str(value))
    args = {k: v for k, v in args.items() if v is not False}
    return read_megatron(args, where, framework="nemo")


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
