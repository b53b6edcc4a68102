"""Megatron-Core's pipeline layout string: which layers each model chunk builds.

``pipeline_model_parallel_layout`` (Megatron-Core ``PipelineParallelLayerLayout``) lists the model
chunks in model order, separated by ``|``; each chunk is a run of layer letters: ``E`` the
embedding, ``t`` a transformer (decoder) layer, ``m`` a multi-token-prediction module, ``L`` the
output layer and loss. ``x*n`` repeats one letter, ``(...)*n`` a group (which may hold ``|``), and
commas are cosmetic. Example: DeepSeek-V3 at pp 2 x vpp 8 in Megatron-Bridge's performance recipes,
``Et*4|(t*4|)*14tmL``: the embedding and 4 layers, 14 chunks of 4 layers, then 1 layer with the
MTP module and the loss, 61 layers in 16 chunks. Chunk ``v * pp + s`` is model chunk ``v`` of
stage ``s``, as in ``plan.layer_split``, which a layout fixes.

Owns the parsing and its checks; the partition reads the resulting ``layer_split``.
"""

from __future__ import annotations

import re

from clustersim.simulator.errors import PlanError

LETTERS = {"E": "embedding", "t": "transformer layer", "m": "MTP module", "L": "loss"}
"""The layer letters of a layout and what each builds."""

_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_SINGLE = re.compile(r"(.)\*(\d+)")


def _bad(text: str, why: str) -> PlanError:
    return PlanError(f"plan.pipeline_layout = {text!r}: {why}. Write Megatron-Core's notation: chunks "
                     "separated by '|', E embedding, t transformer layer, m MTP module, L loss, x*n or "
                     "(...)*n to repeat (e.g. 'Et*4|(t*4|)*14tmL')")


def parse_layout(text: str) -> tuple[str, ...]:
    """The chunks of a layout string, each as its run of letters after unrolling the repeats
    (Megatron-Core's ``parse_str_to_list``: commas dropped, ``(...)*n`` unrolled, then ``x*n``)."""
    if not isinstance(text, str) or not text.strip():
        raise _bad(str(text), "must be a non-empty string")
    s = text.replace(",", "").replace(" ", "")
    while True:  # innermost groups first, so nested groups unroll too
        unrolled = _GROUP.sub(lambda g: g.group(1) * int(g.group(2)), s)
        if unrolled == s:
            break
        s = unrolled
    s = _SINGLE.sub(lambda g: g.group(1) * int(g.group(2)), s)
    chunks = tuple(s.split("|"))
    stray = sorted({c for c in s if c not in LETTERS and c != "|"})
    if stray:
        raise _bad(text, f"unknown character(s) {stray} after unrolling")
    return chunks


def layout_split(text: str, *, chunks: int | None = None, mtp_layers: int | None = None,
                 num_layers: int | None = None) -> tuple[int, ...]:
    """Transformer layers per model chunk (model order) of a layout string, checked: the embedding
    exactly once, first in the first chunk; the loss exactly once, last in the last chunk; MTP
    modules only in the last chunk (where clustersim builds them, with the loss); ``chunks`` chunks
    (pp x vpp), ``mtp_layers`` MTP modules and ``num_layers`` transformer layers when given."""
    parsed = parse_layout(text)
    flat = "".join(parsed)
    if flat.count("E") != 1 or not parsed[0].startswith("E"):
        raise _bad(text, "needs the embedding E exactly once, at the start of the first chunk")
    if flat.count("L") != 1 or not parsed[-1].endswith("L"):
        raise _bad(text, "needs the loss L exactly once, at the end of the last chunk")
    if any("m" in c for c in parsed[:-1]):
        raise _bad(text, "puts an MTP module m outside the last chunk; clustersim builds MTP modules "
                         "with the loss on the last chunk")
    if chunks is not None and len(parsed) != chunks:
        raise _bad(text, f"has {len(parsed)} chunks; pp x vpp = {chunks} needs {chunks}")
    if mtp_layers is not None and flat.count("m") != mtp_layers:
        raise _bad(text, f"has {flat.count('m')} MTP module(s) m; the model has mtp_layers = {mtp_layers}")
    if num_layers is not None and flat.count("t") != num_layers:
        raise _bad(text, f"has {flat.count('t')} transformer layers t; the model has num_layers = {num_layers}")
    return tuple(c.count("t") for c in parsed)
