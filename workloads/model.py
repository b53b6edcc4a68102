"""Transformer architecture description and its parameter counts.

Owns `ModelSpec` (dense and MoE decoder-only transformers, MHA/GQA/MQA or DeepSeek-style MLA,
and hybrid Mamba-2/attention/MoE stacks described by a per-layer `layer_pattern`) and the exact
parameter counting of each layer, embedding and head; its validity checks are
``workloads.model_checks``. Does not know about
sharding, FLOPs per op or memory (workloads/ops.py, workloads/activations.py do that).

Counting rules (each a published convention, stated where it matters):
- GEMM weights count rows x columns; biases only when `linear_bias` (Megatron GPT-3 style).
- LayerNorm has weight and bias (2h), RMSNorm a weight only (h).
- Learned position embeddings add max_seq_len*h (GPT-3, MPT); RoPE adds nothing.
- Tied embeddings count the vocabulary matrix once.
- Hybrid models (`layer_pattern` set, Megatron-Core hybrid_override_pattern alphabet) have one
  block per layer behind one pre-norm: M = Mamba-2 mixer, * = attention, - = dense MLP, E = MoE.
  A Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", sec. 7 and Fig. 6; Megatron-Core
  megatron/core/ssm/mamba_mixer.py) holds in_proj h x (2*d_inner + 2*G*N + H) (z, x, B, C, dt),
  a depthwise conv1d of (d_inner + 2*G*N) channels x kernel plus its bias (conv_bias = True),
  dt_bias, A_log and D (H each), the gated RMSNorm over d_inner and out_proj d_inner x h; with
  d_inner = H * head_dim, G = mamba_num_groups, N = mamba_state_dim, no linear biases.
"""

import functools
import types
import typing
from dataclasses import dataclass, fields
from typing import Literal

from clustersim.workloads.errors import WorkloadError

LayerKind = Literal["transformer", "mamba", "attention", "mlp", "moe"]
PATTERN_KINDS: dict[str, LayerKind] = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
"""Megatron-Core hybrid_override_pattern characters (megatron/core/ssm/mamba_hybrid_layer_
allocation.py Symbols: MAMBA 'M', ATTENTION '*', MLP '-', MOE 'E') and the layer kind each is."""


def required(value: int | None, name: str) -> int:
    """A size that validation guarantees for this model kind (MLA dims, the MoE expert width)."""
    if value is None:
        raise WorkloadError(f"{name} is None: this model kind needs it set (validate the ModelSpec first)")
    return value


SIZE_LIMITS: dict[str, int] = {
    "num_layers": 1024, "hidden_size": 1 << 18, "num_heads": 1 << 14, "num_kv_heads": 1 << 14,
    "ffn_hidden_size": 1 << 20, "vocab_size": 1 << 24,
}
"""Upper bounds of the main sizes (far above any published model: Llama 3 405B has 126 layers,
h = 16,384, ffn = 53,248, V = 128,256); every other integer field is bounded by MAX_SIZE."""
MAX_SIZE = 1 << 24
"""Upper bound of every other integer field (widths, ranks, counts, windows)."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer; sizes are element counts, never bytes."""

    name: str
    """Preset or user name of the model."""
    num_layers: int
    """Transformer layers (blocks)."""
    hidden_size: int
    """Model width h (residual stream)."""
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (== num_heads for MHA, 1 for MQA, between for GQA)."""
    ffn_hidden_size: int
    """Hidden width of the dense MLP (per gate branch when gated)."""
    vocab_size: int
    """Vocabulary size (padded, as trained)."""
    gated_mlp: bool = True
    """SwiGLU-style MLP with gate and up projections (3 matrices) instead of 2."""
    tied_embeddings: bool = False
    """Output projection shares the input embedding matrix."""
    head_dim: int | None = None
    """Per-head width; None means hidden_size // num_heads."""
    max_seq_len: int | None = None
    """Longest trained context; sizes learned position embeddings when those are used."""
    num_experts: int = 0
    """Routed experts per MoE layer (0 = dense model)."""
    top_k: int = 0
    """Routed experts each token visits."""
    moe_ffn_hidden_size: int | None = None
    """Hidden width of one routed expert MLP."""
    num_shared_experts: int = 0
    """Always-active shared experts per MoE layer."""
    moe_latent_size: int | None = None
    """LatentMoE width (Megatron-Core ``moe_latent_size``, HF ``moe_latent_size``; Nemotron 3 Super:
    1,024): each MoE layer projects its tokens from h down to this width after the router
    (``fc1_latent_proj``, h x latent), dispatches, runs the routed experts and combines them at this
    width, then projects back to h (``fc2_latent_proj``); router and shared experts stay at h
    (NVIDIA/Megatron-LM megatron/core/transformer/moe/moe_layer.py @ 001199898c4b, ``MoELayer``:
    ``router_and_preprocess`` / ``combine``). None = the experts run at h."""
    shared_expert_ffn_hidden_size: int | None = None
    """Hidden width of one shared expert; None means moe_ffn_hidden_size."""
    first_dense_layers: int = 0
    """The first k layers use a dense MLP of ffn_hidden_size (DeepSeek-V3: 3)."""
    moe_layer_freq: int = 1
    """Layer i (past the dense prefix) is MoE when i % moe_layer_freq == moe_layer_offset."""
    moe_layer_offset: int = 0
    """Phase of the MoE layers, 0 <= offset < moe_layer_freq: 0 for Megatron's integer
    ``moe_layer_freq`` and DeepSeek's config.json (layer 0 MoE); freq - 1 for Hugging Face's
    ``interleave_moe_layer_step`` (Llama 4) and ``decoder_sparse_step`` (Qwen2-MoE), whose MoE layers
    are those with (i + 1) % step == 0 (Llama 4 Maverick: the odd layers, Megatron list [0, 1] * 24)."""
    activation_clamp: float | None = None
    """Clamp of the routed experts' gated activation inputs (HF config.json ``swiglu_limit``; gpt-oss:
    7.0): the gate half clamped to at most this, the up half to [-limit, limit], before
    ``gate * sigmoid(1.702 gate) * (up + 1)`` (transformers modeling_gpt_oss.py ``GptOssExperts``;
    Megatron-Core ``activation_func_clamp_value``). None = no clamp. It costs extra elementwise
    passes and one extra saved copy of the experts' fc1 output (workloads/blocks.py
    ``expert_act_op``, workloads/activations.py)."""
    capacity_factor: float | None = None
    """Expert capacity factor; None = dropless routing."""
    pad_to_capacity: bool = False
    """Pad every expert's input to its capacity (Megatron-Core ``moe_pad_expert_input_to_capacity``,
    needs ``capacity_factor``): token counts are fixed on the host, so the dispatcher never waits for
    the GPU's counts (``simulator.step.host``)."""
    expert_groups: int = 0
    """Group-limited routing: the routed experts split into this many equal groups (DeepSeek-V3
    config.json ``n_group``, Megatron-Core ``moe_router_num_groups``); 0 = no limit."""
    expert_groups_per_token: int = 0
    """Groups each token may pick its experts from (``topk_group``, ``moe_router_group_topk``;
    DeepSeek-V3: 4, "each token will be sent to at most 4 nodes", report sec. 2.1.2)."""
    attention: Literal["mha", "mla"] = "mha"
    """'mha' covers MHA/GQA/MQA; 'mla' is DeepSeek-V2/V3 multi-head latent attention."""
    q_lora_rank: int | None = None
    """MLA query down-projection rank (None = no query compression)."""
    kv_lora_rank: int | None = None
    """MLA key/value latent rank."""
    qk_nope_head_dim: int | None = None
    """MLA per-head query/key width without rotary part."""
    qk_rope_head_dim: int | None = None
    """MLA per-head rotary query/key width (the rotary key is shared by all heads)."""
    v_head_dim: int | None = None
    """MLA per-head value width."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """Normalisation: RMSNorm (weight only) or LayerNorm (weight and bias)."""
    linear_bias: bool = False
    """Linear layers carry biases (GPT-3/Megatron GPT, gpt-oss)."""
    hidden_dropout: float = 0.0
    """Dropout probability on the residual stream (after attention, after the MLP, on the embedding;
    Megatron ``hidden_dropout``, HF ``hidden_dropout`` / ``resid_pdrop``). Memory only: with p > 0 each
    dropout keeps a 1-byte mask for backward; with p = 0 torch's dropout returns its input and keeps
    nothing (ATen Dropout.cpp), as every config.json preset here trains (workloads/activations.py)."""
    attention_dropout: float = 0.0
    """Dropout probability on the attention probabilities (Megatron ``attention_dropout``, HF
    ``attention_dropout`` / ``attn_pdrop``). Memory only, and only without a fused attention kernel: the
    unfused core keeps the dropout's mask and output beside the softmax output; a fused kernel
    regenerates its mask from the RNG state (workloads/activations.py)."""
    learned_position_embeddings: bool = False
    """Absolute learned position embeddings of max_seq_len rows (GPT-3, MPT) instead of RoPE."""
    sliding_window: int | None = None
    """Keys each query sees in sliding-window layers (gpt-oss: 128); None = all layers full."""
    full_attention_freq: int = 1
    """With a sliding window, layer i attends fully when (i + 1) % full_attention_freq == 0 and
    uses the window otherwise (gpt-oss: 2, alternating; HF `layer_types`)."""
    mtp_layers: int = 0
    """Multi-token-prediction depths (DeepSeek-V3 modules; Megatron-Core ``mtp_num_layers``), each
    two norms, a 2h->h projection and a block (``mtp_layer_pattern``), sharing embedding and output
    head (0 = none)."""
    mtp_layer_pattern: str | None = None
    """The block of each MTP depth as hybrid-pattern characters (Megatron-Core
    ``mtp_hybrid_override_pattern``; Nemotron 3 Super: "*E", an attention and an MoE layer, each
    behind its own pre-norm); None = one layer shaped like the model's last (DeepSeek-V3)."""
    mtp_shared_weights: bool = False
    """Every MTP depth runs the same module (Megatron-Core ``mtp_use_repeated_layer``): its weights
    are held once, its compute repeats ``mtp_layers`` times."""
    layer_pattern: str | None = None
    """Hybrid models: one PATTERN_KINDS character per layer (len == num_layers), each layer one
    block behind one pre-norm; None = every layer is attention + MLP/MoE (a transformer)."""
    mamba_num_heads: int = 0
    """Mamba-2 heads H (0 = no Mamba layers)."""
    mamba_head_dim: int = 64
    """Mamba-2 head width P; d_inner = H * P (Megatron-Core default 64)."""
    mamba_state_dim: int = 128
    """Mamba-2 SSM state size N (d_state, HF ssm_state_size; Megatron-Core default 128)."""
    mamba_num_groups: int = 8
    """Mamba-2 B/C groups G (n_groups; Megatron-Core default 8)."""
    mamba_conv_kernel: int = 4
    """Depthwise causal conv1d width (d_conv, HF conv_kernel; Mamba-2 default 4)."""
    mamba_chunk_size: int = 128
    """SSD chunk length Q of the chunked scan (HF chunk_size; 128 in Nemotron-H configs)."""
    source: str = ""
    """Citation of the configuration (paper table or official config file)."""

    def __post_init__(self) -> None:
        model_checks.check_model(self)

    # ---- derived shapes -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts."""
        return self.num_experts > 0

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer i (0-based) has an MoE block instead of a dense MLP."""
        _check_layer_index(self, i)
        if self.layer_pattern is not None:
            return self.layer_pattern[i] == "E"
        return self.is_moe and i >= self.first_dense_layers and i % self.moe_layer_freq == self.moe_layer_offset

    def layer_kind(self, i: int) -> LayerKind:
        """'transformer' (attention + MLP/MoE) without a pattern, else the pattern's kind."""
        _check_layer_index(self, i)
        return "transformer" if self.layer_pattern is None else PATTERN_KINDS[self.layer_pattern[i]]

    def has_attention(self, i: int) -> bool:
        """Whether layer i has a softmax attention block."""
        return self.layer_kind(i) in ("transformer", "attention")

    @property
    def mamba_d_inner(self) -> int:
        """Mamba-2 inner width d_inner = H * head_dim (expand * h in the Mamba-2 paper)."""
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of the Mamba-2 conv1d: x, B and C (d_inner + 2*G*N)."""
        return self.mamba_d_inner + 2 * self.mamba_num_groups * self.mamba_state_dim

    def attention_window(self, i: int) -> int | None:
        """Keys per query of layer i's attention: the sliding window, or None for full causal."""
        _check_layer_index(self, i)
        if self.sliding_window is None or (i + 1) % self.full_attention_freq == 0:
            return None
        return self.sliding_window

    @property
    def attn_head_dim(self) -> int:
        """Per-head query/key width (MLA: nope + rope)."""
        if self.attention == "mla":
            return required(self.qk_nope_head_dim, "qk_nope_head_dim") + required(self.qk_rope_head_dim, "qk_rope_head_dim")
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def value_head_dim(self) -> int:
        """Per-head value width."""
        return required(self.v_head_dim, "v_head_dim") if self.attention == "mla" else self.attn_head_dim

    @property
    def shared_ffn(self) -> int:
        """Hidden width of one shared expert."""
        if self.shared_expert_ffn_hidden_size is not None:
            return self.shared_expert_ffn_hidden_size
        return int(self.moe_ffn_hidden_size or 0)

    @property
    def expert_width(self) -> int:
        """Width of the tokens the routed experts take and the EP dispatch moves: the latent
        size of a LatentMoE, else h."""
        return self.moe_latent_size if self.moe_latent_size else self.hidden_size

    @property
    def mtp_block_kinds(self) -> tuple[LayerKind, ...]:
        """The layer kinds of one MTP depth's block (``mtp_layer_pattern``; without one, the
        last layer's kind)."""
        if self.mtp_layer_pattern is None:
            return (self.layer_kind(self.num_layers - 1),)
        return tuple(PATTERN_KINDS[c] for c in self.mtp_layer_pattern)

    @property
    def num_moe_layers(self) -> int:
        """How many layers are MoE layers."""
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    # ---- parameter counts ---------------------------------------------------------------------
    def norm_params(self, width: int) -> int:
        """Parameters of one norm over `width` features."""
        return 2 * width if self.norm == "layernorm" else width

    def attention_params(self) -> int:
        """Parameters of the attention block (projections, their biases, MLA norms)."""
        return attention_param_parts(self)["total"]

    def mlp_params(self, ffn: int, width: int | None = None) -> int:
        """Parameters of one (dense or expert) MLP of hidden width `ffn` on tokens of `width`
        (default h)."""
        w = self.hidden_size if width is None else width
        n_in = 2 if self.gated_mlp else 1
        bias = (n_in * ffn + w) if self.linear_bias else 0
        return (n_in + 1) * w * ffn + bias

    def router_params(self) -> int:
        """Parameters of the MoE router (one logit per expert; bias for gpt-oss style)."""
        return self.hidden_size * self.num_experts + (self.num_experts if self.linear_bias else 0)

    def mamba_params(self) -> int:
        """Parameters of one Mamba-2 mixer (see the module docstring for the list)."""
        h, d_in, heads = self.hidden_size, self.mamba_d_inner, self.mamba_num_heads
        in_proj = h * (d_in + self.mamba_conv_dim + heads)  # z, (x, B, C), dt
        conv = self.mamba_conv_dim * (self.mamba_conv_kernel + 1)  # weights + bias
        return in_proj + conv + 3 * heads + self.norm_params(d_in) + d_in * h

    def expert_params(self) -> int:
        """Parameters of one routed expert MLP, at ``expert_width``."""
        return self.mlp_params(required(self.moe_ffn_hidden_size, "moe_ffn_hidden_size"), self.expert_width)

    def latent_proj_params(self) -> int:
        """Parameters of a LatentMoE's two projections, h x latent each (0 without a latent)."""
        if not self.moe_latent_size:
            return 0
        bias = (self.moe_latent_size + self.hidden_size) if self.linear_bias else 0
        return 2 * self.hidden_size * self.moe_latent_size + bias

    def moe_block_params(self) -> int:
        """Parameters of one MoE block: every routed expert, shared experts, router and latent
        projections."""
        experts = self.num_experts * self.expert_params()
        shared = self.num_shared_experts * self.mlp_params(self.shared_ffn)
        return experts + shared + self.router_params() + self.latent_proj_params()

    def hybrid_block_params(self, kind: LayerKind) -> int:
        """Parameters of one hybrid layer of ``kind``: its pre-norm and its one block."""
        block = {"mamba": self.mamba_params, "attention": self.attention_params,
                 "mlp": lambda: self.mlp_params(self.ffn_hidden_size),
                 "moe": self.moe_block_params}[kind]()
        return self.norm_params(self.hidden_size) + block

    def layer_params(self, i: int) -> int:
        """All parameters of layer i (every expert counted)."""
        kind = self.layer_kind(i)
        if kind != "transformer":
            return self.hybrid_block_params(kind)
        base = self.attention_params() + 2 * self.norm_params(self.hidden_size)
        if not self.is_moe_layer(i):
            return base + self.mlp_params(self.ffn_hidden_size)
        return base + self.moe_block_params()

    def layer_active_params(self, i: int) -> int:
        """Parameters of layer i that one token uses (top_k routed + shared experts + router)."""
        if not self.is_moe_layer(i):
            return self.layer_params(i)
        return self.layer_params(i) - self._unused_expert_params()

    def _unused_expert_params(self) -> int:
        """Routed-expert parameters of one MoE block that one token does not use."""
        return (self.num_experts - self.top_k) * self.expert_params()

    def embedding_params(self) -> int:
        """Input word embeddings plus learned position embeddings (if any)."""
        learned = self.learned_position_embeddings
        pos = int(self.max_seq_len or 0) * self.hidden_size if learned else 0
        return self.vocab_size * self.hidden_size + pos

    def head_params(self) -> int:
        """Final norm plus the output projection (0 for the projection when tied)."""
        proj = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.norm_params(self.hidden_size) + proj

    def mtp_module_params(self, active: bool = False) -> int:
        """Parameters of one MTP module (DeepSeek-V3 report sec. 2.2: three norms, projection M_k
        of 2h x h, its block; embedding and output head shared, not counted); ``active``: what
        one token uses (MoE: top_k + shared experts)."""
        if self.mtp_layer_pattern is None:
            last = self.num_layers - 1
            block = self.layer_active_params(last) if active else self.layer_params(last)
        else:
            block = sum(self.hybrid_block_params(k) - (self._unused_expert_params() if active and k == "moe" else 0)
                        for k in self.mtp_block_kinds)
        # norms: embedding, hidden state and the module's own final norm (HF shared_head.norm)
        own = 2 * self.hidden_size * self.hidden_size + 3 * self.norm_params(self.hidden_size)
        return block + own

    def mtp_params(self, active: bool = False) -> int:
        """Parameters of the MTP modules: one module per depth, or one for all with
        ``mtp_shared_weights``; ``active``: the parameters one token's compute runs through, once
        per depth either way (the FLOP count's view)."""
        modules = 1 if self.mtp_shared_weights and not active and self.mtp_layers else self.mtp_layers
        return modules * self.mtp_module_params(active)

    def num_params(self) -> int:
        """Total parameters including embeddings, head, every expert and MTP modules."""
        layers = sum(self.layer_params(i) for i in range(self.num_layers))
        return self.embedding_params() + layers + self.head_params() + self.mtp_params()

    def num_active_params(self) -> int:
        """Parameters used per token, including embeddings and head (MoE: top_k + shared)."""
        layers = sum(self.layer_active_params(i) for i in range(self.num_layers))
        base = self.embedding_params() + layers + self.head_params()
        return base + self.mtp_params(active=True)


def attention_param_parts(m: ModelSpec) -> dict[str, int]:
    """Named weight counts of the attention block; 'total' sums them with biases and norms."""
    h, heads = m.hidden_size, m.num_heads
    if m.attention == "mla":
        parts = _mla_parts(m)
    else:
        d = m.attn_head_dim
        parts = {"qkv": h * (heads + 2 * m.num_kv_heads) * d, "out": heads * d * h}
        if m.linear_bias:
            parts["bias"] = (heads + 2 * m.num_kv_heads) * d + h
    parts["total"] = sum(parts.values())
    return parts


def _mla_parts(m: ModelSpec) -> dict[str, int]:
    """MLA weights after DeepSeek-V3 modeling code (q_a/q_b, kv_a/kv_b, o and the two norms)."""
    h, heads = m.hidden_size, m.num_heads
    qk, rope, v = m.attn_head_dim, required(m.qk_rope_head_dim, "qk_rope_head_dim"), m.value_head_dim
    kvl = required(m.kv_lora_rank, "kv_lora_rank")
    parts: dict[str, int] = {}
    if m.q_lora_rank is None:
        parts["q"] = h * heads * qk
    else:
        parts["q_down"] = h * m.q_lora_rank
        parts["q_norm"] = m.norm_params(m.q_lora_rank)
        parts["q_up"] = m.q_lora_rank * heads * qk
    parts["kv_down"] = h * (kvl + rope)
    parts["kv_norm"] = m.norm_params(kvl)
    parts["kv_up"] = kvl * heads * (required(m.qk_nope_head_dim, "qk_nope_head_dim") + v)
    parts["out"] = heads * v * h
    return parts


def _check_layer_index(m: ModelSpec, i: int) -> None:
    if not 0 <= i < m.num_layers:
        raise WorkloadError(f"layer_index = {i}: must be in 0..{m.num_layers - 1} for {m.name}")


def _kind(hint: object) -> object:
    """The base type of a field hint: int, float, bool, str or a Literal (Optional stripped)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return _kind(args[0])
    return hint


@functools.cache
def field_kinds() -> tuple[tuple[str, object, object], ...]:
    """(name, base type, default) of every ModelSpec field, read once from the annotations."""
    hints = typing.get_type_hints(ModelSpec)
    return tuple((f.name, _kind(hints[f.name]), f.default) for f in fields(ModelSpec))


# the checks __post_init__ runs (workloads/model_checks.py imports this module's names; imported last)
from clustersim.workloads import model_checks  # noqa: E402
