"""What every decoder shares: per-row output bookkeeping, the default output length."""

from __future__ import annotations

import torch

from bpd.config import output_limit
from bpd.decoding.result import DecodeResult
from bpd.models.fastpath import top1

__all__ = ["RowTracker", "checked_max_len", "count_positions", "default_max_len", "last_position", "top1"]


class RowTracker:
    """Per-row outputs of a batch being decoded: appends, EOS / max_len cut-offs, and which rows are live."""

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

    def drop(self, finished_slots: list[int]) -> list[int] | None:
        """Forget finished slots; returns the batch slots to keep (None if nothing changed)."""
        if not finished_slots:
            return None
        gone = set(finished_slots)
        keep = [i for i in range(len(self.active)) if i not in gone]
        self.active = [self.active[i] for i in keep]
        return keep

    def result(self, invocations: int, **extra) -> DecodeResult:
        return DecodeResult(
            tokens=self.tokens,
            iterations=[len(b) for b in self.blocks],
            block_sizes=self.blocks,
            invocations=invocations,
            **extra,
        )


def count_positions(reached: list[int], accepted: list[int], run: int, proposed: int, kept: int) -> None:
    """Per-position acceptance, over kept tokens only: slot j (index j - 1) was examined when the run before it
    reached j - 1 and accepted when the run reached j, and counts only if the row kept its token (a block cut
    at EOS or the length limit ends there). ``run``: proposals accepted after slot 0; ``proposed``: the block
    size the round accepted; ``kept``: the tokens the row kept of it."""
    top = len(reached) if kept == proposed else kept - 1
    for j in range(min(run + 1, top)):
        reached[j] += 1
    for j in range(min(run, top)):
        accepted[j] += 1


def default_max_len(src: torch.Tensor, max_len: int | None) -> int:
    """``max_len``, or the harness's output-length rule (``bpd.config.output_limit``) of the padded source."""
    return int(max_len) if max_len is not None else output_limit(int(src.shape[1]))


def checked_max_len(model, src: torch.Tensor, max_len: int | None) -> int:
    """What every decoder checks first: a (batch, length) integer source of the model's token ids with at least
    one real token per row, and a non-negative length limit (default: ``default_max_len``). Returns the limit."""
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.dtype.is_floating_point or src.dtype == torch.bool:
        what = f"{src.dtype} of shape {tuple(src.shape)}" if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"src must be a (batch, length) integer tensor of token ids (got {what}); e.g. "
                         "torch.tensor([ids]) for one sentence, or .long() for a float tensor.")
    if src.shape[0] == 0 or src.shape[1] == 0:
        raise ValueError(f"src of shape {tuple(src.shape)} has no tokens; give every row at least one (EOS for an "
                         "empty sentence).")
    # One host synchronisation for all three facts: this runs inside every timed decode call.
    lo, hi, any_empty = torch.stack([src.min().long(), src.max().long(),
                                     (src == model.pad_id).all(dim=1).any().long()]).tolist()
    if lo < 0 or hi >= model.cfg.vocab_size:
        raise ValueError(f"src holds token id {lo if lo < 0 else hi}, outside the model's vocabulary of "
                         f"{model.cfg.vocab_size}; encode with the model's own tokenizer.")
    if any_empty:
        empty = (src == model.pad_id).all(dim=1).nonzero().flatten().tolist()
        raise ValueError(f"src row(s) {empty[:5]} are all padding; give every row at least one token (EOS for an "
                         "empty sentence).")
    if max_len is not None and (isinstance(max_len, bool) or int(max_len) != max_len or max_len < 0):
        raise ValueError(f"max_len must be a whole number >= 0 (got {max_len!r}).")
    return default_max_len(src, max_len)


def last_position(cache) -> torch.Tensor | None:
    """Each row's last cached position (B,), that of the decoder state the next proposals are read at (heads that
    read ahead need it); None without a cache."""
    return None if cache is None else cache.lengths - 1
