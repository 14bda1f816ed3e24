"""Where blockwise decoding pays: the cost of a round against a greedy step across model sizes, batch sizes,
dtypes and round designs, and the speedup those costs predict for the paper's accepted block sizes.

A round's cost t_k over a greedy step's t_1 decides what a mean accepted block size k_hat buys:

    predicted speedup = k_hat * t_1 / t_k

(the bench's ideal speedup; the encoder and the first call per sentence left out). Two round designs:

* ``chain``: today's decoder (``bpd.decoding.methods.blockwise``): verify k tokens and score p_1 at k positions,
  then run the heads at the one accepted position (k - 1 proposal rows through the projection);
* ``combined``: the paper's (Section 3, "combined scoring and proposal"): the verify pass runs every head
  at every one of the k positions (k * k rows through one projection), so the next block's proposals are
  already there whichever position is accepted, and there is no separate proposal step.

``round_costs`` times t_1 and both designs' rounds for given k in turns (``step_costs.median_ms``: runs of
back-to-back calls of each, so drift of the machine cancels out of the ratios), with the parts of the chain's
round (decoder layers, scoring, proposal) as in ``bpd.bench.step_costs.step_costs``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from bpd.bench.step_costs import StepTiming, median_ms, step_costs, warm_up
from bpd.decoding.common import top1
from bpd.decoding.criteria import Exact
from bpd.decoding.methods.blockwise import Verified, accept, update

DESIGNS = ("chain", "combined")


def combined_round(model, props: torch.Tensor, enc, cache, k: int) -> torch.Tensor:
    """One round of the paper's design: verify ``props`` (B, k) and, in the same pass, every head at every
    position through one projection; returns the next block's proposals (B, k), read at the accepted
    position."""
    h = model.decode(props, enc, cache)  # (B, k, d)
    heads = model.heads
    slots = heads.states(h, k)  # (B, k positions, k slots, d)
    p1 = heads.project(slots[:, :, 0])  # p_1 over the whole vocabulary (verification needs it)
    rest = heads.proposal_top1(slots[:, :, 1:]) if k > 1 else None  # (B, k, k-1) every position's proposals
    best = top1(p1)
    verified = Verified(h, p1, best)
    _, khat = accept(Exact(), verified, props, 1)
    update(cache, verified, k, khat)
    last = torch.tensor(khat, device=h.device)[:, None] - 1
    first = best.gather(1, last)
    if rest is None:
        return first
    nxt = rest.gather(1, last[:, :, None].expand(-1, 1, k - 1))[:, 0]
    return torch.cat([first, nxt], dim=1)


@torch.inference_mode()
def round_costs(model, src: torch.Tensor, ks: list[int], repeats: int, prefix_len: int = 12) -> dict[str, float]:
    """Median ms of a greedy step (``t1``), the chain's round per k (``chain<k>``, with its parts ``d<k>``
    decoder layers, ``p<k>`` proposal chain, from ``bpd.bench.step_costs.step_costs``) and the combined round per k
    (``combined<k>``), the two designs timed in one rotation with their own ``t1``."""
    device = src.device
    chain = step_costs(model, src, ks, timing=StepTiming(prefix_len=prefix_len, repeats=repeats))
    b = src.shape[0]
    enc = model.encode(src)
    cache = model.new_cache(b, prefix_len + max(ks) + 2)
    model.decode(torch.full((b, prefix_len), model.bos_id, dtype=torch.long, device=device), enc, cache)
    mark = cache.mark()
    tok = torch.full((b, 1), model.bos_id, dtype=torch.long, device=device)

    def greedy_step() -> None:
        top1(model.heads.base_logits(model.decode(tok, enc, cache)[:, 0])).tolist()
        cache.rewind(mark)

    fns: dict[str, Any] = {"t1": greedy_step}
    for k in ks:
        props = torch.full((b, k), model.bos_id, dtype=torch.long, device=device)

        def comb(k: int = k, props: torch.Tensor = props) -> None:
            combined_round(model, props, enc, cache, k)
            cache.rewind(mark)

        fns[f"combined{k}"] = comb
    warm_up(list(fns.values()))
    comb_costs = median_ms(fns, repeats, device)
    out = {"t1": chain["t1"]}
    for k in ks:
        out[f"chain{k}"] = chain[f"t{k}"]
        out[f"d{k}"], out[f"p{k}"] = chain[f"part_d{k}"], chain[f"part_p{k}"]
        out["d1"], out["part_t1"] = chain["part_d1"], chain["part_t1"]
        out[f"part_t{k}"] = chain[f"part_t{k}"]
        # The combined design's ratio comes from its own rotation; expressed in the chain rotation's t_1.
        out[f"combined{k}"] = comb_costs[f"combined{k}"] / comb_costs["t1"] * chain["t1"]
    return out


def repeats_for(model, src: torch.Tensor, budget_s: float = 0.25, lo: int = 5, hi: int = 100) -> int:
    """Repetitions so that one function's timing takes about ``budget_s`` (from one k = 10 verify call)."""
    with torch.inference_mode():
        enc = model.encode(src)
        cache = model.new_cache(src.shape[0], 16)
        toks = torch.full((src.shape[0], 10), model.bos_id, dtype=torch.long, device=src.device)
        model.decode(toks, enc, cache)  # warm
        cache = model.new_cache(src.shape[0], 16)
        t0 = time.perf_counter()
        model.heads.base_logits(model.decode(toks, enc, cache))
        dt = time.perf_counter() - t0
    return max(lo, min(hi, int(budget_s / max(dt, 1e-6))))


def predicted_speedup(khat: float, t1: float, tk: float) -> float:
    return khat * t1 / tk
