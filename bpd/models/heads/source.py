"""What proposal slots read of the input: its keys and values (slots that attend to it, ``heads.arch=attend``), and
what is known before decoding about each position a slot guesses (``heads.ahead``, ``Ahead``).

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
import torch.nn.functional as F

from bpd.models.attention import attention

#: What a call that reads the source without one is told.
MISSING = ("heads.arch=attend reads the source: pass source=model.head_source(enc) (the encoder state of the "
           "input being decoded).")
MISSING_AHEAD = ("heads.ahead=true reads what the input says about the positions the slots guess: pass "
                 "source=model.head_source(enc, at) (the encoder state, and when decoding each row's position).")


@dataclass
class Ahead:
    """What slots that read ahead (``heads.ahead``) read: for every output position, a token known from the input
    before decoding starts (an image model's upsampled guess of the intensity there, ``EncoderState.aligned``),
    embedded by the model's own table. Slot i at the state of position p reads the entry of position p + i, the
    one it guesses.

    A decoder state at position p predicts the token at p (its input is the token before), so a state and its
    p_1 share an entry and slot i's is i entries on."""

    ids: torch.Tensor  # (B, T) long: the known token under each output position
    table: torch.Tensor  # (V, d): their embeddings (the model's)
    scale: float  # what the model multiplies them by
    at: torch.Tensor | None = None  # (B,): the position of each row's one state (decoding); None: every position

    def vectors(self, lead: torch.Size, lo: int, hi: int, rows: torch.Tensor | None = None,
                per_row: int = 1) -> torch.Tensor:
        """Embeddings (*lead, hi - lo, d) of entries lo..hi-1 positions past each state's. ``lead``: the states'
        leading shape: (B,) one per row at ``at``; (B, L) every position; (N,) flattened ``per_row`` to a batch
        row (a loss), at the flat positions ``rows`` (None: all N)."""
        ids, offsets = self.ids, torch.arange(lo, hi, device=self.ids.device)
        last = ids.shape[1] - 1  # verify passes and a loss's far slots run past the end: those guesses are unused
        if self.at is not None:
            tok = ids.gather(1, (self.at[:, None] + offsets).clamp(0, last))
        elif rows is None and len(lead) == 2:
            pos = torch.arange(lead[1], device=ids.device)[:, None] + offsets
            tok = ids[:, pos.clamp(max=last)]
        elif rows is None and per_row == 1:  # one state per row, at no position said
            raise ValueError(MISSING_AHEAD)
        else:
            rows = torch.arange(lead[0], device=ids.device) if rows is None else rows
            tok = ids[(rows // per_row)[:, None], ((rows % per_row)[:, None] + offsets).clamp(max=last)]
        return F.embedding(tok, self.table) * self.scale


@dataclass
class Source:
    """The keys and values slots attend to, and which source positions are real."""

    k: torch.Tensor | None  # (B, H, S, dh); None: the slots do not attend to the input
    v: torch.Tensor | None  # (B, H, S, dh)
    mask: torch.Tensor | None  # (B, 1, 1, S) bool, True = attend; None: no row has padding
    per_row: int = 1  # positions per batch row when they come flattened with ``rows``
    ahead: Ahead | None = None  # what slots that read ahead read (``heads.ahead``)

    def per_position(self, length: int) -> Source:
        """The same source for positions laid out ``length`` per batch row (a loss's (B * T, d) states)."""
        return Source(self.k, self.v, self.mask, length, self.ahead)

    @staticmethod
    def joined(source: Source | None, ahead: Ahead | None) -> Source | None:
        """``source`` (what attend slots read; None: nothing) with ``ahead`` added: None when there is neither."""
        if ahead is None:
            return source
        if source is None:
            return Source(None, None, None, ahead=ahead)
        return Source(source.k, source.v, source.mask, source.per_row, ahead)  # a plain call: compiled steps trace it

    def ahead_vectors(self, lead: torch.Size, lo: int, hi: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        """``Ahead.vectors`` of this source's ``ahead`` (positions laid out as ``per_row`` says)."""
        if self.ahead is None:
            raise ValueError(MISSING_AHEAD)
        return self.ahead.vectors(lead, lo, hi, rows, self.per_row)

    def read(self, q: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Attention of the queries ``q`` (..., d) over the source: (..., d). Without ``rows``, ``q``'s leading
        dimensions flatten to (B, L) batch-first; with them, ``q`` (n, d) holds the flat positions ``rows`` of
        the (B * per_row) grid."""
        if self.k is None:
            raise ValueError(MISSING)
        b, n_heads, _, dh = self.k.shape
        if rows is not None:
            # Scatter into the full grid so the attention stays one batched call (no per-position copy of
            # the keys); the grid's other positions cost a little attention and are dropped.
            full = q.new_zeros(b * self.per_row, q.shape[-1]).index_copy(0, rows, q)
            return self.read(full)[rows]
        x = q.reshape(b, -1, n_heads, dh).transpose(1, 2)  # (B, H, L, dh)
        y = attention(x, self.k.to(x.dtype), self.v.to(x.dtype), self.mask)
        return y.transpose(1, 2).reshape(q.shape)
