"""torch's own parallel APIs applied to the GPT: DeviceMesh, tensor/sequence parallel, FSDP2.

Owns the per-rank device, the mesh of a plan's axes, torchtitan's TP plan (ColwiseParallel on
q/k/v and w1, RowwiseParallel on wo and w2, SequenceParallel on the norms) and FSDP2
``fully_shard`` per block. Used by the step runners and the framework-overhead microbenchmark.
It does not time anything. Imported only inside ranks (imports torch).
"""

from __future__ import annotations

import contextlib
import os

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    loss_parallel,
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from clustersim.simulator.calibration.torch_backend.gpt import GPT, lm_loss
from clustersim.simulator.calibration.torch_backend.specs import BackendPlan


def device() -> torch.device:
    """This rank's device: its CUDA GPU when there is one, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def synchronize() -> None:
    """Wait for queued device work (a no-op on CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def tp_block_plan(sp: bool) -> dict[str, ParallelStyle]:
    """torchtitan's per-block TP plan: column-shard q/k/v and w1, row-shard wo and w2."""
    out = Shard(1) if sp else Replicate()
    plan: dict[str, ParallelStyle] = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=out),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=out),
    }
    # the block's input enters as one DTensor (torchtitan's PrepareModuleInput): the input
    # gradients of q, k and v add up as Partial and are reduced once (SP: one reduce-scatter; no
    # SP: one all-reduce, as Megatron's fused QKV does), not once per projection
    gather = PrepareModuleInput(input_layouts=(Shard(1) if sp else Replicate(),), desired_input_layouts=(Replicate(),))
    plan.update(attention=gather, feed_forward=gather)
    if sp:
        plan.update(attention_norm=SequenceParallel(), ffn_norm=SequenceParallel())
    return plan


def apply_tp(model: GPT, mesh: DeviceMesh, sp: bool) -> None:
    """Tensor (and sequence) parallelism with torch.distributed.tensor.parallel."""
    out = Shard(1) if sp else Replicate()
    top: dict[str, ParallelStyle] = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=out),
        # logits stay sharded over the vocabulary and the loss runs under ``loss_parallel`` (as
        # torchtitan and Megatron's vocab-parallel cross-entropy do): no rank gathers them all
        "output": ColwiseParallel(input_layouts=out, output_layouts=Shard(-1), use_local_output=False),
    }
    if sp:
        top["norm"] = SequenceParallel()
    parallelize_module(model, mesh, top)
    for block in model.layers.values():
        parallelize_module(block, mesh, tp_block_plan(sp))


def loss_backward(logits: torch.Tensor, targets: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """The loss of ``logits`` and its backward, then ``reduce_partial_grads(model)``; TP's
    vocabulary-sharded logits (a DTensor) go through ``loss_parallel``, forward and backward, so no
    rank gathers the whole vocabulary."""
    with loss_parallel() if isinstance(logits, DTensor) else contextlib.nullcontext():
        loss = lm_loss(logits, targets)
        loss.backward()
    reduce_partial_grads(model)
    return loss


def reduce_partial_grads(model: torch.nn.Module) -> int:
    """Sum the gradients left ``Partial`` by the backward (the SP norms' weights: each TP rank saw
    only its part of the sequence) in one all-reduce of one flat buffer, and store them
    ``Replicate``; the number of gradients reduced.

    Megatron-LM reduces them the same way, coalesced (``finalize_model_grads``:
    ``_allreduce_layernorm_grads``). Left Partial, DTensor would all-reduce each one again at
    every optimizer op that reads it (3 calls per parameter per Adam step)."""
    partial = [p for p in model.parameters()
               if isinstance(p.grad, DTensor) and any(pl.is_partial() for pl in p.grad.placements)]
    if not partial:
        return 0
    grads = [p.grad for p in partial if isinstance(p.grad, DTensor)]
    mesh = grads[0].device_mesh
    flat = torch.cat([g.to_local().reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat, group=mesh.get_group())
    offset = 0
    for p, g in zip(partial, grads):
        n = g.to_local().numel()
        p.grad = DTensor.from_local(flat[offset:offset + n].view_as(g.to_local()), mesh, [Replicate()],
                                    run_check=False)
        offset += n
    return len(partial)


def apply_fsdp(model: GPT, mesh: DeviceMesh) -> None:
    """FSDP2: one ``fully_shard`` unit per block, then the root."""
    for block in model.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def make_mesh(plan: BackendPlan) -> DeviceMesh:
    """A DeviceMesh with the plan's non-trivial axes, outermost first (pp, dp, tp)."""
    axes = [(n, d) for n, d in (("pp", plan.pp), ("dp", plan.dp), ("tp", plan.tp)) if d > 1] or [("dp", 1)]
    return init_device_mesh(device().type, tuple(d for _, d in axes), mesh_dim_names=tuple(n for n, _ in axes))
