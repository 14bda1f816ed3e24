"""Losses over the k proposal heads.

Head i at position t predicts the target i positions further ahead: ``tgt_out[:, t + i]``. The
paper picks one head uniformly at random per minibatch (an unbiased estimate of the mean that only
materialises one head's logits); the mean over all heads is the natural, lower-variance alternative.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def shifted_targets(tgt_out: torch.Tensor, i: int, pad_id: int) -> torch.Tensor:
    """Targets of head i: tgt_out shifted left by i, padded at the end."""
    if i == 0:
        return tgt_out
    pad = torch.full_like(tgt_out[:, :i], pad_id)
    return torch.cat([tgt_out[:, i:], pad], dim=1)


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
    for i in heads:
        if i == 0:
            logits = model.heads.base_logits(h)
        else:
            logits = model.heads.output(model.heads._slots(h, i + 1, start=i)[..., 0, :])
        tgt = shifted_targets(tgt_out, i, pad)
        out[i] = F.cross_entropy(
            logits.flatten(0, 1).float(), tgt.flatten(), ignore_index=pad, label_smoothing=label_smoothing
        )
    return out


def combine(losses: dict[int, torch.Tensor]) -> torch.Tensor:
    return torch.stack(list(losses.values())).mean()
