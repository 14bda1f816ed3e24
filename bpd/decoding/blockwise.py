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

from bpd.decoding.criteria import Criterion, Exact
from bpd.decoding.greedy import RowTracker, default_max_len
from bpd.decoding.result import DecodeResult


def _propose(model, h_last: torch.Tensor, base_last: torch.Tensor, k: int) -> torch.Tensor:
    """Proposals (B, k) from the hidden state at the last accepted position."""
    first = base_last.argmax(-1, keepdim=True)
    if k == 1:
        return first
    return torch.cat([first, model.heads.proposal_logits(h_last, k).argmax(-1)], dim=-1)


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
    reached, accepted = [0] * (k - 1), [0] * (k - 1)
    if max_len <= 0:
        return rows.result(0, position_reached=reached, position_accepted=accepted)

    # Propose-only first call on BOS.
    h = model.decode(torch.full((b, 1), model.bos_id, dtype=torch.long, device=dev), enc, cache)
    props = _propose(model, h[:, 0], model.heads.base_logits(h[:, 0]), k)
    invocations = 1
    while rows.active:
        h = model.decode(props, enc, cache)  # (B, k, d): one parallel verify pass
        invocations += 1
        base = model.heads.base_logits(h)  # (B, k, V): p_1 after each proposed token
        if k > 1:
            ok = criterion.accept(base[:, :-1], props[:, 1:])  # slot i verified by p_1 after slot i-1
            lead = ok.long().cumprod(-1).sum(-1)  # leading run of accepted slots
            khat = (1 + lead).clamp(min=floor)
        else:
            lead = torch.zeros(props.shape[0], dtype=torch.long, device=dev)
            khat = torch.ones_like(lead)
        # The single host synchronisation of the round: accepted lengths and tokens.
        khat_h, props_h, lead_h = khat.tolist(), props.tolist(), lead.tolist()
        for n in lead_h:
            for i in range(min(n + 1, k - 1)):
                reached[i] += 1
                accepted[i] += i < n
        finished = [s for s in range(len(khat_h)) if rows.accept(s, props_h[s][: khat_h[s]])]
        # Roll each row's cache back to its accepted length; read the next proposals there.
        cache.truncate(cache.lengths - k + khat, host_max=cache.host_max)
        last = (khat - 1)[:, None, None]
        h_last = h.gather(1, last.expand(-1, 1, h.shape[-1]))[:, 0]
        base_last = base.gather(1, last.expand(-1, 1, base.shape[-1]))[:, 0]
        keep = rows.drop(finished)
        if keep is not None:
            if not rows.active:
                break
            keep = keep.to(dev)
            enc, h_last, base_last = enc.select(keep), h_last.index_select(0, keep), base_last.index_select(0, keep)
            cache.select(keep)
        # Every live row holds BOS plus its accepted tokens (no cut applies to a live row).
        cache.host_max = 1 + max(len(rows.tokens[r]) for r in rows.active)
        props = _propose(model, h_last, base_last, k)
    return rows.result(invocations, position_reached=reached, position_accepted=accepted)
