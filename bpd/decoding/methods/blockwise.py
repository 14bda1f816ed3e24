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

That is one decoder invocation per round plus one initial propose-only call (``start``). The loop around the
rounds (dropping finished rows, bookkeeping) is ``bpd.decoding.loop.decode_rounds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from bpd.decoding.common import last_position, top1
from bpd.decoding.criteria import Criterion, Verdict
from bpd.decoding.engine import checked_engine, engine_for
from bpd.decoding.loop import Accepted, Batch, Rounds, RowState, block_floor, checked_criterion, decode_rounds
from bpd.decoding.method import NOTHING, Method, Options, Plan, Prepared, RoundOptions
from bpd.decoding.result import DecodeResult

#: ``proposer(model, h_last, first, k, prev, enc) -> (B, k)``: a block chosen otherwise than by the heads' argmax
#: (``prev``: the token before ``first``; ``enc``: the rows' encoder state).
Proposer = Callable[..., torch.Tensor]


def propose(model, h_last: torch.Tensor, first: torch.Tensor, k: int, enc=None, cache=None) -> torch.Tensor:
    """Proposals (B, k) at the last accepted position: slot 0 is p_1's argmax ``first`` (B, 1), already
    known from verification; slots 1..k-1 come from the proposal heads at this one position only (heads that
    read the input read it from ``enc``, the rows' encoder state; heads that read ahead also need the rows'
    ``cache``, whose last entry is ``h_last``'s position)."""
    if k == 1:
        return first
    source = None if enc is None else model.head_source(enc, last_position(cache))
    return torch.cat([first, model.heads.propose(h_last, first, k, source)], dim=-1)


def start(model, bos: torch.Tensor, enc, cache, k: int) -> torch.Tensor:
    """The propose-only first call: decode ``bos`` (B, 1) and read the first block's k proposals there."""
    h = model.decode(bos, enc, cache)[:, 0]
    return propose(model, h, top1(model.heads.base_logits(h))[:, None], k, enc, cache)


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


@dataclass
class ChainState(RowState):
    """What the next round proposes from: the decoder state (B, d) and p_1's argmax (B, 1) at the last accepted
    position and, for a custom proposer, the token before it (B, 1); or the block itself, when the start call
    has proposed it already."""

    h_last: torch.Tensor | None = None
    first: torch.Tensor | None = None
    prev: torch.Tensor | None = None
    props: torch.Tensor | None = None


class ChainRounds(Rounds):
    """Propose (after the finished rows are gone), verify, accept, update."""

    def __init__(self, k: int, criterion: Criterion, floor: int, proposer: Proposer | None = None) -> None:
        self.k, self.criterion, self.floor, self.proposer = k, criterion, floor, proposer
        self.slots, self.room, self.start_calls = k - 1, k + 1, 1

    def start(self, model, batch: Batch) -> ChainState:
        if self.proposer is None:
            return ChainState(props=start(model, batch.bos, batch.enc, batch.cache, self.k))
        h0 = model.decode(batch.bos, batch.enc, batch.cache)[:, 0]
        first = top1(model.heads.base_logits(h0))[:, None]
        return ChainState(props=self.proposer(model, h0, first, self.k, batch.bos, batch.enc))

    def propose(self, model, state: ChainState, batch: Batch) -> torch.Tensor:
        if self.proposer is None:
            return propose(model, state.h_last, state.first, self.k, batch.enc, batch.cache)
        return self.proposer(model, state.h_last, state.first, self.k, state.prev, batch.enc)

    def round(self, model, batch: Batch, state: ChainState) -> tuple[ChainState, Accepted]:
        props = state.props if state.props is not None else self.propose(model, state, batch)
        r = run_round(model, props, batch.enc, batch.cache, self.criterion, self.k, self.floor)
        # A custom proposer also reads the last accepted token: the context of the next block's first token.
        prev = None if self.proposer is None else \
            props.gather(1, torch.tensor(r.khat, device=props.device)[:, None] - 1)
        blocks = [row[:n] for row, n in zip(r.verdict.proposals, r.khat)]
        return ChainState(r.h_last, r.first, prev), (blocks, r.verdict.runs)


@torch.inference_mode()
def blockwise_decode(
    model,
    src: torch.Tensor,
    k: int | None = None,
    criterion: Criterion | None = None,
    min_block_size: int = 1,
    max_len: int | None = None,
    proposer: Proposer | None = None,
    engine: str = "eager",
) -> DecodeResult:
    """Blockwise parallel decoding at any batch size; exact criterion == greedy output.

    ``k`` may be smaller than the number of trained heads (the first k slots are used). The
    effective minimum block size is the larger of ``min_block_size`` and the criterion's own.
    ``proposer(model, h_last, first, k, prev, enc) -> (B, k)`` replaces the heads' own proposals (e.g. a
    rescored lattice, ``bpd.decoding.methods.rescore.Rescorer``; ``prev`` is the token before ``first``, ``enc`` the
    rows' encoder state). ``engine``: the eager loop, or the static path's fixed-shape rounds
    (``bpd.decoding.engine``: static, compiled; the heads' own proposals only).
    """
    k = model.k if k is None else int(k)
    if not 1 <= k <= model.k:
        fix = "use k >= 1" if k < 1 else f"lower k to at most {model.k}, or train more heads"
        raise ValueError(f"decode-time k must be between 1 and the model's trained k={model.k} (got {k}); {fix}.")
    criterion = checked_criterion(criterion)
    floor = block_floor(criterion, k, min_block_size)
    if checked_engine(engine) != "eager":
        if proposer is not None:
            raise ValueError(f"engine={engine!r} runs the heads' own proposals; a custom proposer decodes on the "
                             "eager path (engine='eager').")
        return engine_for(model, engine).blockwise(src, k, criterion, floor, max_len)
    return decode_rounds(model, src, max_len, ChainRounds(k, criterion, floor, proposer))


class Blockwise(Method):
    """The paper's chain: one proposal per slot, verified in one parallel call."""

    name = "blockwise"

    def decoder_name(self, o: RoundOptions) -> str:
        floor = "" if o.min_block_size == 1 else f"_l{o.min_block_size}"
        return f"blockwise_k{o.k}_{o.criterion_suffix}{floor}"

    def sweep(self, plan: Plan, asked: None) -> list[Options]:
        """Every criterion x minimum block size x k (the bench: l = 1); in the evaluation k = 1 only with plain
        exact acceptance (there it is greedy) and no l above k (a block of k tokens cannot hold it)."""
        out: list[Options] = []
        for crit in plan.criteria:
            for floor in crit.min_block_sizes if plan.floors else [1]:
                for k in plan.ks:
                    if plan.floors and ((k == 1 and (crit.name != "exact" or floor != 1)) or floor > k):
                        continue
                    out.append(RoundOptions(k, crit.name, crit.param, int(floor)))
        return out

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: RoundOptions, run: Prepared = NOTHING
               ) -> DecodeResult:
        return blockwise_decode(model, src, k=o.k, criterion=o.criterion_for(run.criterion_kwargs), max_len=max_len,
                                engine=o.engine)

    def step_cost_key(self, o: RoundOptions) -> str:
        return f"t{o.k}"

    def start_cost_key(self, o: RoundOptions) -> str:
        return f"s{o.k}"
