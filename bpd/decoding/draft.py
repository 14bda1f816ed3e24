"""Draft-model speculative decoding: a small separate model guesses the block, the base model verifies it.

Classic speculative decoding (Leviathan et al. 2023, Chen et al. 2023) with greedy acceptance, written as
the chain decoder's rounds so that the two differ only in where the guesses come from:

* **propose**: slot 0 is p_1's argmax (known from the previous verify pass, as in the chain); slots
  1..k-1 are the draft model's own greedy continuation, k - 1 small autoregressive steps on its own KV
  cache;
* **verify / accept / update**: the chain's (``bpd.decoding.blockwise.run_round``): one base call over the
  k tokens, the criterion's leading run, the base cache rolled back.

The draft keeps its own cache in step with the accepted output: every round it keeps the entries of all
accepted tokens but the last and then reads two tokens (the last accepted one and the new slot 0), so that
every row of a batch feeds the same number of tokens whatever it accepted. With exact acceptance the
output is greedy's, whatever the draft proposes.
"""

from __future__ import annotations

import torch

from bpd.decoding.blockwise import keep_blocks, run_round
from bpd.decoding.common import RowTracker, checked_max_len, drop_finished, top1
from bpd.decoding.criteria import Criterion, Exact
from bpd.decoding.result import DecodeResult


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


@torch.inference_mode()
def draft_decode(
    model,
    draft,
    src: torch.Tensor,
    k: int = 4,
    criterion: Criterion | None = None,
    max_len: int | None = None,
) -> DecodeResult:
    """Speculative decoding with a draft model at any batch size; exact criterion == greedy output.

    ``invocations`` counts the base model's decoder calls (as for the chain); the draft's k - 1 small calls
    per round are its cost on top, which the bench's wall clock includes.
    """
    k = int(k)
    if k < 2:
        raise ValueError(f"draft-model decoding needs k >= 2 (got {k}): k = 1 is greedy.")
    check_draft(model, draft)
    criterion = criterion or Exact()
    if not isinstance(criterion, Criterion):
        raise TypeError(f"criterion must be an acceptance criterion instance, e.g. criteria.Exact() "
                        f"(got {criterion!r}).")
    floor = criterion.min_block_size
    if not 1 <= floor <= k:
        raise ValueError(f"min_block_size must be between 1 and k={k} (got {floor}).")
    max_len = checked_max_len(model, src, max_len)
    b, dev = src.shape[0], src.device
    enc, d_enc = model.encode(src), draft.encode(src)
    cache, d_cache = model.new_cache(b, max_len + k + 1), draft.new_cache(b, max_len + k + 2)
    rows = RowTracker(b, model.eos_id, max_len)
    if max_len <= 0:
        return rows.result(0, position_reached=[0] * (k - 1), position_accepted=[0] * (k - 1))
    bos = torch.full((b, 1), model.bos_id, dtype=torch.long, device=dev)
    first = top1(model.heads.base_logits(model.decode(bos, enc, cache)[:, 0]))[:, None]
    invocations = 1
    feed = torch.cat([bos, first], dim=1)  # what the draft has not read yet
    reached, accepted = [0] * (k - 1), [0] * (k - 1)
    while rows.active:
        props = torch.cat([first, draft_chain(draft, feed, d_enc, d_cache, k - 1)], dim=1)
        r = run_round(model, props, enc, cache, criterion, k, floor)
        invocations += 1
        # The draft read ``feed`` and props[:, 1:k-1]; keep what was accepted but the last accepted token.
        read = feed.shape[1] + k - 2
        keep_read = [feed.shape[1] - 1 + n - 1 for n in r.khat]
        d_cache.rollback(read, keep_read)
        khat = torch.tensor(r.khat, device=dev)[:, None] - 1
        feed = torch.cat([props.gather(1, khat), r.first], dim=1)
        finished = keep_blocks(rows, r, reached, accepted)
        live = drop_finished(rows, finished, (cache, d_cache), enc, d_enc, r.first, feed)
        if live is None:
            break
        enc, d_enc, first, feed = live
    return rows.result(invocations, position_reached=reached, position_accepted=accepted)
