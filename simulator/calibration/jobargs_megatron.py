"""Megatron-LM command lines and NeMo / Megatron-Bridge YAML -> a ``JobConfig``.

Owns the Megatron argument names (``megatron/training/arguments.py``): splitting a launch script
into ``--key value`` pairs, the model, plan and precision those names give (Megatron's own
defaults applied where ``arguments.py`` documents them, each recorded in ``notes``), and the NeMo 1
/ Megatron-Bridge YAML keys converted to those names (``NEMO_KEYS``). It does not read torchtitan or
Composer files nor choose a reader by file suffix (``jobargs``).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Mapping

from clustersim.simulator.calibration.jobargs_deepspeed import DEEPSPEED_ARGS, read_deepspeed
from clustersim.simulator.calibration.jobconfig import JobArgsError, JobConfig, read_precision, read_sharding


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
                values = [tokens[k + 1]]
                while key in MULTI_VALUE and k + 2 < len(tokens) and not tokens[k + 2].startswith("--"):
                    values.append(tokens[k + 2])
                    k += 1
                out[key] = " ".join(values)
                k += 1
            else:
                out[key] = True
        k += 1
    return out


MULTI_VALUE = frozenset({"cuda-graph-scope", "recompute-modules"})
"""Megatron arguments that take several values (``nargs='+'`` in megatron/training/arguments.py),
kept space-separated."""


MEGATRON_REQUIRED = ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "global-batch-size")

MEGATRON_USED = {
    "num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "group-query-attention",
    "num-query-groups", "kv-channels", "seq-length", "max-position-embeddings", "global-batch-size",
    "micro-batch-size", "vocab-size", "swiglu", "normalization", "untie-embeddings-and-output-weights",
    "disable-bias-linear", "position-embedding-type", "hidden-dropout", "attention-dropout",
    "activation-func-fp8-input-store", "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
    "moe-shared-expert-intermediate-size", "moe-latent-size", "squared-relu", "hybrid-override-pattern",
    "hybrid-layer-pattern", "mamba-num-heads", "mamba-head-dim", "mamba-state-dim", "mamba-num-groups",
    "mtp-num-layers", "mtp-hybrid-override-pattern", "mtp-use-repeated-layer",
    "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
    "expert-model-parallel-size", "sequence-parallel", "num-layers-per-virtual-pipeline-stage",
    "num-virtual-stages-per-pipeline-rank", "recompute-granularity", "recompute-num-layers",
    "use-distributed-optimizer", "bf16", "fp16", "fp8-format", "save-interval", "eval-interval",
    "nnodes", "nproc_per_node", "nproc-per-node", "overlap-grad-reduce", "overlap-param-gather",
    "fp8-recipe", "fp4-format", "mixed-precision", "lightning-precision", "use-torch-fsdp2", "use-megatron-fsdp",
    "checkpoint-activations", "recompute-activations", "num_nodes", "num_gpus", "cuda-graph-impl",
    "cuda-graph-scope", "enable-cuda-graph", "external-cuda-graph", "recompute-modules",
    "cross-entropy-loss-fusion", "cross-entropy-fusion-impl",
}


def _int(args: Mapping[str, Any], key: str, where: str) -> int:
    raw = args[key]
    try:
        return int(str(raw))
    except ValueError:
        raise JobArgsError(f"{where}: {key} = {raw!r} must be an integer") from None


def _opt_int(args: Mapping[str, Any], key: str, where: str) -> int | None:
    return _int(args, key, where) if key in args and args[key] is not True else None


MEGATRON_DROPOUT = 0.1
"""Megatron-LM's --hidden-dropout and --attention-dropout default (megatron/training/arguments.py
``_add_regularization_args``; Megatron-Core ``TransformerConfig`` and NeMo's YAML keep it)."""


def _float(args: Mapping[str, Any], key: str, where: str) -> float:
    try:
        return float(args[key])
    except (TypeError, ValueError):
        raise JobArgsError(f"{where}: --{key} = {args[key]!r} is not a number; give a probability such as 0.0") from None


def _flag(args: Mapping[str, Any], key: str) -> bool:
    v = args.get(key, False)
    return v is True or str(v).lower() in ("true", "1", "yes")


def megatron_model(a: Mapping[str, Any], where: str, notes: list[str], command_line: bool = True) -> dict[str, Any]:
    """ModelSpec fields from Megatron names (defaults of megatron/training/arguments.py, noted).
    ``command_line``: the names come from a Megatron-LM command line, whose argparse defaults hold for
    a flag not given; False for NeMo / Megatron-Bridge YAML, where a missing key says nothing."""
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
    for key in ("hidden-dropout", "attention-dropout"):
        name = key.replace("-", "_")
        if key in a:
            fields[name] = _float(a, key, where)
        elif command_line:  # arguments.py _add_regularization_args: 0.1 when the flag is absent
            fields[name] = MEGATRON_DROPOUT
            notes.append(f"{name} = {MEGATRON_DROPOUT}: Megatron-LM's default (flag not given); "
                         "it keeps dropout masks, memory only")
        else:  # a YAML without the key: the model's own default applies, which a partial file does not say
            notes.append(f"{name} not given: 0 (Megatron-Bridge's and NeMo 2's current model providers set 0, "
                         f"Megatron-Core's bare TransformerConfig {MEGATRON_DROPOUT}); memory only")
    if _opt_int(a, "num-experts", where):
        fields.update(num_experts=_int(a, "num-experts", where), top_k=_opt_int(a, "moe-router-topk", where) or 2)
        if "moe-ffn-hidden-size" in a:
            fields["moe_ffn_hidden_size"] = _int(a, "moe-ffn-hidden-size", where)
        if _opt_int(a, "moe-shared-expert-intermediate-size", where):  # one merged shared MLP of that width
            fields.update(num_shared_experts=1, shared_expert_ffn_hidden_size=_int(a, "moe-shared-expert-intermediate-size", where))
        if _opt_int(a, "moe-latent-size", where):
            fields["moe_latent_size"] = _int(a, "moe-latent-size", where)
    fields.update(_hybrid_and_mtp(a, where, h, notes))
    return fields


def _hybrid_and_mtp(a: Mapping[str, Any], where: str, h: int, notes: list[str]) -> dict[str, Any]:
    """A hybrid Mamba model's pattern and Mamba-2 sizes (``--hybrid-override-pattern``, Megatron-Bridge's
    ``hybrid_layer_pattern`` too; ``--mamba-num-heads/-head-dim/-state-dim/-num-groups``, Megatron-Core's
    defaults 64 / 128 / 8 and, without a head count, d_inner = 2h as its expand of 2) and the MTP depths
    (``--mtp-num-layers``, ``--mtp-hybrid-override-pattern``, ``--mtp-use-repeated-layer``)."""
    out: dict[str, Any] = {}
    pattern = a.get("hybrid-override-pattern") or a.get("hybrid-layer-pattern")
    if pattern:
        out["layer_pattern"] = str(pattern)
        head_dim = _opt_int(a, "mamba-head-dim", where) or 64
        out.update(mamba_head_dim=head_dim, mamba_state_dim=_opt_int(a, "mamba-state-dim", where) or 128,
                   mamba_num_groups=_opt_int(a, "mamba-num-groups", where) or 8)
        heads = _opt_int(a, "mamba-num-heads", where)
        if heads is None and "M" in str(pattern):
            heads = 2 * h // head_dim
            notes.append(f"mamba_num_heads = {heads}: Megatron-Core's default d_inner = 2 x hidden / head_dim (flag not given)")
        out["mamba_num_heads"] = heads or 0
    depths = _opt_int(a, "mtp-num-layers", where)
    if depths:
        out["mtp_layers"] = depths
        if a.get("mtp-hybrid-override-pattern"):
            out["mtp_layer_pattern"] = str(a["mtp-hybrid-override-pattern"])
        out["mtp_shared_weights"] = _flag(a, "mtp-use-repeated-layer")
    return out


def megatron_plan(a: Mapping[str, Any], where: str, layers: int, command_line: bool = True) -> dict[str, Any]:
    """ParallelPlan fields (all but dp) from Megatron's parallelism arguments (``command_line``: a
    Megatron-LM command line, whose store-true flags are off when absent; False for NeMo / Bridge YAML,
    whose providers turn ``cross_entropy_loss_fusion`` on by default)."""
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
        "activation_fp8_input_store": _flag(a, "activation-func-fp8-input-store"),
    }
    for flag, spelled in (("use-torch-fsdp2", "FSDP2 fully_shard"), ("use-megatron-fsdp", "Megatron-FSDP")):
        if _flag(a, flag):  # arguments.py: FSDP2 / Megatron-FSDP instead of DDP + distributed optimizer
            sh = read_sharding(spelled, where, f"--{flag}")
            plan.update(fsdp=sh["fsdp"], zero=sh["zero"])
    plan.update(_cuda_graphs(a))
    fused = _flag(a, "cross-entropy-loss-fusion") if command_line or "cross-entropy-loss-fusion" in a else True
    if fused and str(a.get("cross-entropy-fusion-impl", "native")) == "te":
        plan["cross_entropy_fusion_impl"] = "te"  # arguments.py: the impl applies with the fusion on
    gran = a.get("recompute-granularity")
    if gran is None and _flag(a, "checkpoint-activations"):  # Megatron-DeepSpeed: every layer checkpointed
        gran = "full"
    elif gran is None and _flag(a, "recompute-activations"):  # arguments.py: recompute_granularity = 'selective'
        gran = "selective"
    if gran in ("selective", "full"):
        plan["recompute"] = gran
        if gran == "selective" and "recompute-modules" in a:
            plan["recompute_modules"] = _names(a["recompute-modules"])
        if gran == "full" and "recompute-num-layers" in a:
            plan["recompute_layers"] = _int(a, "recompute-num-layers", where)
    return plan


def _names(value: Any) -> tuple[str, ...]:
    """A multi-value argument (space-separated on a command line, a list in YAML) as names."""
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else tuple(str(value).split())


def _cuda_graphs(a: Mapping[str, Any]) -> dict[str, Any]:
    """``plan.cuda_graph_scope`` from ``--cuda-graph-impl`` / ``--cuda-graph-scope`` (arguments.py: no scope
    captures the whole layer; the older scope name ``full`` is the same) or the older
    ``--enable-cuda-graph`` / ``--external-cuda-graph`` (whole layers); nothing without an implementation."""
    impl = str(a.get("cuda-graph-impl", "none")).lower()
    if impl in ("local", "transformer_engine") or _flag(a, "enable-cuda-graph") or _flag(a, "external-cuda-graph"):
        scopes = _names(a["cuda-graph-scope"]) if "cuda-graph-scope" in a and a["cuda-graph-scope"] is not True else ()
        return {"cuda_graph_scope": tuple("layer" if x == "full" else x for x in scopes) or ("layer",)}
    return {}


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
    model = megatron_model(args, where, notes, command_line=framework == "megatron")
    training = {"seq_len": _int(args, "seq-length", where), "global_batch_size": _int(args, "global-batch-size", where),
                "precision": _megatron_precision(args, where, notes)}
    nodes = _opt_int(args, "nnodes", where) or _opt_int(args, "num_nodes", where)  # torchrun, or the deepspeed launcher
    per = (_opt_int(args, "nproc_per_node", where) or _opt_int(args, "nproc-per-node", where)
           or _opt_int(args, "num_gpus", where))
    plan = megatron_plan(args, where, model["num_layers"], command_line=framework == "megatron")
    if "cuda-graph-scope" in args and "cuda_graph_scope" not in plan:
        notes.append(f"cuda-graph-scope {args['cuda-graph-scope']!r} not used: no --cuda-graph-impl (Megatron-LM: "
                     "the scope has no effect when --cuda-graph-impl=none)")
    if framework == "megatron":  # Megatron-DeepSpeed: the JSON its --deepspeed_config names
        read_deepspeed(args, where, plan, training, notes)
    return JobConfig(framework=framework, source=where, model=model, training=training, plan=plan,
                     num_gpus=nodes * per if nodes and per else None,
                     checkpoint_interval=_opt_int(args, "save-interval", where),
                     eval_interval=_opt_int(args, "eval-interval", where),
                     ignored=tuple(sorted(k for k in args if k not in MEGATRON_USED | DEEPSPEED_ARGS)),
                     notes=tuple(notes))


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

