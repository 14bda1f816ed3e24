"""What proposal slots that attend to the input read of it (``heads.arch=attend``).

The keys and values are the base model's own: its last decoder layer's cross-attention keys and values of
the encoder output, already computed once per input for decoding (``EncoderState.cross_kv``). A slot only
adds its query projection, so reading the source costs one (d, d) product and one attention over the
source per slot and position, and no memory beyond what the decoder already holds.

Positions come batch-first: ``(B, L, d)``, or flattened ``(B * L, d)`` row-major (a loss's positions), and
a loss that computes a slot at a subset of those positions passes their flat indices (``rows``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bpd.models.attention import attention

#: What a call that reads the source without one is told.
MISSING = ("heads.arch=attend reads the source: pass source=model.head_source(enc) (the encoder state of the "
           "input being decoded).")


@dataclass
class Source:
    """The keys and values slots attend to, and which source positions are real."""

    k: torch.Tensor  # (B, H, S, dh)
    v: torch.Tensor  # (B, H, S, dh)
    mask: torch.Tensor | None  # (B, 1, 1, S) bool, True = attend; None: no row has padding
    per_row: int = 1  # positions per batch row when they come flattened with ``rows``

    def per_position(self, length: int) -> Source:
        """The same source for positions laid out ``length`` per batch row (a loss's (B * T, d) states)."""
        return Source(self.k, self.v, self.mask, length)

    def read(self, q: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Attention of the queries ``q`` (..., d) over the source: (..., d). Without ``rows``, ``q``'s leading
        dimensions flatten to (B, L) batch-first; with them, ``q`` (n, d) holds the flat positions ``rows`` of
        the (B * per_row) grid."""
        b, n_heads, _, dh = self.k.shape
        if rows is not None:
            # Scatter into the full grid so the attention stays one batched call (no per-position copy of
            # the keys); the grid's other positions cost a little attention and are dropped.
            full = q.new_zeros(b * self.per_row, q.shape[-1]).index_copy(0, rows, q)
            return self.read(full)[rows]
        x = q.reshape(b, -1, n_heads, dh).transpose(1, 2)  # (B, H, L, dh)
        y = attention(x, self.k.to(x.dtype), self.v.to(x.dtype), self.mask)
        return y.transpose(1, 2).reshape(q.shape)
