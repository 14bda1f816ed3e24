"""Losses over the k proposal heads.

Head i at position t predicts the target i positions further ahead: ``tgt_out[:, t + i]``. The
paper picks one head uniformly at random per minibatch (an unbiased estimate of the mean that only
materialises one head's logits); the mean over all heads is the natural, lower-variance alternative.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100  # cross_entropy's ignore_index for targets outside a restricted slot vocabulary
# What smooths a hard target: uniform label smoothing's share, or each token's target row (``ordinal_table``).
Smoothing = float | torch.Tensor


def shifted_targets(tgt_out: torch.Tensor, i: int, pad_id: int) -> torch.Tensor:
    """Targets of head i: tgt_out shifted left by i, padded at the end."""
    if i == 0:
        return tgt_out
    pad = torch.full_like(tgt_out[:, :i], pad_id)
    return torch.cat([tgt_out[:, i:], pad], dim=1)


def teacher_tokens(tgt_out: torch.Tensor, k: int, pad_id: int) -> torch.Tensor:
    """(B, T, k-1): at position t, the tokens recurrent slots 1..k-1 read, i.e. tgt_out[t .. t+k-2]."""
    return torch.stack([shifted_targets(tgt_out, j, pad_id) for j in range(max(1, k - 1))], dim=-1)


def slot_scores(
    model, h: torch.Tensor, tgt_out: torch.Tensor, heads: list[int], every_position: bool = False, source=None,
    soft: bool = False,
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """``(head, logits, targets)`` of each requested head (index 0 = p_1) from decoder states ``h`` (B, T, d),
    at the positions whose target is not padding only: a far head has nothing to predict in the last i
    positions of a sentence, and neither the recurrent chain nor the vocabulary projection is computed there
    (a quarter of a proposal slot's work on the embedded corpus at k = 8). ``targets`` index ``logits``' last
    dimension: token ids, or for a slot trained among ``heads.loss_ids`` positions among them (``IGNORE``
    for a token outside them, which such a slot could never propose). ``every_position`` computes every slot
    everywhere and drops the padding after projecting: the same losses, the earlier cost
    (``bench/train_step.py`` times both). ``source``: the batch's input as heads that attend to it read it
    (``Transformer.teacher_forced``). ``soft`` (``heads.soft_targets``): a proposal slot's targets are instead
    p_1's distribution at the position the slot guesses (``soft_targets``), rows of probabilities over the
    slot's logits."""
    pad, top = model.pad_id, max(heads)
    targets = torch.stack([shifted_targets(tgt_out, i, pad).flatten() for i in range(top + 1)], dim=1)
    # Alive for head i: the target i tokens ahead is in the sentence. Cumulative, so each recurrent slot's
    # positions are a subset of the previous slot's (right padding already makes it so).
    alive = (targets != pad).cummin(dim=1).values
    # Heads whose slots read the previous slot's token are fed the targets (teacher forcing): at position t,
    # slot j + 1 reads tgt_out[t + j] (``teacher_tokens``).
    teacher = targets[:, : max(1, top)]
    index = loss_index(model.heads.loss_ids, model.heads.output.weight.shape[0], pad)
    if source is not None:
        source = source.per_position(h.shape[1])

    flat = h.flatten(0, 1)

    def among(i: int, tgt: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        tgt = tgt if i == 0 or index is None else index[tgt]
        return soft_targets(model, flat, rows, i, tgt) if soft and i > 0 else tgt

    if every_position:
        for i, x, _ in model.heads.slot_states(flat, heads, teacher, source=source):
            rows = alive[:, i].nonzero()[:, 0]
            yield i, model.heads.slot_output(i, x)[rows], among(i, targets[rows, i], rows)
        return
    for i, x, rows in model.heads.slot_states(flat, heads, teacher, alive, source):
        yield i, model.heads.slot_output(i, x), among(i, targets[rows, i], rows)


def soft_targets(model, flat: torch.Tensor, rows: torch.Tensor, i: int, tgt: torch.Tensor) -> torch.Tensor:
    """Slot ``i``'s soft targets at the flat positions ``rows`` of the decoder states ``flat`` (B*T, d): p_1's
    distribution over the slot's vocabulary at position t + i, the one that predicts the token slot i guesses
    at t (the same sentence: ``rows`` are where that token lies inside it), under the current weights and
    without gradient (Medusa-2's self-distillation). Where the hard target ``tgt`` is ``IGNORE`` (a token the
    slot could never propose) the row is zero and carries no loss, as with hard targets."""
    with torch.no_grad():
        q = F.softmax(model.heads.slot_projection(flat[rows + i]).float(), dim=-1)
    return q * (tgt != IGNORE).unsqueeze(-1)


def head_losses(
    model,
    h: torch.Tensor,
    tgt_out: torch.Tensor,
    heads: list[int],
    label_smoothing: Smoothing = 0.0,
    every_position: bool = False,
    source=None,
    soft: bool = False,
) -> dict[int, torch.Tensor]:
    """Cross-entropy of each requested head (index 0 = p_1) from decoder states ``h`` (B, T, d): the mean over
    its non-padding targets (among ``heads.loss_ids`` for a proposal slot, when set; against p_1's
    distribution there with ``soft``)."""
    return {i: slot_loss(logits, tgt, label_smoothing)
            for i, logits, tgt in slot_scores(model, h, tgt_out, heads, every_position, source, soft)}


def anchored(losses: dict[int, torch.Tensor], model, h: torch.Tensor, tgt_out: torch.Tensor, anchor: Anchor | None,
             source=None) -> dict[int, torch.Tensor]:
    """``losses`` with p_1's (head 0, when there) also counting its weighted KL divergence from ``anchor``'s
    distributions (``p1_anchor``; None: unchanged), from p_1's logits at the same positions."""
    if anchor is None or 0 not in losses:
        return losses
    (_, logits, _), = slot_scores(model, h, tgt_out, [0], source=source)
    return {**losses, 0: losses[0] + anchor.weight * anchor_kl(anchor.log_probs, logits)}


@dataclass(frozen=True)
class Anchor:
    """The frozen base model's p_1 log-probabilities (N, V) at a batch's non-padding targets, in ``slot_scores``'
    order for p_1, and the weight of p_1's KL divergence from them (``heads.p1_distill``)."""

    log_probs: torch.Tensor
    weight: float


def p1_anchor(base, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, weight: float) -> Anchor:
    """``base``'s p_1 log-probabilities at the non-padding targets of ``tgt_out`` (teacher forced on ``tgt_in``),
    without gradient: the distributions a fine-tuned p_1 is held near."""
    with torch.no_grad():
        h, _ = base.teacher_forced(src, tgt_in)
        keep = (tgt_out != base.pad_id).flatten()
        return Anchor(F.log_softmax(base.heads.base_logits(h.flatten(0, 1)[keep]).float(), dim=-1), weight)


def anchor_kl(anchor: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Mean KL(anchor || softmax(logits)) over the rows: zero where p_1 still predicts as the base did."""
    kl = F.kl_div(F.log_softmax(logits.float(), dim=-1), anchor, log_target=True, reduction="sum")
    return kl / max(1, len(anchor))


def slot_loss(logits: torch.Tensor, tgt: torch.Tensor, label_smoothing: Smoothing = 0.0) -> torch.Tensor:
    """Mean cross-entropy of one head's ``slot_scores`` over its targets other than ``IGNORE`` (token
    indices), or against soft targets (rows of probabilities, ``soft_targets``; all-zero rows left out).
    ``label_smoothing``: uniform smoothing's share, or a table of each token's target row (``ordinal_table``)."""
    # Sum, then divide by the count: a batch of short sentences has no target i positions ahead for a far
    # head, and the plain mean would then log NaN (its gradient is zero either way).
    if isinstance(label_smoothing, torch.Tensor) and not tgt.is_floating_point():
        keep = tgt != IGNORE
        tgt, logits = label_smoothing[tgt[keep]], logits[keep]
    if tgt.is_floating_point():
        ce = -(tgt * F.log_softmax(logits.float(), dim=-1)).sum()
        return ce / (tgt.sum(-1) > 0).sum().clamp(min=1)
    ce = F.cross_entropy(logits.float(), tgt, ignore_index=IGNORE, label_smoothing=label_smoothing, reduction="sum")
    return ce / (tgt != IGNORE).sum().clamp(min=1)


def ordinal_table(vocab: int, offset: int, n_values: int, sigma: float, label_smoothing: float) -> torch.Tensor:
    """(vocab, vocab): row t is the training target of token t when tokens ``offset .. offset + n_values - 1``
    are ordered values (an image's intensities): a Gaussian of standard deviation ``sigma`` (in values) around
    t's value, cut to the value range and renormalised, instead of the one-hot row, so that a near miss costs
    less than a far one; other tokens keep their one-hot row. Uniform ``label_smoothing`` is mixed in as
    ``F.cross_entropy`` does it (``(1 - eps) * row + eps / vocab``), so ``sigma`` 0 is the plain smoothed loss."""
    table = torch.eye(vocab)
    if sigma > 0:
        v = torch.arange(n_values, dtype=torch.float64)
        g = torch.exp(-0.5 * ((v[:, None] - v[None, :]) / sigma) ** 2)
        table[offset:offset + n_values, offset:offset + n_values] = (g / g.sum(1, keepdim=True)).float()
    return (1 - label_smoothing) * table + label_smoothing / vocab


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
        self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, heads: list[int],
        label_smoothing: Smoothing, soft: bool = False, anchor: Anchor | None = None,
    ) -> dict[int, torch.Tensor]:
        h, source = self.model.teacher_forced(src, tgt_in)
        losses = head_losses(self.model, h, tgt_out, heads, label_smoothing, source=source, soft=soft)
        return anchored(losses, self.model, h, tgt_out, anchor, source)
