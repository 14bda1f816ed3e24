"""Encoder-decoder Transformer with k proposal heads, whose decoder reads and extends a per-row key/value cache
(``bpd.models.kv_cache``).

Pre-norm (as tensor2tensor's ``transformer_base`` v2), sinusoidal or learned positions, optional
shared source/target embeddings tied to the output projection. The decoder can consume ``n >= 1``
new tokens per call against its cache (the verify pass of blockwise decoding) and each batch row
keeps its own cache length, so rows that accepted different block sizes can be truncated back
independently: entries past a row's length are masked out and later overwritten.

Teacher-forced call: ``model(src, tgt_in) -> (B, T, k, V)``; ``[..., t, i, :]`` predicts the token at
``t + 1 + i`` (i = 0 is the base model p_1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property, partial

import torch
import torch.nn.functional as F
from torch import nn

from bpd.config import HeadsConfig, ModelConfig
from bpd.models.attention import attention
from bpd.models.heads import Ahead, Source, build_heads
from bpd.models.kv_cache import KVCache


@dataclass
class TransformerConfig(ModelConfig):
    """Everything that rebuilds a model (stored in every checkpoint): its sizes (``ModelConfig``, whose
    defaults these are), vocabulary, heads and special ids."""

    vocab_size: int = 0
    max_positions: int | None = 1024
    k: int = 1
    heads_arch: str = HeadsConfig.arch
    heads_d_ff: int | None = None  # per-slot hidden size of the heads (paper: d_ff)
    identity_p1: bool = HeadsConfig.identity_p1
    heads_tied: bool = HeadsConfig.tie_slots  # one set of weights for every proposal slot
    heads_ahead: bool = HeadsConfig.ahead  # slots also read what the input says of the position they guess
    n_output: int | None = None  # output classes when smaller than the input vocabulary (images: 256)
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    extra: dict = field(default_factory=dict)  # free-form metadata kept in checkpoints


def sinusoidal_table(n: int, d: int) -> torch.Tensor:
    pos = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv[: d // 2])
    return table.float()


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose CPU mask is drawn as ``rand_like(x) >= p``: ``F.dropout``'s Bernoulli draw is
    1.6x slower on a CPU, and dropout took a fifth of a heads training step of the demo
    (``bench/train_step.py --compare dropout``). Same distribution, another random stream. On a GPU
    ``F.dropout`` (fused) is used."""

    #: The benchmark switches this off to time ``F.dropout`` on the same model.
    rand_mask_on_cpu = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or not self.rand_mask_on_cpu:
            return super().forward(x)
        return x * ((torch.rand_like(x) >= self.p) * (1.0 / (1.0 - self.p))).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        assert d % n_heads == 0, "d_model must be divisible by n_heads"
        self.h, self.dh = n_heads, d // n_heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.o = nn.Linear(d, d)
        self.dropout = dropout
        #: Calls of several queries keep the fused kernel on the compiled CPU path (``bpd.models.attention``): set
        #: by models whose caches grow to thousands of entries.
        self.fused_for_many = False

    def split(self, x: torch.Tensor) -> torch.Tensor:  # (B,T,d) -> (B,H,T,dh)
        return x.unflatten(-1, (self.h, self.dh)).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv(x).chunk(2, dim=-1)
        return self.split(k), self.split(v)

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        q = self.split(self.q(x))
        y = attention(q, k, v, mask, self.dropout if self.training else 0.0, self.fused_for_many)
        return self.o(y.transpose(1, 2).flatten(-2))


class FeedForward(nn.Module):
    def __init__(self, d: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.fc1, self.fc2, self.drop = nn.Linear(d, d_ff), nn.Linear(d_ff, d), Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.attn, self.ff = Attention(c.d_model, c.n_heads, c.dropout), FeedForward(c.d_model, c.d_ff, c.dropout)
        self.drop = Dropout(c.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        k, v = self.attn.project_kv(h)
        x = x + self.drop(self.attn.attend(h, k, v, mask))
        return x + self.drop(self.ff(self.ln2(x)))


#: ``store(k, v) -> (k_all, v_all)``: what a decoder layer hands its new self-attention keys and values to.
StoreKV = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class DecoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.ln1, self.ln2, self.ln3 = (nn.LayerNorm(c.d_model) for _ in range(3))
        self.self_attn = Attention(c.d_model, c.n_heads, c.dropout)
        self.cross_attn = Attention(c.d_model, c.n_heads, c.dropout)
        self.ff = FeedForward(c.d_model, c.d_ff, c.dropout)
        self.drop = Dropout(c.dropout)

    def forward(self, x: torch.Tensor, cross_kv: tuple[torch.Tensor, torch.Tensor], src_mask: torch.Tensor,
                self_mask: torch.Tensor, store: StoreKV | None = None) -> torch.Tensor:
        """The layer over the new positions ``x`` (B, n, d): masked self-attention, attention to the source's
        keys and values ``cross_kv`` (projected once per input), feed-forward. ``store`` puts the new positions'
        self-attention keys and values into a cache and returns all those they attend to (the cached prefix
        and the new ones); without it they attend to each other alone (a whole teacher-forced prefix)."""
        h = self.ln1(x)
        k, v = self.self_attn.project_kv(h)
        if store is not None:
            k, v = store(k, v)
        x = x + self.drop(self.self_attn.attend(h, k, v, self_mask))
        x = x + self.drop(self.cross_attn.attend(self.ln2(x), *cross_kv, src_mask))
        return x + self.drop(self.ff(self.ln3(x)))


@dataclass
class EncoderState:
    """Everything the decoder needs from the source, computed once per input."""

    src_mask: torch.Tensor  # (B,1,1,S) bool, True = attend
    cross_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per decoder layer, projected once
    # (B,T) image models with aligned_input: the upsampled source intensity under each output token
    aligned: torch.Tensor | None = None

    @cached_property
    def padded(self) -> bool:
        """Whether any row has source padding (worked out once per state: a host synchronisation)."""
        return not bool(self.src_mask.all())

    def select(self, rows: torch.Tensor) -> EncoderState:
        return EncoderState(
            self.src_mask.index_select(0, rows),
            [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.cross_kv],
            None if self.aligned is None else self.aligned.index_select(0, rows),
        )


class Transformer(nn.Module):
    #: The static decode path may pad sources to a bucket length (padding is masked).
    source_buckets = True
    #: Token ids that are ordered values, as (first id, count) (none for words): what ``train.ordinal_sigma``
    #: spreads training targets over.
    ordinal_values: tuple[int, int] | None = None

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.vocab_size < 1 or cfg.k < 1:
            raise ValueError(f"a model needs vocab_size >= 1 and k >= 1 (got {cfg.vocab_size} and {cfg.k}).")
        self.cfg = cfg
        c = cfg
        self.pad_id, self.bos_id, self.eos_id = c.pad_id, c.bos_id, c.eos_id
        self.tgt_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.src_embed = self.tgt_embed if c.share_embeddings else nn.Embedding(c.vocab_size, c.d_model)
        nn.init.normal_(self.tgt_embed.weight, std=c.d_model**-0.5)
        if not c.share_embeddings:
            nn.init.normal_(self.src_embed.weight, std=c.d_model**-0.5)
        if c.positions == "learned":
            self.pos = nn.Embedding(c.max_positions, c.d_model)
        elif c.positions == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(c.max_positions, c.d_model), persistent=False)
        else:
            raise ValueError(f"unknown positions {c.positions!r}; use 'sinusoidal' or 'learned'.")
        self.enc_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_enc_layers))
        self.dec_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_dec_layers))
        self.enc_ln, self.dec_ln = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.drop = Dropout(c.dropout)
        self.output = nn.Linear(c.d_model, c.n_output or c.vocab_size, bias=False)
        if c.share_embeddings and (c.n_output or c.vocab_size) == c.vocab_size:
            self.output.weight = self.tgt_embed.weight
        self.heads = build_heads(c.heads_arch, c.d_model, c.heads_d_ff or c.d_ff, c.k, self.output, c.identity_p1,
                                 c.heads_tied, c.heads_ahead)
        if c.heads_ahead and not c.aligned_input:
            raise ValueError("heads.ahead=true reads the upsampled guess under each output position of an image model: "
                             "set model.aligned_input=true (super-resolution), or heads.ahead=false.")
        if self.heads.reads_source and not c.n_dec_layers:
            raise ValueError(f"heads.arch={c.heads_arch} reads the last decoder layer's cross-attention keys; the "
                             "model needs n_dec_layers >= 1.")

    # -- properties used by decoding ---------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.heads.k

    @property
    def n_dec_layers(self) -> int:
        return len(self.dec_layers)

    def head_source(self, enc: EncoderState, at: torch.Tensor | None = None) -> Source | None:
        """What proposal slots read of the input: the last decoder layer's cross-attention keys and values of it
        (slots that attend to it, ``heads.arch=attend``) and what it says of the positions they guess
        (``heads.ahead``: ``head_ahead``; ``at``: each row's one state's position, when decoding); None for heads
        that read neither."""
        ahead = self.head_ahead(enc, at)
        if not self.heads.reads_source:
            return Source.joined(None, ahead)
        k, v = enc.cross_kv[-1]
        # Decoding without padding needs no mask: one query's attention then costs about half as much on a
        # CPU. Training keeps the mask rather than synchronise with the host every batch to ask.
        unmasked = torch.is_inference_mode_enabled() and not enc.padded
        return Source(k, v, None if unmasked else enc.src_mask, ahead=ahead)

    def head_ahead(self, enc: EncoderState, at: torch.Tensor | None = None) -> Ahead | None:
        """What slots that read ahead (``heads.ahead``) read of this input (``bpd.models.heads.source.Ahead``); None
        for heads that do not. A translation model knows nothing of its output positions before decoding: only
        image models with an aligned input define it."""
        return None

    def base_parameters(self) -> list[nn.Parameter]:
        head_ids = {id(p) for p in self.heads.parameters()}
        return [p for p in self.parameters() if id(p) not in head_ids]

    # -- embeddings -------------------------------------------------------------------------------
    def _positions(self, pos: torch.Tensor, upper: int) -> torch.Tensor:
        """Position vectors; ``upper`` is a host-side bound on ``pos`` (avoids a device sync). Sinusoidal
        positions have no maximum: the table grows to any length asked for (a long test line is decoded
        whole); learned positions stop at ``max_positions``."""
        if self.cfg.positions == "learned":
            if upper > self.cfg.max_positions:
                raise ValueError(
                    f"sequence length {upper} exceeds max_positions={self.cfg.max_positions} of the learned "
                    "positions; lower max_len or build the model with a larger max_positions."
                )
            return self.pos(pos)
        self.cover_positions(upper)
        return self.pos_table[pos]

    def cover_positions(self, upper: int) -> None:
        """Grow the sinusoidal table to cover positions below ``upper`` (learned positions: nothing to do). The
        static decode path calls it before a shape's first step: a step traced while the table is shorter than its
        cache would rebuild the whole table at every call."""
        if self.cfg.positions != "learned" and upper > self.pos_table.shape[0]:
            self.pos_table = sinusoidal_table(2 * upper, self.cfg.d_model).to(self.pos_table)

    def embed_src(self, src: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(src.shape[1], device=src.device).expand_as(src)
        x = self.src_embed(src) * math.sqrt(self.cfg.d_model)
        return self.drop(x + self._positions(pos, src.shape[1]).to(x.dtype))

    def embed_tgt(self, tgt: torch.Tensor, pos: torch.Tensor, upper: int, enc: EncoderState | None = None
                  ) -> torch.Tensor:
        x = self.tgt_embed(tgt) * math.sqrt(self.cfg.d_model)
        return self.drop(x + self._positions(pos, upper).to(x.dtype))

    # -- encoder ----------------------------------------------------------------------------------
    def encode(self, src: torch.Tensor) -> EncoderState:
        """Run the encoder once and project its output into every decoder layer's cross K/V."""
        src_mask = (src != self.pad_id)[:, None, None, :]
        x = self.embed_src(src)
        for layer in self.enc_layers:
            x = layer(x, src_mask)
        mem = self.enc_ln(x)
        return EncoderState(src_mask, [layer.cross_attn.project_kv(mem) for layer in self.dec_layers])

    # -- decoder ----------------------------------------------------------------------------------
    def new_cache(self, batch: int, capacity: int, device=None, dtype=None) -> KVCache:
        p = self.tgt_embed.weight
        a = self.dec_layers[0].self_attn if self.n_dec_layers else None
        n_heads, dh = (a.h, a.dh) if a else (1, 1)
        return KVCache(self.n_dec_layers, batch, n_heads, capacity, dh, dtype or p.dtype, device or p.device)

    def decode(self, tgt: torch.Tensor, enc: EncoderState, cache: KVCache | None = None,
               tree: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Decoder hidden states (after the final norm) for ``tgt`` (B, n).

        Without a cache, ``tgt`` is a whole teacher-forced prefix with causal attention. With a cache,
        the n tokens are appended at each row's own length, attend to the row's cached prefix and
        causally to each other, and the cache lengths advance by n.

        ``tree = (depth, ancestors)`` (with a cache) decodes the n tokens as a tree of candidate
        continuations instead of a chain (``bpd.decoding.methods.tree``): token i sits at position length +
        ``depth[b, i]`` and attends to the cached prefix and to the tokens j with ``ancestors[b, i, j]``
        (its ancestors and itself). Its cache entry is written at slot length + i; the caller moves the
        accepted path's entries into place (``KVCache.keep_path``).
        """
        b, n = tgt.shape
        dev = tgt.device
        if cache is None:
            if tree is not None:
                raise ValueError("tree decoding needs a KV cache.")
            t_total = n
            pos = torch.arange(n, device=dev).expand(b, n)
            self_mask = torch.ones(n, n, dtype=torch.bool, device=dev).tril()[None, None]
        else:
            t_total, slots, pos, self_mask = self._cached_layout(cache, b, n, dev, tree)
            at = (torch.arange(b, device=dev)[:, None].expand(b, n), slots)
        x = self.embed_tgt(tgt, pos, t_total, enc)
        for li, layer in enumerate(self.dec_layers):
            store = None if cache is None else partial(cache.write, li, at, t_total)
            x = layer(x, enc.cross_kv[li], enc.src_mask, self_mask, store)
        if cache is not None:
            cache.advance(n)
        return self.dec_ln(x)

    @staticmethod
    def _cached_layout(
        cache: KVCache, b: int, n: int, dev: torch.device, tree: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Where a cached call's n new tokens go: the keys they see (``t_total``, a host-side bound), their cache
        slots and positions (B, n), and their self-attention mask (B, 1, n, t_total)."""
        t_total = cache.host_max + n
        if t_total > cache.capacity:
            raise RuntimeError("KV cache capacity exceeded; allocate it with max_len + k + 1 entries.")
        slots = cache.lengths[:, None] + torch.arange(n, device=dev)  # (B, n) where the entries are written
        keys = torch.arange(t_total, device=dev)
        if tree is None:
            pos = slots  # a chain: slot = absolute position
            return t_total, slots, pos, (keys[None, None, :] <= pos[:, :, None])[:, None]  # (B,1,n,T)
        depth, anc = tree
        pos = cache.lengths[:, None] + depth
        if len(set(cache.host_lengths)) == 1:  # every row at one length (batch 1): prefix, then the tree
            return t_total, slots, pos, torch.cat([anc.new_ones(b, n, cache.host_max), anc], dim=2)[:, None]
        prefix = keys[None, None, :] < cache.lengths[:, None, None]  # (B,1,T)
        rel = keys[None, :] - cache.lengths[:, None]  # (B,T): tree slot of each key, if in the tree
        in_tree = (rel >= 0) & (rel < n)
        tree_keys = anc.gather(2, rel.clamp(0, n - 1)[:, None, :].expand(b, n, t_total))  # (B,n,T)
        return t_total, slots, pos, (prefix | (tree_keys & in_tree[:, None, :]))[:, None]

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, hidden_only: bool = False) -> torch.Tensor:
        """Teacher-forced logits of all k heads: (B, T, k, V) (or the decoder states with ``hidden_only``).
        Recurrent heads chain their own argmax here, as when decoding; training feeds them the target
        tokens instead (``bpd.training.losses.head_losses``)."""
        h, source = self.teacher_forced(src, tgt_in)
        return h if hidden_only else self.heads(h, source=source)

    def teacher_forced(self, src: torch.Tensor, tgt_in: torch.Tensor) -> tuple[torch.Tensor, Source | None]:
        """Decoder states (B, T, d) of the whole prefix ``tgt_in``, and what heads that attend to the input read
        of ``src`` (``head_source``): what the losses and the dev evaluation score the heads on."""
        enc = self.encode(src)
        return self.decode(tgt_in, enc), self.head_source(enc)

    # -- checkpoints ------------------------------------------------------------------------------
    def config_dict(self) -> dict:
        return asdict(self.cfg)


def model_sizes(model: ModelConfig) -> dict:
    """The ``TransformerConfig`` fields a ``ModelConfig`` sets (max_positions only when it is set)."""
    sizes = {f.name: getattr(model, f.name) for f in fields(ModelConfig)}
    if model.max_positions is None:
        del sizes["max_positions"]
    return sizes


def build_translation_model(
    vocab_size: int, k: int, model: ModelConfig | None = None, seed: int = 0, **options
) -> Transformer:
    """An encoder-decoder Transformer of ``model``'s sizes (default ``ModelConfig()``, the tiny CPU model) with
    ``k`` proposal heads. ``options`` are other ``TransformerConfig`` fields (heads_arch, identity_p1,
    heads_d_ff, pad/bos/eos ids, or a size to override)."""
    if k < 1:
        raise ValueError(f"k must be >= 1 (got {k}).")
    params = {**model_sizes(model or ModelConfig()), **options, "vocab_size": vocab_size, "k": k}
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**params))
