"""One optimizer step: the learning rate, forward and backward over the step's micro-batches (gradient
accumulation), clipping and the optimizer's update."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from bpd.config import TrainConfig
from bpd.training.losses import combine, p1_anchor
from bpd.training.noise import noisy_inputs
from bpd.training.run import Run

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up then inverse-square-root decay (Vaswani et al.), as a multiplier of cfg.lr."""
    s = max(1, step)
    return min(s / max(1, cfg.warmup_steps), math.sqrt(max(1, cfg.warmup_steps) / s))


@dataclass
class StepLosses:
    """A step's loss over its whole (global) batch, and each trained slot's share of it."""

    total: float
    per_head: dict[int, float]


def _backward(
    run: Run, batch: Batch, chosen: list[int], n_tok: int, last: bool
) -> tuple[torch.Tensor, dict[int, torch.Tensor], float]:
    """Forward and backward of one micro-batch, its loss weighted by its token share ``w`` of the global batch
    of ``n_tok`` tokens so that accumulation equals one big batch (x world: DDP averages the ranks' gradients,
    and we want their token-weighted sum). Returns the weighted loss, the per-slot losses and ``w``."""
    cfg, model, world = run.cfg, run.model, run.ranks.world
    src, tgt_in, tgt_out = (t.to(run.device) for t in batch)
    tgt_in = noisy_inputs(tgt_in, cfg.input_noise, model.pad_id)
    with run.ranks.accumulating(last):
        with torch.autocast(device_type=torch.device(run.device).type, dtype=torch.bfloat16, enabled=cfg.bf16):
            # p_1 alone is anchored: a step that samples a proposal slot has no p_1 loss to add it to.
            anchor = None if run.anchor_model is None or 0 not in chosen else \
                p1_anchor(run.anchor_model, src, tgt_in, tgt_out, run.p1_distill)
            losses = run.loss_module(src, tgt_in, tgt_out, chosen, run.smoothing, run.soft_targets, anchor)
            w = int((tgt_out != model.pad_id).sum()) / max(1, n_tok)
            loss = combine(losses, run.p1_weight) * (w * world)
        loss.backward()
    return loss, losses, w


def optimizer_step(run: Run, micro: list[Batch], step: int) -> StepLosses:
    """Step ``step + 1`` over the micro-batches ``micro`` (``cfg.grad_accum`` of them on each rank)."""
    cfg, opt, world = run.cfg, run.opt, run.ranks.world
    for g in opt.param_groups:
        g["lr"] = cfg.lr * lr_at(step + 1, cfg) * g["lr_scale"]
    opt.zero_grad(set_to_none=True)
    chosen = [random.choice(run.slots)] if run.sampled else run.slots
    n_tok = run.ranks.global_tokens(sum(int((b[2] != run.model.pad_id).sum()) for b in micro))
    total = 0.0
    per_head: dict[int, float] = {}
    for j, batch in enumerate(micro):
        loss, losses, w = _backward(run, batch, chosen, n_tok, last=j == len(micro) - 1)
        total += float(loss.detach()) / world
        for i, v in losses.items():
            per_head[i] = per_head.get(i, 0.0) + float(v.detach()) * w
    total, per_head = run.ranks.global_losses(total, per_head)
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_([p for g in run.groups for p in g["params"]], cfg.grad_clip)
    opt.step()
    return StepLosses(total, per_head)
