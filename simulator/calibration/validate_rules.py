"""Inference rules of the validation: how an incomplete published row becomes a scenario.

Owns reading the cells of a published_runs.csv row (``text``, ``num``), the measured step time
(published, or derived from throughput or TFLOP/s by the row's own FLOP convention), the model
(preset plus the row's shape) and the precision; the parallel plan's rules are
``validate_plan``'s. Every rule that fills a missing field appends a sentence to ``notes``; a row
no rule can complete raises ``SkipRow``. The rules are listed in docs/VALIDATION.md. It builds no cluster and runs nothing (``clustersim.simulator.calibration.validate``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping

from clustersim.simulator.calibration.spellings import TRAINING_PRECISION, UnknownSpelling, precision_label
from clustersim.workloads import ModelSpec, TrainingSpec, get_model, megatron_flops_per_step, resolve_model_name
from clustersim.workloads.errors import WorkloadError
from clustersim.workloads.training import Precision
from clustersim.workloads.presets import KNOWN_FAMILIES

MEGATRON_CORE_FRAMEWORKS: tuple[str, ...] = ("megatron-core", "nemo", "megatron-bridge")
"""Framework strings (lower case) of Megatron-Core based runs (distributed optimizer, SP, TE)."""

SHAPE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("num_layers", "num_layers"), ("hidden_size", "hidden_size"), ("num_heads", "num_heads"),
    ("num_kv_heads", "num_kv_heads"), ("ffn_hidden_size", "ffn_hidden_size"), ("vocab_size", "vocab_size"),
)
"""(CSV column, ModelSpec field) pairs a row may override its preset with."""
MOE_COLUMNS: tuple[tuple[str, str], ...] = (("num_experts", "num_experts"), ("moe_topk", "top_k"))
"""(CSV column, ModelSpec field) pairs of the MoE shape a row may print (routed experts, top-k)."""


class SkipRow(ValueError):
    """A row that cannot be simulated; the message is the reason written to the output."""


def text(row: Mapping[str, Any], key: str) -> str:
    """The cell as a stripped string ('' when empty or NaN)."""
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).strip()


def num(row: Mapping[str, Any], key: str) -> float | None:
    """The cell as a float (None when empty or NaN)."""
    v = row.get(key)
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def framework_is_mcore(row: Mapping[str, Any]) -> bool:
    """Megatron-Core based (Megatron-Core >= r0.x, NeMo, Megatron-Bridge), not 2021 Megatron-LM."""
    fw = text(row, "framework").lower()
    return any(k in fw for k in MEGATRON_CORE_FRAMEWORKS)


# ---------------------------------------------------------------- measured step time

def mcore_model_flops(model: ModelSpec, seq: int, batch: int) -> float:
    """Megatron-Core ``num_floating_point_operations`` (megatron/training/training.py, r0.8):
    12*B*s*L*h^2*((1 + g/a + s/h)*q/h + ffn/h*gated + V/(2*L*h)), dense layers, no recompute."""
    h, n_l = model.hidden_size, model.num_layers
    q_ratio = model.num_heads * model.attn_head_dim / h
    attn = (1 + model.num_kv_heads / model.num_heads + seq / h) * q_ratio
    mlp = model.ffn_hidden_size / h * (1.5 if model.gated_mlp else 1.0)
    return 12.0 * batch * seq * n_l * h * h * (attn + mlp + model.vocab_size / (2 * n_l * h))


def _flops_per_step(row: Mapping[str, Any], notes: list[str]) -> float:
    """FLOP per step under the row's own ``flops_definition`` (for TFLOP/s -> seconds)."""
    model = model_for_row(row, [])
    seq, gbs = int(num(row, "seq_len") or 0), int(num(row, "global_batch_seqs") or 0)
    training = TrainingSpec(seq_len=seq, global_batch_size=gbs)
    definition = text(row, "flops_definition")
    if "SC'21" in definition:
        return megatron_flops_per_step(model, training, recompute_full=True)
    if framework_is_mcore(row) and not model.is_moe:
        notes.append("step time from TFLOP/s with Megatron-Core num_floating_point_operations")
        return mcore_model_flops(model, seq, gbs)
    raise SkipRow(f"no step time and flops_definition {definition[:40]!r} cannot convert TFLOP/s")


def measured_step_time(row: Mapping[str, Any], notes: list[str]) -> tuple[float, str]:
    """Seconds per optimizer step and the column it comes from."""
    it = num(row, "iteration_time_s")
    if it:
        return it, "iteration_time_s"
    tokens = (num(row, "global_batch_seqs") or 0) * (num(row, "seq_len") or 0)
    n = num(row, "num_gpus") or 0
    total = num(row, "tokens_per_s_total") or (num(row, "tokens_per_s_per_gpu") or 0) * n
    if total and tokens:
        return tokens / total, "tokens_per_s"
    tflops, mfu_pct = num(row, "tflops_per_gpu"), num(row, "mfu_pct")
    if not tflops and mfu_pct:
        basis = num(row, "peak_tflops_basis")
        if basis is None and text(row, "gpu_type").upper() == "H100":
            basis = 989.0  # H100 SXM dense BF16 peak, the basis of the same README's model table
            notes.append("peak_tflops_basis = 989 (H100 BF16 dense, as the README model table)")
        tflops = mfu_pct / 100.0 * basis if basis else None
    if not tflops or not n:
        raise SkipRow("no step time: iteration_time_s, tokens/s and TFLOP/s all missing")
    return _flops_per_step(row, notes) / (tflops * 1e12 * n), "tflops_per_gpu"


# ---------------------------------------------------------------- model

def _row_shape(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's printed shape as ModelSpec keyword overrides (int values; keys from SHAPE_COLUMNS)."""
    return {field: int(v) for col, field in SHAPE_COLUMNS if (v := num(row, col)) is not None}


def _gpt_style(row: Mapping[str, Any], shape: dict[str, Any], notes: list[str]) -> ModelSpec:
    """A dense row without a preset: the gpt3-175b preset's non-shape fields with the row's shape."""
    need = ("num_layers", "hidden_size", "num_heads", "vocab_size")
    if any(k not in shape for k in need):
        raise SkipRow(f"model {text(row, 'model')!r}: no preset and the row lacks {[k for k in need if k not in shape]}")
    base = get_model("gpt3-175b")
    shape.setdefault("num_kv_heads", shape["num_heads"])
    shape.setdefault("ffn_hidden_size", 4 * shape["hidden_size"])
    notes.append("model: GPT-style (gpt3-175b preset) with the row's shape; MHA and ffn = 4h when missing")
    return dataclasses.replace(base, name=text(row, "model"), **shape)


def _moe_with_row_shape(row: Mapping[str, Any], model: ModelSpec, shape: dict[str, Any],
                        notes: list[str]) -> ModelSpec:
    """An MoE preset with what the row prints of its shape: the dense columns, routed experts and
    top-k (``MOE_COLUMNS``). A printed ``ffn_hidden_size`` sets the expert FFN only where the preset's
    dense and expert FFN are one width (every layer MoE: Mixtral, GPT-OSS); elsewhere it is ambiguous
    (dense prefix or expert?) and the row is skipped naming it."""
    shape = dict(shape)
    shape.update({field: int(v) for col, field in MOE_COLUMNS if (v := num(row, col)) is not None})
    if "ffn_hidden_size" in shape and shape["ffn_hidden_size"] != model.ffn_hidden_size:
        if model.moe_ffn_hidden_size not in (None, model.ffn_hidden_size):
            raise SkipRow(f"ffn_hidden_size = {shape['ffn_hidden_size']} on an MoE row of preset {model.name} (dense FFN "
                          f"{model.ffn_hidden_size}, expert FFN {model.moe_ffn_hidden_size}): which one it is is not "
                          "printed; drop the column or give an hf_config")
        shape["moe_ffn_hidden_size"] = shape["ffn_hidden_size"]
    changed = {k: v for k, v in shape.items() if getattr(model, k) != v}
    if "num_heads" in changed and "num_kv_heads" not in shape:
        changed["num_kv_heads"] = changed["num_heads"]
    if changed:
        notes.append(f"model: MoE preset {model.name} with the row's {sorted(changed)}")
        model = dataclasses.replace(model, **changed)
    return model


TOKEN_DROP_QUALIFIER = re.compile(r"\(\s*token[\s_-]*drop\s*\)", re.IGNORECASE)
"""A model name's run qualifier that names a token-dropping MoE run ('DeepSeekV3 (tokendrop)')."""

TOKEN_DROP_CAPACITY = 1.0
"""Megatron-Bridge's ``apply_moe_token_drop`` (src/megatron/bridge/training/utils/moe_token_drop.py,
NVIDIA-NeMo/Megatron-Bridge; the stored copy's commit is not recorded) sets
``moe_expert_capacity_factor`` = 1.0 and ``moe_pad_expert_input_to_capacity`` = True by default; its
performance configs call it with the defaults for their token-drop runs."""


def _with_token_drop(name: str, model: ModelSpec, notes: list[str]) -> ModelSpec:
    """A MoE run marked token-drop as Megatron-Bridge configures it: capacity factor 1.0 with the
    expert inputs padded to capacity (token counts fixed on the host: no dispatcher sync,
    ``step.host``); any other name unchanged."""
    if not TOKEN_DROP_QUALIFIER.search(name):
        return model
    notes.append(f"model: '{name}' runs token-drop: capacity_factor {TOKEN_DROP_CAPACITY:g}, padded to capacity "
                 "(Megatron-Bridge apply_moe_token_drop defaults)")
    return dataclasses.replace(model, capacity_factor=TOKEN_DROP_CAPACITY, pad_to_capacity=True)


def model_for_row(row: Mapping[str, Any], notes: list[str]) -> ModelSpec:
    """The preset named by ``model``, overridden by the shape columns the row prints (MoE rows also
    by their experts and top-k, ``_moe_with_row_shape``)."""
    name = text(row, "model")
    shape = _row_shape(row)
    try:
        model = get_model(resolve_model_name(name))
    except WorkloadError:
        if "nemotron_3" in name.lower() or "nemotron-3" in name.lower():
            raise SkipRow(f"model {name!r}: hybrid Mamba-Transformer without a preset (Nemotron 3 Ultra, 3.5 "
                          "Lightning: no citable layer pattern, expert, latent and MTP sizes)") from None
        if text(row, "arch_type") != "dense":
            raise SkipRow(f"model {name!r}: MoE without a preset; the table has no columns for its expert FFN width, "
                          "shared experts, dense layers or norm/MLP kind, so a printed num_experts / moe_topk cannot "
                          "make a model; add a preset or an hf_config") from None
        if re.search(KNOWN_FAMILIES, name.lower()):
            raise SkipRow(f"model {name!r}: a known family without a preset of this size (its MLP, norm and "
                          "attention are not GPT-style); add a preset or an hf_config") from None
        return _gpt_style(row, shape, notes)
    if model.is_moe:
        return _with_token_drop(name, _moe_with_row_shape(row, model, shape, notes), notes)
    changed = {k: v for k, v in shape.items() if getattr(model, k) != v}
    if "num_heads" in changed and "num_kv_heads" not in shape:
        changed["num_kv_heads"] = changed["num_heads"]  # the row's heads without a KV count: MHA
    if changed:
        notes.append(f"model: preset {resolve_model_name(name)} with the row's {sorted(changed)}")
        model = dataclasses.replace(model, **changed)
    return model


# ---------------------------------------------------------------- precision and plan

def precision_of(row: Mapping[str, Any], notes: list[str]) -> tuple[Precision, str]:
    """(TrainingSpec precision, label) by ``spellings.PRECISION_SPELLINGS``; missing -> bf16, noted."""
    p = text(row, "precision")
    if not p:
        notes.append("precision: bf16 (peak basis of the source is the BF16 peak)")
        return "bf16", "bf16"
    try:
        label = precision_label(p)
    except UnknownSpelling as exc:
        raise SkipRow(str(exc)) from None
    return TRAINING_PRECISION[label], label
