"""Dev evaluation while a stage trains: per-head loss and accuracy on dev sets, the task's dev score (e.g.
greedy BLEU), and keeping the weights of the best evaluation (``train.keep_best``, ``train.best_on``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from bpd.config import TrainConfig
from bpd.training.losses import slot_loss, slot_scores

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
DevSets = dict[str, Callable[[], Iterable[Batch]]]
DevScore = Callable[[Any], dict[str, float]]


@torch.no_grad()
def evaluate_heads(model, batches: Iterable[Batch], heads: list[int], device, bf16: bool = False) -> dict[str, float]:
    """Per-head dev loss and top-1 accuracy against the given targets (references or base outputs)."""
    was_training = model.training
    model.eval()
    tot_loss = {i: 0.0 for i in heads}
    correct = {i: 0 for i in heads}
    count = {i: 0 for i in heads}
    n_batches = 0
    for src, tgt_in, tgt_out in batches:
        src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            h, source = model.teacher_forced(src, tgt_in)
            # The loss and the accuracy from one projection, one slot's logits at a time. A slot trained among
            # heads.loss_ids guesses among them: a target outside them (IGNORE) counts as missed.
            for i, logits, tgt in slot_scores(model, h, tgt_out, heads, source=source):
                correct[i] += int((logits.argmax(-1) == tgt).sum())
                count[i] += len(tgt)
                tot_loss[i] += float(slot_loss(logits, tgt))
        n_batches += 1
    model.train(was_training)
    out = {}
    for i in heads:
        out[f"loss_head{i + 1}"] = tot_loss[i] / max(1, n_batches)
        out[f"acc_head{i + 1}"] = correct[i] / max(1, count[i])
    return out


@dataclass(frozen=True)
class DevEvaluation:
    """What a stage evaluates on dev while it trains: ``sets`` (name -> batches), each set's per-head loss and
    accuracy every ``eval_every`` steps; ``score(model)`` (e.g. greedy dev BLEU: ``Task.dev_score``) every
    ``score_every`` steps, whose first value is ``dev/score``."""

    sets: DevSets | None = None
    score: DevScore | None = None

    def row(self, model, step: int, cfg: TrainConfig, device) -> dict[str, Any] | None:
        """The evaluations due at ``step`` as one row; None when none is due."""
        evals = bool(self.sets) and step % cfg.eval_every == 0
        scores = self.score is not None and cfg.score_every > 0 and step % cfg.score_every == 0
        if not (evals or scores):
            return None
        row: dict[str, Any] = {"step": step}
        for name, make in (self.sets or {}).items() if evals else ():
            for key, v in evaluate_heads(model, make(), list(range(model.k)), device, cfg.bf16).items():
                row[f"{name}/{key}"] = v
        if scores:
            scored = self.score(model)
            row.update({f"dev/{k}": v for k, v in scored.items()})
            row["dev/score"] = next(iter(scored.values()))
        return row


def kept_best(best: dict[str, Any] | None, row: dict[str, Any], model, cfg: TrainConfig) -> dict[str, Any] | None:
    """The best evaluation after dev row ``row``: its metric (lower is better: the dev loss of p_1, or the
    negated score with ``best_on = "score"``), step, weights, and how many evaluations have not beaten it."""
    if cfg.best_on == "score":
        metric = -row["dev/score"] if "dev/score" in row else None
    else:
        metric = next((v for k, v in row.items() if k.endswith("/loss_head1")), None)
    if metric is None:
        return best
    if best is None or metric < best["loss"]:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return {"loss": metric, "step": row["step"], "evals_since": 0, "state": state}
    best["evals_since"] += 1
    return best
