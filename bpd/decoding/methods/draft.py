"""Draft-model speculative decoding: a small separate model guesses the block, the base model verifies it.

Classic speculative decoding (Leviathan et al. 2023, Chen et al. 2023) with greedy acceptance, written as
the chain decoder's rounds so that the two differ only in where the guesses come from:

* **propose**: slot 0 is p_1's argmax (known from the previous verify pass, as in the chain); slots
  1..k-1 are the draft model's own greedy continuation, k - 1 small autoregressive steps on its own KV
  cache;
* **verify / accept / update**: the chain's (``bpd.decoding.methods.blockwise.run_round``): one base call over the
  k tokens, the criterion's leading run, the base cache rolled back.

The draft keeps its own cache in step with the accepted output: every round it keeps the entries of all
accepted tokens but the last and then reads two tokens (the last accepted one and the new slot 0), so that
every row of a batch feeds the same number of tokens whatever it accepted. With exact acceptance the
output is greedy's, whatever the draft proposes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bpd.decoding.common import top1
from bpd.decoding.criteria import Criterion
from bpd.decoding.engine import checked_engine, engine_for
from bpd.decoding.loop import Accepted, Batch, Rounds, RowState, block_floor, checked_criterion, decode_rounds
from bpd.decoding.method import NOTHING, Method, Options, Plan, Prepared, Resources, RoundOptions
from bpd.decoding.methods.blockwise import run_round
from bpd.decoding.result import DecodeResult
from bpd.decoding.static_draft import draft_decode_static, draft_engine_for
from bpd.models.checkpoint import load_model
from bpd.models.kv_cache import KVCache


def check_draft(model, draft) -> None:
    """A draft must speak the base model's vocabulary (its token ids are the base's proposals)."""
    same = (draft.cfg.vocab_size, draft.pad_id, draft.bos_id, draft.eos_id) == (
        model.cfg.vocab_size, model.pad_id, model.bos_id, model.eos_id)
    if not same:
        raise ValueError("the draft model's vocabulary (size, pad, BOS, EOS ids) differs from the base model's; "
                         "train the draft on the same task data and tokenizer.")


def draft_chain(draft, feed: torch.Tensor, enc, cache, n: int) -> torch.Tensor:
    """The draft's greedy continuation (B, n): read ``feed`` (B, m), then ``n`` tokens one at a time (the last
    one chosen but not read)."""
    out, tok = [], feed
    for _ in range(n):
        h = draft.decode(tok, enc, cache)[:, -1]
        nxt = top1(draft.heads.base_logits(h))[:, None]
        out.append(nxt)
        tok = nxt
    return torch.cat(out, dim=1)


@dataclass
class DraftState(RowState):
    """The draft's own encoder state and cache, p_1's argmax at the last accepted position (the next block's
    slot 0), and the tokens the draft has not read yet."""

    d_enc: Any
    d_cache: KVCache
    first: torch.Tensor
    feed: torch.Tensor


class DraftRounds(Rounds):
    """Propose with the draft's k - 1 greedy steps, verify with the base as the chain does."""

    def __init__(self, draft, k: int, criterion: Criterion, floor: int) -> None:
        self.draft, self.k, self.criterion, self.floor = draft, k, criterion, floor
        self.slots, self.room, self.start_calls = k - 1, k + 1, 1

    def start(self, model, batch: Batch) -> DraftState:
        d_enc = self.draft.encode(batch.src)
        d_cache = self.draft.new_cache(batch.src.shape[0], batch.max_len + self.k + 2)
        first = top1(model.heads.base_logits(model.decode(batch.bos, batch.enc, batch.cache)[:, 0]))[:, None]
        return DraftState(d_enc, d_cache, first, torch.cat([batch.bos, first], dim=1))

    def round(self, model, batch: Batch, state: DraftState) -> tuple[DraftState, Accepted]:
        k, feed = self.k, state.feed
        props = torch.cat([state.first, draft_chain(self.draft, feed, state.d_enc, state.d_cache, k - 1)], dim=1)
        r = run_round(model, props, batch.enc, batch.cache, self.criterion, k, self.floor)
        # The draft read ``feed`` and props[:, 1:k-1]; keep what was accepted but the last accepted token.
        state.d_cache.rollback(feed.shape[1] + k - 2, [feed.shape[1] - 1 + n - 1 for n in r.khat])
        khat = torch.tensor(r.khat, device=props.device)[:, None] - 1
        feed = torch.cat([props.gather(1, khat), r.first], dim=1)
        blocks = [row[:n] for row, n in zip(r.verdict.proposals, r.khat)]
        return DraftState(state.d_enc, state.d_cache, r.first, feed), (blocks, r.verdict.runs)


@torch.inference_mode()
def draft_decode(
    model,
    draft,
    src: torch.Tensor,
    k: int = 4,
    criterion: Criterion | None = None,
    max_len: int | None = None,
    engine: str = "eager",
) -> DecodeResult:
    """Speculative decoding with a draft model at any batch size; exact criterion == greedy output.

    ``invocations`` counts the base model's decoder calls (as for the chain); the draft's k - 1 small calls
    per round are its cost on top, which the bench's wall clock includes. ``engine``: the eager loop, or the static
    path's fixed-shape rounds over both models' caches (``bpd.decoding.static_draft``: static, compiled).
    """
    k = int(k)
    if k < 2:
        raise ValueError(f"draft-model decoding needs k >= 2 (got {k}): k = 1 is greedy.")
    check_draft(model, draft)
    criterion = checked_criterion(criterion)
    if checked_engine(engine) != "eager":
        return draft_decode_static(engine_for(model, engine), draft_engine_for(draft, engine), src, k, criterion,
                                   block_floor(criterion, k), max_len)
    return decode_rounds(model, src, max_len, DraftRounds(draft, k, criterion, block_floor(criterion, k)))


class Draft(Method):
    name = "draft"

    def decoder_name(self, o: RoundOptions) -> str:
        return f"draft_k{o.k}_{o.criterion_suffix}"

    def sweep(self, plan: Plan, asked: None) -> list[Options]:
        """With a draft model at hand: every criterion x k >= 2 (no minimum block sizes)."""
        if self.name not in plan.models:
            return []
        return [RoundOptions(k, c.name, c.param) for c in plan.criteria for k in plan.round_ks]

    def prepare(self, task, model, resources: Resources):
        """The draft model its stage trained (``resources.models["draft"]``), on the run's device in the base
        model's dtype."""
        path = resources.models.get(self.name)
        if path is None:
            raise ValueError("draft-model decoding needs the trained draft model: set draft.model (e.g. "
                             "draft=tiny) and build it with `python experiments/train.py stage=draft`.")
        dtype = next(model.parameters()).dtype
        return load_model(path, resources.device)[0].to(dtype).eval()

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: RoundOptions, run: Prepared = NOTHING
               ) -> DecodeResult:
        draft = self.built(run, o, "a draft model; set draft.model (e.g. draft=tiny).")
        return draft_decode(model, draft, src, k=o.k, criterion=o.criterion_for(run.criterion_kwargs), max_len=max_len,
                            engine=o.engine)
