"""Draft-model decoding on the static path: a round as one fixed-shape function over both models' static caches
(``bpd.decoding.engine`` runs and compiles it), the eager round's (``bpd.decoding.methods.draft``) steps:

* **propose**: slot 0 is p_1's argmax at the last accepted position; slots 1..k-1 are the draft's k - 1 greedy
  steps on its own cache (the first reads the two tokens it has not read yet: the last accepted one and slot 0);
* **verify / accept**: the chain's (``static_steps.chain_round``): one base call over the k tokens, the criterion's
  leading run, at least the minimum block size;
* **update**: both caches keep what was accepted (the draft's all but the last accepted token, which it reads
  next round with the new slot 0), and p_1's argmax at the last accepted position is the next slot 0.

The draft is a submodule of the round (``DraftRound``), so a compiled round holds its weights as it holds the base
model's, and the engine keys the round by the draft's weights too.
"""

from __future__ import annotations

import torch
from torch import nn

from bpd.decoding.criteria import Criterion
from bpd.decoding.result import DecodeResult
from bpd.models.fastpath import top1
from bpd.models.static_cache import decode_static
from bpd.models.transformer import EncoderState


class DraftRound(nn.Module):
    """One round from slot 0 ``first`` (B, 1) and the draft's unread tokens ``feed`` (B, 2): propose, verify,
    accept, update. Returns the block sizes (B,; 0 for finished rows), the accepted runs after slot 0 (B,), the
    block (B, k), and the next round's ``first`` and ``feed``."""

    def __init__(self, model, draft, k: int, criterion: Criterion, floor: int) -> None:
        super().__init__()
        self.model, self.draft = model, draft
        self.k, self.criterion, self.floor = k, criterion, floor

    def forward(self, carry, alive, lengths, k_cache, v_cache, encoded, source, span):
        first, feed, drafting = carry  # (what the last round ended at, and the draft's buffers)
        props, read = self.propose(first, feed, alive, drafting)
        h = decode_static(self.model, props, EncoderState(*encoded), k_cache, v_cache, lengths, span.shape[0])
        khat, runs, best = self.accept(props, h, alive)
        lengths.add_(khat)
        d_lengths = drafting[0]
        d_lengths.sub_((read - khat) * alive.long())  # the draft keeps its entries of the accepted tokens but the last
        last = (khat - 1).clamp(min=0)[:, None]
        nxt = best.gather(1, last)
        return khat, runs, props, nxt, torch.cat([props.gather(1, last), nxt], dim=1)

    def propose(self, first, feed, alive, drafting) -> tuple[torch.Tensor, int]:
        """The block (B, k) and how many entries the draft wrote per row (its lengths moved by them)."""
        d_lengths, d_k, d_v, d_encoded, d_span = drafting
        enc, step, tok, out = EncoderState(*d_encoded), alive.long(), feed, [first]
        for _ in range(self.k - 1):  # (the last token chosen is not read)
            h = decode_static(self.draft, tok, enc, d_k, d_v, d_lengths, d_span.shape[0])[:, -1]
            d_lengths.add_(step * tok.shape[1])
            tok = top1(self.draft.heads.base_logits(h))[:, None]
            out.append(tok)
        return torch.cat(out, dim=1), feed.shape[1] + self.k - 2

    def accept(self, props, h, alive) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Block sizes, accepted runs after slot 0 and p_1's argmax after each proposal (the chain's rule)."""
        logits = self.model.heads.base_logits(h)
        best = top1(logits)
        flags = self.criterion.accept(logits[:, :-1], props[:, 1:], best[:, :-1])
        runs = flags.long().cumprod(dim=1).sum(dim=1)
        return (runs + 1).clamp(min=self.floor) * alive.long(), runs, best


def draft_engine_for(draft, engine: str):
    """The engine that holds the draft's buffers (cache, encoder state) on the static path: kept on the draft until its
    weights change, as ``engine_for`` keeps a model's, but apart from it: the base model's engine compiles the
    round (the draft's weights inside), so the draft's own engine compiles nothing (on a GPU it resets no compiled
    graphs), and a model drafting for itself gets buffers of its own, not the base's."""
    from bpd.decoding.compiling import weights_fingerprint
    from bpd.decoding.engine import StaticEngine, checked_engine

    engines = draft.__dict__.setdefault("_draft_engines", {})
    e = engines.get(checked_engine(engine))
    if e is None or e.fingerprint != weights_fingerprint(draft):
        e = engines[engine] = StaticEngine(draft, compiled=engine == "compiled")
    return e


def draft_start(model):
    """The first call: BOS through the base decoder; p_1's argmax there (B, 1)."""

    def start(bos, alive, lengths, k_cache, v_cache, encoded, source, span):
        h = decode_static(model, bos, EncoderState(*encoded), k_cache, v_cache, lengths, span.shape[0])[:, 0]
        lengths.add_(alive.long())
        return top1(model.heads.base_logits(h))[:, None]

    return start


def draft_decode_static(engine, draft_engine, src: torch.Tensor, k: int, criterion: Criterion, floor: int,
                        max_len: int | None = None) -> DecodeResult:
    """Draft-model decoding on the static path (``engine`` the base model's ``StaticEngine``, ``draft_engine`` the
    draft's, whose cache and encoder state it lends): the start call, then one fixed-shape round per iteration."""
    from bpd.decoding import step_store
    from bpd.decoding.engine import take_blocks

    model, draft = engine.model, draft_engine.model
    b = engine.begin(src, max_len)
    d = draft_engine.begin(src, max_len, room=k + 2)
    reached, accepted = [0] * (k - 1), [0] * (k - 1)
    if b.max_len <= 0:
        return b.rows.result(0, position_reached=reached, position_accepted=accepted)
    first = engine.call(("draft_start",), lambda: draft_start(model), engine.bos(b), *engine.batch_args(b, 1))
    b.reach += 1
    feed = torch.cat([engine.bos(b), first], dim=1)
    # the draft's weights determine the round as the base model's do: its digest is part of the round's key
    key = ("draft", k, criterion, floor, step_store.model_digest(draft) if engine.packaged else id(draft))
    calls = 1
    while b.rows.active:
        d_args = draft_engine.batch_args(d, k)
        drafting = (d.cache.lengths, d.cache.k, d.cache.v, d_args[4], d_args[6])
        khat, runs, props, first, feed = engine.call(key, lambda: DraftRound(model, draft, k, criterion, floor),
                                                     (first, feed, drafting), *engine.batch_args(b, k))
        calls += 1
        d.reach += take_blocks(b, props, khat, runs, reached, accepted)
    return b.rows.result(calls, position_reached=reached, position_accepted=accepted)
