"""Blockwise parallel decoding (Stern et al. 2018, Section 3) with combined scoring and proposal.

A round has four phases, each a function below (named as in Medusa's propose / verify / accept / update):

* **propose**: at the last accepted position, slot 0 is p_1's argmax (already known from the previous
  verify pass) and slots 1..k-1 come from the proposal heads at that one position;
* **verify**: the k proposals y_{j+1..j+k} go through the decoder in one call against the KV cache; p_1 at
  the position of y_{j+i} scores y_{j+i+1};
* **accept**: the criterion says how many proposals each row accepts (k_hat >= 1, since y_{j+1} came from
  p_1; at least the minimum block size);
* **update**: each row's cache rolls back to its accepted length, and the decoder state and p_1's argmax
  at the last accepted position are what the next propose reads.

That is one decoder invocation per round plus one initial propose-only call (``start``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bpd.decoding.common import RowTracker, checked_max_len, count_positions, drop_finished, top1
from bpd.decoding.criteria import Criterion, Exact, Verdict
from bpd.decoding.result import DecodeResult


def propose(model, h_last: torch.Tensor, first: torch.Tensor, k: int, enc=None) -> torch.Tensor:
    """Proposals (B, k) at the last accepted position: slot 0 is p_1's argmax ``first`` (B, 1), already
    known from verification; slots 1..k-1 come from the proposal heads at this one position only (heads that
    attend to the input read it from ``enc``, the rows' encoder state)."""
    if k == 1:
        return first
    source = None if enc is None else model.head_source(enc)
    return torch.cat([first, model.heads.propose(h_last, first, k, source)], dim=-1)


def start(model, bos: torch.Tensor, enc, cache, k: int) -> torch.Tensor:
    """The propose-only first call: decode ``bos`` (B, 1) and read the first block's k proposals there."""
    h = model.decode(bos, enc, cache)[:, 0]
    return propose(model, h, top1(model.heads.base_logits(h))[:, None], k, enc)


@dataclass
class Verified:
    """The verify pass over k proposals: decoder states (B, k, d), p_1's logits (B, k, V) and argmax (B, k)
    after each proposed token."""

    states: torch.Tensor
    logits: torch.Tensor
    best: torch.Tensor


def verify(model, props: torch.Tensor, enc, cache) -> Verified:
    """One parallel decoder call over the k proposals of every row (appends k entries per row to the cache)."""
    h = model.decode(props, enc, cache)
    logits = model.heads.base_logits(h)
    return Verified(h, logits, top1(logits))


def accept(criterion: Criterion, verified: Verified, props: torch.Tensor, floor: int) -> tuple[Verdict, list[int]]:
    """The criterion's verdict (the round's one host synchronisation) and each row's accepted block size
    k_hat = max(1 + leading accepted run, floor)."""
    verdict = criterion.judge(verified.logits, props, verified.best)
    return verdict, [max(1 + n, floor) for n in verdict.runs]


def update(cache, verified: Verified, k: int, khat: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Roll each row's cache back to its accepted length; returns the decoder state (B, d) and p_1's argmax
    (B, 1) at each row's last accepted position."""
    cache.rollback(k, khat)
    h, best = verified.states, verified.best
    if len(khat) == 1:  # batch 1: plain views, no index tensor to build
        i = khat[0] - 1
        return h[:, i], best[:, i : i + 1]
    last = torch.tensor(khat, device=h.device)[:, None] - 1
    return h.gather(1, last[:, :, None].expand(-1, 1, h.shape[-1]))[:, 0], best.gather(1, last)


@dataclass
class Round:
    """A round's outcome: the verdict on the host, each row's accepted block size k_hat, and the decoder state
    (B, d) and p_1's argmax (B, 1) at the last accepted position, which the next propose reads."""

    verdict: Verdict
    khat: list[int]
    h_last: torch.Tensor
    first: torch.Tensor


def run_round(model, props: torch.Tensor, enc, cache, criterion: Criterion, k: int, floor: int) -> Round:
    """Verify, accept and update for one round (what the benchmark times as t_k, with ``propose``)."""
    verified = verify(model, props, enc, cache)
    verdict, khat = accept(criterion, verified, props, floor)
    return Round(verdict, khat, *update(cache, verified, k, khat))


def keep_blocks(rows: RowTracker, r: Round, reached: list[int], accepted: list[int]) -> list[int]:
    """Append each row's accepted block to its output and count the per-slot acceptance of the kept tokens;
    returns the batch slots that finished (EOS or the length limit)."""
    finished = []
    for s, (row, n) in enumerate(zip(r.verdict.proposals, r.verdict.runs)):
        if rows.accept(s, row[: r.khat[s]]):
            finished.append(s)
        count_positions(reached, accepted, n, r.khat[s], rows.blocks[rows.active[s]][-1])
    return finished


@torch.inference_mode()
def blockwise_decode(
    model,
    src: torch.Tensor,
    k: int | None = None,
    criterion: Criterion | None = None,
    min_block_size: int = 1,
    max_len: int | None = None,
    proposer=None,
) -> DecodeResult:
    """Blockwise parallel decoding at any batch size; exact criterion == greedy output.

    ``k`` may be smaller than the number of trained heads (the first k slots are used). The
    effective minimum block size is the larger of ``min_block_size`` and the criterion's own.
    ``proposer(model, h_last, first, k, prev, enc) -> (B, k)`` replaces the heads' own proposals (e.g. a
    rescored lattice, ``bpd.decoding.rescore.Rescorer``; ``prev`` is the token before ``first``, ``enc`` the
    rows' encoder state).
    """
    k = model.k if k is None else int(k)
    if not 1 <= k <= model.k:
        raise ValueError(
            f"decode-time k must be between 1 and the model's trained k={model.k} (got {k}); "
            "train more heads or lower k."
        )
    criterion = criterion or Exact()
    if not isinstance(criterion, Criterion):
        hint = f"criteria.{criterion.__name__}()" if isinstance(criterion, type) else \
            f"criteria.make_criterion({criterion!r})" if isinstance(criterion, str) else "criteria.Exact()"
        raise TypeError(f"criterion must be an acceptance criterion instance, e.g. {hint} (got {criterion!r}).")
    floor = max(int(min_block_size), criterion.min_block_size)
    if not 1 <= floor <= k:
        raise ValueError(f"min_block_size must be between 1 and k={k} (got {floor}): a round accepts at most k "
                         "tokens; lower the minimum block size or raise k.")
    max_len = checked_max_len(model, src, max_len)
    b, dev = src.shape[0], src.device
    enc = model.encode(src)
    cache = model.new_cache(b, max_len + k + 1)
    rows = RowTracker(b, model.eos_id, max_len)
    if max_len <= 0:
        return rows.result(0, position_reached=[0] * (k - 1), position_accepted=[0] * (k - 1))

    bos = torch.full((b, 1), model.bos_id, dtype=torch.long, device=dev)
    if proposer is None:
        props = start(model, bos, enc, cache, k)
    else:
        h0 = model.decode(bos, enc, cache)[:, 0]
        props = proposer(model, h0, top1(model.heads.base_logits(h0))[:, None], k, bos, enc)
    invocations = 1
    reached, accepted = [0] * (k - 1), [0] * (k - 1)  # per proposal slot 1..k-1
    while rows.active:
        r = run_round(model, props, enc, cache, criterion, k, floor)
        invocations += 1
        finished = keep_blocks(rows, r, reached, accepted)
        # A custom proposer also reads the last accepted token: the context of the next block's first token.
        prev = () if proposer is None else (props.gather(1, torch.tensor(r.khat, device=dev)[:, None] - 1),)
        live = drop_finished(rows, finished, (cache,), enc, r.h_last, r.first, *prev)
        if live is None:
            break
        enc, h_last, first, *prev = live
        props = propose(model, h_last, first, k, enc) if proposer is None else \
            proposer(model, h_last, first, k, *prev, enc)
    return rows.result(invocations, position_reached=reached, position_accepted=accepted)
