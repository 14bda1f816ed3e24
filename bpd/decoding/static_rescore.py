"""Rescored chains on the static path: the chain's round (``static_steps.chain_round``) with its block chosen from
the heads' lattice by the n-gram model (``bpd.decoding.methods.rescore``), as one fixed-shape function:

* **verify / accept / update**: the chain's: one decoder call over the k proposals against the static cache, the
  criterion's leading run (at least the minimum block size), the lengths advanced by the accepted blocks;
* **propose**: at each row's last accepted position, the budgeted lattice (``static_tree.propose``: ``beam`` nodes
  a level, k - 1 deep) and its best full-depth path under log p_heads + weight * log p_ngram given the last
  accepted token (``rescore.rescored_block``, the eager rescorer's own rule).

The round is a module holding the n-gram model's tables as buffers (and the decoding tables as a submodule), so a
compiled round holds them as it holds the model's weights; the engine keys it by their digest.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from bpd.decoding.criteria import Criterion
from bpd.decoding.loop import block_floor, checked_criterion
from bpd.decoding.methods.rescore import NgramLM, rescored_block
from bpd.decoding.result import DecodeResult
from bpd.decoding.static_steps import decoding_tables
from bpd.decoding.static_tree import propose as propose_tree
from bpd.decoding.tree_shape import TreeShape
from bpd.models.fastpath import top1
from bpd.models.heads.source import Source
from bpd.models.static_cache import decode_static
from bpd.models.transformer import EncoderState


class RescoredRound(nn.Module):
    """The start call (``start``: BOS through the decoder, the first block proposed there, after BOS) or one round
    (verify ``props`` (B, k), accept, update, propose the next block). A round returns the block sizes (B,; 0 for
    finished rows), the accepted runs after slot 0 (B,) and the next block; the start call the first block."""

    def __init__(self, model, lm: NgramLM, beam: int, weight: float, k: int, criterion: Criterion, floor: int,
                 start: bool = False) -> None:
        super().__init__()
        self.model, self.tables = model, decoding_tables(model)
        self.vocab, self.weight, self.k, self.criterion, self.floor, self.start = \
            lm.vocab, weight, k, criterion, floor, start
        self.shape = TreeShape.budget(beam, k - 1)
        for name in ("keys", "pair_logp", "backoff", "unigram"):
            self.register_buffer(name, getattr(lm, name).clone(), persistent=False)

    def forward(self, props, alive, lengths, k_cache, v_cache, encoded, source, span):
        enc, window = EncoderState(*encoded), span.shape[0]
        h = decode_static(self.model, props, enc, k_cache, v_cache, lengths, window)
        if self.start:  # ``props`` is BOS
            lengths.add_(alive.long())
            h = h[:, 0]
            return self.propose(h, top1(self.model.heads.base_logits(h))[:, None], props, enc, lengths, source)
        logits = self.model.heads.base_logits(h)
        best = top1(logits)
        flags = self.criterion.accept(logits[:, :-1], props[:, 1:], best[:, :-1])
        runs = flags.long().cumprod(dim=1).sum(dim=1)
        khat = (runs + 1).clamp(min=self.floor) * alive.long()
        lengths.add_(khat)
        last = (khat - 1).clamp(min=0)[:, None]
        h_last = h.gather(1, last[:, :, None].expand(-1, 1, h.shape[-1]))[:, 0]
        return khat, runs, self.propose(h_last, best.gather(1, last), props.gather(1, last), enc, lengths, source)

    def propose(self, h, first, prev, enc: EncoderState, lengths, source) -> torch.Tensor:
        """The block (B, k) at states ``h`` (B, d): p_1's argmax ``first`` (B, 1), then the lattice's best path after
        ``prev`` (B, 1), the last accepted token."""
        src = Source.joined(None if source is None else Source(*source), self.model.head_ahead(enc, lengths - 1))
        tree = propose_tree(self.model, self.shape, h, first, src, self.tables)
        lm = NgramLM(self.vocab, self.keys, self.pair_logp, self.backoff, self.unigram)
        return rescored_block(lm, self.weight, tree, first, prev, self.k)


def lm_digest(lm: NgramLM) -> str:
    """The n-gram model's tables as a digest (kept on it: a model of WMT's targets holds millions of pairs)."""
    digest = getattr(lm, "_digest", None)
    if digest is None:
        h = hashlib.sha256(str(lm.vocab).encode())
        for t in (lm.keys, lm.pair_logp, lm.backoff, lm.unigram):
            h.update(t.detach().contiguous().cpu().numpy().tobytes())
        digest = lm._digest = h.hexdigest()
    return digest


@torch.inference_mode()
def rescored_decode_static(engine, src: torch.Tensor, k: int, criterion: Criterion | None, lm: NgramLM, beam: int,
                           weight: float, max_len: int | None = None) -> DecodeResult:
    """The rescored chain on the static path (``engine``: a ``StaticEngine``): the start call, then one fixed-shape
    round per iteration, kept as the chain's are."""
    from bpd.decoding.engine import take_blocks

    if not 1 <= k <= engine.model.k:
        raise ValueError(f"decode-time k must be between 1 and the model's trained k={engine.model.k} (got {k}).")
    criterion = checked_criterion(criterion)
    floor = block_floor(criterion, k)
    if k == 1:  # a block of one: the chain's
        return engine.blockwise(src, k, criterion, floor, max_len)
    model = engine.model
    b = engine.begin(src, max_len)
    reached, accepted = [0] * (k - 1), [0] * (k - 1)
    if b.max_len <= 0:
        return b.rows.result(0, position_reached=reached, position_accepted=accepted)
    key = ("rescored", k, criterion, floor, beam, weight, lm_digest(lm) if engine.packaged else id(lm))

    def make(start: bool = False) -> RescoredRound:
        return RescoredRound(model, lm, beam, weight, k, criterion, floor, start)

    props = engine.call((*key, "start"), lambda: make(start=True), engine.bos(b), *engine.batch_args(b, 1))
    b.reach += 1
    calls = 1
    while b.rows.active:
        khat, runs, nxt = engine.call(key, make, props, *engine.batch_args(b, k))
        calls += 1
        take_blocks(b, props, khat, runs, reached, accepted)
        props = nxt
    return b.rows.result(calls, position_reached=reached, position_accepted=accepted)
