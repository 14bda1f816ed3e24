"""Blockwise parallel decoding (Stern et al. 2018, Section 3) with combined scoring and proposal.

Each round feeds the k proposed tokens y_{j+1..j+k} through the decoder in one call against the KV
cache. p_1 at the position of y_{j+i} verifies y_{j+i+1}; the longest verified prefix (k_hat >= 1,
since y_{j+1} came from p_1) is accepted, each row's cache is truncated back to its accepted length,
and the next round's proposals are read at the last accepted position: slot 0 from the p_1 logits
already computed for verification, slots 1..k-1 from the proposal heads at that one position only.
That is one decoder invocation per round plus one initial propose-only call.
"""

from __future__ import annotations

import torch

from bpd.decoding.criteria import Criterion, Exact, top1
from bpd.decoding.greedy import RowTracker, default_max_len
from bpd.decoding.result import DecodeResult


def propose(model, h_last: torch.Tensor, first: torch.Tensor, k: int) -> torch.Tensor:
    """Proposals (B, k) at the last accepted position: slot 0 is p_1's argmax ``first`` (B, 1), already
    known from verification; slots 1..k-1 come from the proposal heads at this one position only."""
    if k == 1:
        return first
    return torch.cat([first, model.heads.propose(h_last, first, k)], dim=-1)


def start(model, bos: torch.Tensor, enc, cache, k: int) -> torch.Tensor:
    """The propose-only first call: decode ``bos`` (B, 1) and read the first block's k proposals there."""
    h = model.decode(bos, enc, cache)[:, 0]
    return propose(model, h, top1(model.heads.base_logits(h))[:, None], k)


def verify(model, props: torch.Tensor, enc, cache, criterion: Criterion):
    """One parallel verify pass over the k proposals of every row.

    Returns the decoder states (B, k, d), p_1's argmax after each proposal (B, k), and the (B, k') ids the
    round sends to the host after the proposals: for a ``by_argmax`` criterion p_1's argmax itself (k' = k;
    slot i is judged against the argmax after slot i-1 on the host), else the criterion's accept flags for
    proposal slots 1..k-1 (k' = k - 1), computed on the device from the logits.
    """
    h = model.decode(props, enc, cache)  # appends k entries per row to the cache
    base = model.heads.base_logits(h)  # (B, k, V): p_1 after each proposed token
    best = top1(base)
    if criterion.by_argmax:
        return h, best, best
    return h, best, criterion.accept(base[:, :-1], props[:, 1:], best[:, :-1]).to(props.dtype)


def accept_lengths(host_rows: list[list[int]], k: int, floor: int,
                   criterion: Criterion | None = None) -> tuple[list[int], list[int]]:
    """From host rows ``[proposals (k) | verdicts]``: the leading accepted run per row and the accepted block
    size k_hat = max(1 + run, floor). The verdicts are accept flags for slots 1..k-1, or, for a ``by_argmax``
    ``criterion``, p_1's argmax at slots 0..k-1, judged slot by slot up to the first rejection. Done on the
    host: the round synchronises once anyway, and a few Python comparisons cost less than a chain of tiny
    device ops."""
    leads, khats = [], []
    judge = criterion.accept_ids if criterion is not None and criterion.by_argmax else None
    for row in host_rows:
        n = 0
        if judge is not None:
            while n < k - 1 and judge(row[k + n], row[n + 1]):
                n += 1
        else:
            for flag in row[k:]:
                if not flag:
                    break
                n += 1
        leads.append(n)
        khats.append(max(1 + n, floor))
    return leads, khats


def gather_last(h: torch.Tensor, best: torch.Tensor, khat: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder state and p_1's argmax at each row's last accepted position (``khat`` is on the host)."""
    if len(khat) == 1:  # batch 1: plain views, no index tensor to build
        i = khat[0] - 1
        return h[:, i], best[:, i : i + 1]
    last = torch.tensor(khat, device=h.device)[:, None] - 1
    h_last = h.gather(1, last[:, :, None].expand(-1, 1, h.shape[-1]))[:, 0]
    return h_last, best.gather(1, last)


def rollback(cache, k: int, khat: list[int]) -> None:
    """Forget each row's rejected proposals: the verify pass appended k entries, khat[b] are kept."""
    if len(khat) == 1:
        cache.truncate(cache.lengths - (k - khat[0]), host_max=cache.host_max)
    else:
        cache.truncate(cache.lengths - k + torch.tensor(khat, device=cache.lengths.device), host_max=cache.host_max)


def verify_and_accept(model, props: torch.Tensor, enc, cache, criterion: Criterion, k: int, floor: int):
    """A round up to its next proposals: verify, learn each row's k_hat on the host, roll the cache back
    and read the last accepted position. Returns the host rows ``[proposals | verdicts]``, the leading
    accepted runs, k_hat per row, and the decoder state and p_1's argmax at the last accepted position."""
    h, best, verdicts = verify(model, props, enc, cache, criterion)
    # The single host synchronisation of the round: proposed tokens and verdicts together.
    host = torch.cat([props, verdicts], dim=1).tolist()
    leads, khat = accept_lengths(host, k, floor, criterion)
    rollback(cache, k, khat)
    h_last, first = gather_last(h, best, khat)
    return host, leads, khat, h_last, first


@torch.inference_mode()
def blockwise_decode(
    model,
    src: torch.Tensor,
    k: int | None = None,
    criterion: Criterion | None = None,
    min_block_size: int = 1,
    max_len: int | None = None,
) -> DecodeResult:
    """Blockwise parallel decoding at any batch size; exact criterion == greedy output.

    ``k`` may be smaller than the number of trained heads (the first k slots are used). The
    effective minimum block size is the larger of ``min_block_size`` and the criterion's own.
    """
    k = model.k if k is None else int(k)
    if not 1 <= k <= model.k:
        raise ValueError(
            f"decode-time k must be between 1 and the model's trained k={model.k} (got {k}); "
            "train more heads or lower k."
        )
    criterion = criterion or Exact()
    floor = min(k, max(int(min_block_size), criterion.min_block_size))
    if floor < 1:
        raise ValueError(f"min_block_size must be >= 1 (got {min_block_size}).")
    max_len = default_max_len(src, max_len)
    b, dev = src.shape[0], src.device
    enc = model.encode(src)
    cache = model.new_cache(b, max_len + k + 1)
    rows = RowTracker(b, model.eos_id, max_len)
    if max_len <= 0:
        return rows.result(0, position_reached=[0] * (k - 1), position_accepted=[0] * (k - 1))

    props = start(model, torch.full((b, 1), model.bos_id, dtype=torch.long, device=dev), enc, cache, k)
    invocations = 1
    counts = [0] * k  # rounds whose leading accepted run reached slot i
    while rows.active:
        host, leads, khat_h, h_last, first = verify_and_accept(model, props, enc, cache, criterion, k, floor)
        invocations += 1
        for n in leads:
            for i in range(n + 1):
                counts[i] += 1
        finished = [s for s, row in enumerate(host) if rows.accept(s, row[: khat_h[s]])]
        keep = rows.drop(finished)
        if keep is not None:
            if not rows.active:
                break
            keep = keep.to(dev)
            enc, h_last, first = enc.select(keep), h_last.index_select(0, keep), first.index_select(0, keep)
            cache.select(keep)
        # Every live row holds BOS plus its accepted tokens (no cut applies to a live row).
        cache.host_max = 1 + max(len(rows.tokens[r]) for r in rows.active)
        props = propose(model, h_last, first, k)
    # Slot i (1-based) was examined when the run before it reached i-1, accepted when it reached i.
    reached, accepted = counts[: k - 1], counts[1:]
    return rows.result(invocations, position_reached=reached, position_accepted=accepted)
