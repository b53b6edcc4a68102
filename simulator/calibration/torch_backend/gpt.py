"""A small GPT in plain torch.nn, shaped so torch's parallel APIs can shard it.

Owns the module tree (names follow torchtitan: ``tok_embeddings``, ``layers.<i>.attention.wq``,
``feed_forward.w1``, ``norm``, ``output``) and a stage builder that keeps only the parts one
pipeline stage owns. It does not parallelise anything: ``runners`` applies DDP, FSDP2, tensor
parallelism and pipelining with torch's own APIs. Imported only inside ranks (imports torch).

Attention heads are inferred from the local width of ``wq``'s output, so the same code runs
unsharded and column-sharded by tensor parallelism.
"""

from __future__ import annotations

import zlib

import torch
import torch.nn.functional as F
from torch import nn

from clustersim.simulator.calibration.torch_backend.specs import GPTConfig


class Attention(nn.Module):
    """Causal multi-head self-attention (q, k, v, o projections without bias)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.head_dim = h // cfg.num_heads
        self.wq = nn.Linear(h, h, bias=False)
        self.wk = nn.Linear(h, h, bias=False)
        self.wv = nn.Linear(h, h, bias=False)
        self.wo = nn.Linear(h, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """GELU MLP h -> ffn -> h without bias."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.ffn_hidden_size, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(cfg.hidden_size)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class GPT(nn.Module):
    """Embedding, blocks, final norm and output head; parts absent on a pipeline stage are None."""

    def __init__(self, cfg: GPTConfig, *, layers: range | None = None, first: bool = True, last: bool = True,
                 seed: int = 0) -> None:
        super().__init__()
        owned = range(cfg.num_layers) if layers is None else layers
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size) if first else None
        # ModuleDict keyed by the global layer index keeps parameter names stable across stages.
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in owned})
        self.norm = nn.LayerNorm(cfg.hidden_size) if last else None
        self.output = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) if last else None
        init_weights(self, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for block in self.layers.values():
            h = block(h)
        if self.output is None or self.norm is None:  # not the last stage: hand on the hidden states
            return h
        return self.output(self.norm(h))


def init_weights(model: nn.Module, seed: int) -> None:
    """N(0, 0.02) matrices seeded by (seed, parameter name): a stage, a shard's source and the
    whole model get the same values for the same names, whatever else was built first."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


def stage_layers(num_layers: int, stage: int, num_stages: int) -> range:
    """Contiguous layers of ``stage``: an even split, the remainder going to the first stages."""
    base, extra = divmod(num_layers, num_stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


def build_stage(cfg: GPTConfig, stage: int, num_stages: int, seed: int = 0) -> GPT:
    """The part of the GPT that pipeline ``stage`` of ``num_stages`` owns."""
    return GPT(
        cfg,
        layers=stage_layers(cfg.num_layers, stage, num_stages),
        first=stage == 0,
        last=stage == num_stages - 1,
        seed=seed,
    )


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over the flattened batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
