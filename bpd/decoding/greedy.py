"""Greedy decoding with a key/value cache (the strong baseline), and a naive no-cache variant.

The naive variant recomputes the whole decoder prefix at every step, as the paper's reference
implementation did; the benchmark reports it only to show how much a weak baseline would inflate a
blockwise speedup.
"""

from __future__ import annotations

import torch

from bpd.decoding.criteria import top1
from bpd.decoding.result import DecodeResult


class RowTracker:
    """Per-row output bookkeeping shared by the decoders: appends, EOS/max_len cut-offs, finishing."""

    def __init__(self, batch: int, eos_id: int, max_len: int) -> None:
        self.tokens: list[list[int]] = [[] for _ in range(batch)]
        self.blocks: list[list[int]] = [[] for _ in range(batch)]
        self.active: list[int] = list(range(batch))  # original row index of each live batch slot
        self.eos_id, self.max_len = eos_id, max_len

    def accept(self, slot: int, block: list[int]) -> bool:
        """Append ``block`` to the row in batch slot ``slot``; True if the row is now finished."""
        row = self.active[slot]
        out = self.tokens[row]
        block = block[: self.max_len - len(out)]
        if self.eos_id in block:
            block = block[: block.index(self.eos_id) + 1]
        out.extend(block)
        self.blocks[row].append(len(block))
        return (bool(block) and block[-1] == self.eos_id) or len(out) >= self.max_len

    def drop(self, finished_slots: list[int]) -> torch.Tensor | None:
        """Forget finished slots; returns the batch indices to keep (None if nothing changed)."""
        if not finished_slots:
            return None
        gone = set(finished_slots)
        keep = [i for i in range(len(self.active)) if i not in gone]
        self.active = [self.active[i] for i in keep]
        return torch.tensor(keep, dtype=torch.long)

    def result(self, invocations: int, **extra) -> DecodeResult:
        return DecodeResult(
            tokens=self.tokens,
            iterations=[len(b) for b in self.blocks],
            block_sizes=self.blocks,
            invocations=invocations,
            **extra,
        )


def default_max_len(src: torch.Tensor, max_len: int | None) -> int:
    # Translation-style default: source length plus a margin (T2T's decode_length = input + 50).
    return int(max_len) if max_len is not None else int(src.shape[1]) + 50


@torch.inference_mode()
def greedy_decode(model, src: torch.Tensor, max_len: int | None = None) -> DecodeResult:
    """Argmax of p_1 one token at a time, reusing the encoder output and the decoder's KV cache."""
    max_len = default_max_len(src, max_len)
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
            keep = keep.to(src.device)
            enc, nxt = enc.select(keep), nxt.index_select(0, keep)
            cache.select(keep)
        inp = nxt[:, None]
    return rows.result(invocations)


@torch.inference_mode()
def naive_greedy_decode(model, src: torch.Tensor, max_len: int | None = None) -> DecodeResult:
    """Greedy without a decoder cache: the whole prefix is re-run at every step (weak baseline)."""
    max_len = default_max_len(src, max_len)
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
            keep = keep.to(src.device)
            enc, nxt, prefix = enc.select(keep), nxt.index_select(0, keep), prefix.index_select(0, keep)
        prefix = torch.cat([prefix, nxt[:, None]], dim=1)
    return rows.result(invocations)
