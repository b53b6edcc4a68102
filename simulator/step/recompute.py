"""Which ops a layer runs again in backward under Megatron-Core's per-module recompute.

Owns ``recomputed_ops``, and ``full_recompute_ops`` with the search's ``saved_forward`` /
``full_recompute_time`` for a full recompute that keeps outputs (``ParallelPlan.recompute_saved``): for a plan's ``recompute_modules`` (selective recompute; Megatron-Core
``TransformerConfig.recompute_modules``, megatron/core/transformer/transformer_config.py) the ops
of one layer each module repeats before its backward, selected by ``Op.role`` (never by name):

- core_attn: the attention core (the fused kernel, or the unfused score path);
- mla_up_proj: MLA's query and key/value up-projections (output-discarding checkpoint);
- layernorm: the pre-attention norm of MLA layers and the pre-MLP norm of MoE layers, the norms
  that are modules of their own (GQA/MHA and dense MLPs fuse them into TE's LayerNormLinear);
- mlp: a dense layer's MLP, its fused norm included (normal checkpoint);
- moe: the whole MoE block: router, permute, dispatch, experts, combine, unpermute, shared
  experts (``moe_recomputes_dispatch``: its all-to-alls run again too);
- moe_act: the routed experts' activation function;
- shared_experts: the shared experts' MLP.

The memory each module frees is ``workloads.activations``' business; timing the ops is lowering's.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from clustersim.workloads import Op

MOE_ROLES = frozenset({"router", "latent_proj", "permute", "dispatch", "expert_sort", "routed_expert", "combine",
                       "unpermute", "shared_expert"})
"""Roles of the ops inside Megatron-Core's MoELayer (what 'moe' checkpoints)."""


def _separate_norms(ops: list[Op], moe: bool, mla: bool) -> list[Op]:
    """The input norms that are modules of their own: before MLA, before an MoE block.

    A transformer layer has two input norms (attention, then MLP); a hybrid layer has one, before
    its one block."""
    norms = [o for o in ops if o.role == "input_norm"]
    has_attention = any(o.role == "attention_core" for o in ops)
    if len(norms) == 2:
        return [n for n, keep in zip(norms, (mla, moe)) if keep]
    return norms if (moe or (mla and has_attention)) else []


def _module_ops(module: str, ops: list[Op], moe: bool, mla: bool) -> list[Op]:
    """The ops of one layer that ``module`` recomputes (module docstring)."""
    norms = [o for o in ops if o.role == "input_norm"]
    match module:
        case "core_attn":
            return [o for o in ops if o.recompute_selective]
        case "mla_up_proj":
            return [o for o in ops if o.role == "mla_up_proj"]
        case "layernorm":
            return _separate_norms(ops, moe, mla)
        case "mlp":
            dense = [o for o in ops if o.role == "dense_mlp"]
            return ([norms[-1]] if dense and norms else []) + dense
        case "moe":
            return [o for o in ops if o.role in MOE_ROLES]
        case "moe_act":
            return [o for o in ops if o.role == "routed_expert" and o.kind == "elementwise"]
        case "shared_experts":
            return [o for o in ops if o.role == "shared_expert"]
    raise ValueError(f"unknown recompute module {module!r}")  # plan checks reject it first


def recomputed_ops(ops: list[Op], moe: bool, mla: bool, modules: tuple[str, ...]) -> list[Op]:
    """The ops of one layer that ``modules`` recompute, each once, in layer order."""
    chosen = {id(o) for m in modules for o in _module_ops(m, ops, moe, mla)}
    return [o for o in ops if id(o) in chosen]


SAVED_ROLES: dict[str, str] = {"qkv_proj": "qkv_proj"}
"""``ParallelPlan.recompute_saved`` output -> the role of the op producing it, which a full
recompute then does not run again (its output is kept: ``workloads.activations.SAVED_OUTPUTS``)."""


def full_recompute_ops(ops: Sequence[Op], saved: tuple[str, ...]) -> list[Op]:
    """The ops of one layer a full recompute runs again: all of them but those whose outputs are
    kept (``saved``)."""
    skip = {SAVED_ROLES[s] for s in saved}
    return [o for o in ops if o.role not in skip]


def saved_forward(ops: Sequence[Op], time_fwd: Callable[[list[Op]], float]) -> dict[str, float]:
    """Forward seconds (``time_fwd`` of a list of ops) of the ops producing each ``SAVED_ROLES``
    output: what a full recompute keeping it does not run again."""
    return {s: time_fwd([o for o in ops if o.role == role]) for s, role in SAVED_ROLES.items()}


def full_recompute_time(fwd: float, kept: Mapping[str, float], saved: tuple[str, ...]) -> float:
    """Seconds a full recompute of a layer of forward ``fwd`` repeats when it keeps ``saved``
    (``kept``: ``saved_forward`` of the layer)."""
    return fwd - sum(kept[s] for s in saved)


def moe_recomputes_dispatch(moe: bool, modules: tuple[str, ...]) -> bool:
    """Whether recomputing this layer repeats its dispatch and combine all-to-alls ('moe')."""
    return moe and "moe" in modules
