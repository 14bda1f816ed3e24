"""Losses over the k proposal heads.

Head i at position t predicts the target i positions further ahead: ``tgt_out[:, t + i]``. The
paper picks one head uniformly at random per minibatch (an unbiased estimate of the mean that only
materialises one head's logits); the mean over all heads is the natural, lower-variance alternative.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100  # cross_entropy's ignore_index for targets outside a restricted slot vocabulary


def shifted_targets(tgt_out: torch.Tensor, i: int, pad_id: int) -> torch.Tensor:
    """Targets of head i: tgt_out shifted left by i, padded at the end."""
    if i == 0:
        return tgt_out
    pad = torch.full_like(tgt_out[:, :i], pad_id)
    return torch.cat([tgt_out[:, i:], pad], dim=1)


def teacher_tokens(tgt_out: torch.Tensor, k: int, pad_id: int) -> torch.Tensor:
    """(B, T, k-1): at position t, the tokens recurrent slots 1..k-1 read, i.e. tgt_out[t .. t+k-2]."""
    return torch.stack([shifted_targets(tgt_out, j, pad_id) for j in range(max(1, k - 1))], dim=-1)


def head_losses(
    model,
    h: torch.Tensor,
    tgt_out: torch.Tensor,
    heads: list[int],
    label_smoothing: float = 0.0,
) -> dict[int, torch.Tensor]:
    """Cross-entropy of each requested head (index 0 = p_1) from decoder states ``h`` (B, T, d)."""
    out: dict[int, torch.Tensor] = {}
    pad = model.pad_id
    # Heads whose slots read the previous slot's token are fed the targets (teacher forcing).
    teacher = teacher_tokens(tgt_out, max(heads) + 1, pad)
    index = loss_index(model.heads.loss_ids, model.heads.output.weight.shape[0], pad)
    for i, logits in model.heads.slot_logits(h, heads, tokens=teacher):
        tgt, ignore = shifted_targets(tgt_out, i, pad).flatten(), pad
        if i > 0 and index is not None:
            tgt, ignore = index[tgt], IGNORE  # positions among heads.loss_ids; other tokens and pad left out
        # Sum over the counted targets: a batch of short sentences has none i positions ahead for a far
        # head, and the plain mean would then log NaN (its gradient is zero either way).
        ce = F.cross_entropy(
            logits.flatten(0, 1).float(), tgt, ignore_index=ignore, label_smoothing=label_smoothing, reduction="sum"
        )
        out[i] = ce / (tgt != ignore).sum().clamp(min=1)
    return out


def loss_index(ids: torch.Tensor | None, vocab: int, pad: int) -> torch.Tensor | None:
    """A (vocab,) table from token id to its position among ``ids`` (the proposal slots' training
    vocabulary), ``IGNORE`` for every other token (pad included), so the loss leaves those targets out;
    None when the slots train over the whole vocabulary."""
    if ids is None:
        return None
    table = torch.full((vocab,), IGNORE, dtype=torch.long, device=ids.device)
    table[ids] = torch.arange(len(ids), device=ids.device)
    table[pad] = IGNORE
    return table


def combine(losses: dict[int, torch.Tensor], p1_weight: float = 1.0) -> torch.Tensor:
    """Weighted mean of the head losses, p_1 (index 0) counting ``p1_weight`` times a proposal head.

    ``p1_weight`` = 1 is the plain mean. When the base is fine-tuned jointly, a larger weight keeps the
    shared decoder serving p_1 (what decides quality) rather than the k - 1 proposal heads, in the spirit
    of Medusa-2's weighted joint loss."""
    weights = [p1_weight if i == 0 else 1.0 for i in losses]
    total = sum(w * v for w, v in zip(weights, losses.values()))
    return total / sum(weights)


class LossModule(torch.nn.Module):
    """The model's forward plus the head losses, as one module: what DDP wraps.

    The proposal heads act on the decoder states after the model's forward, so DDP wrapping the bare model
    would see the heads' parameters used outside its forward; wrapping this module puts them inside.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, heads: list[int], label_smoothing: float
    ) -> dict[int, torch.Tensor]:
        h = self.model(src, tgt_in, hidden_only=True)
        return head_losses(self.model, h, tgt_out, heads, label_smoothing)
