"""Greedy decoding with a key/value cache (the strong baseline), and a naive no-cache variant.

The naive variant recomputes the whole decoder prefix at every step, as the paper's reference
implementation did; the benchmark reports it only to show how much a weak baseline would inflate a
blockwise speedup.
"""

from __future__ import annotations

import torch

from bpd.decoding.common import RowTracker, checked_max_len, top1
from bpd.decoding.result import DecodeResult


@torch.inference_mode()
def greedy_decode(model, src: torch.Tensor, max_len: int | None = None) -> DecodeResult:
    """Argmax of p_1 one token at a time, reusing the encoder output and the decoder's KV cache."""
    max_len = checked_max_len(model, src, max_len)
    b = src.shape[0]
    enc = model.encode(src)
    cache = model.new_cache(b, max_len + 1)
    rows = RowTracker(b, model.eos_id, max_len)
    inp = torch.full((b, 1), model.bos_id, dtype=torch.long, device=src.device)
    invocations = 0
    while rows.active and max_len > 0:
        h = model.decode(inp, enc, cache)
        invocations += 1
        nxt = top1(model.heads.base_logits(h[:, 0]))
        finished = [s for s, tok in enumerate(nxt.tolist()) if rows.accept(s, [tok])]
        keep = rows.drop(finished)
        if keep is not None and rows.active:
            idx = torch.tensor(keep, device=src.device)
            enc, nxt = enc.select(idx), nxt.index_select(0, idx)
            cache.select(keep)
        inp = nxt[:, None]
    return rows.result(invocations)


@torch.inference_mode()
def naive_greedy_decode(model, src: torch.Tensor, max_len: int | None = None) -> DecodeResult:
    """Greedy without a decoder cache: the whole prefix is re-run at every step (weak baseline)."""
    max_len = checked_max_len(model, src, max_len)
    b = src.shape[0]
    enc = model.encode(src)
    rows = RowTracker(b, model.eos_id, max_len)
    prefix = torch.full((b, 1), model.bos_id, dtype=torch.long, device=src.device)
    invocations = 0
    while rows.active and max_len > 0:
        h = model.decode(prefix, enc)
        invocations += 1
        nxt = top1(model.heads.base_logits(h[:, -1]))
        finished = [s for s, tok in enumerate(nxt.tolist()) if rows.accept(s, [tok])]
        keep = rows.drop(finished)
        if keep is not None and rows.active:
            idx = torch.tensor(keep, device=src.device)
            enc, nxt, prefix = enc.select(idx), nxt.index_select(0, idx), prefix.index_select(0, idx)
        prefix = torch.cat([prefix, nxt[:, None]], dim=1)
    return rows.result(invocations)
