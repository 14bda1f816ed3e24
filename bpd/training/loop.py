"""The training loop shared by every stage and task (base model, proposal heads, image models).

Token-bucket batches come from a factory ``batches(epoch, start) -> iterator`` (the epoch's batches from
index ``start`` on, so a resume skips the consumed ones without collating them) so that an epoch is a
deterministic function of (seed, epoch), which is what makes resume exact: the checkpoint stores the
epoch, the batch index inside it, the optimizer, the schedule and the RNG states.

Under DDP (see ``bpd.training.distributed``) rank r gets every world_size-th batch of the epoch's batch
list, which is the same list for every world size; so after b batches per rank the run has consumed the
first ``b * world_size`` batches of the epoch. The checkpoint stores the world size, and a run resumed on
another world size restarts at that same global position (``resume_position``).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from bpd.config import HeadsConfig, TrainConfig
from bpd.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, state_file
from bpd.training.continuation import continued_state
from bpd.training.distributed import all_reduce_sum
from bpd.training.losses import LossModule, combine, slot_loss, slot_scores
from bpd.training.noise import noisy_inputs

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training: its message says where training stopped, which checkpoint a re-run resumes
    from, and that the same command does it (entry points print it as the one line instead of a traceback)."""


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up then inverse-square-root decay (Vaswani et al.), as a multiplier of cfg.lr."""
    s = max(1, step)
    return min(s / max(1, cfg.warmup_steps), math.sqrt(max(1, cfg.warmup_steps) / s))


def trained_heads(model, heads: HeadsConfig | None) -> list[int]:
    """Which heads carry loss: p_1 alone for the base stage; p_1 is left out when it is frozen and exactly
    the base model."""
    if heads is None:
        return [0]
    first = 1 if (heads.training == "frozen" and model.heads.identity_p1) else 0
    return list(range(first, model.k))


def configure_params(model, cfg: TrainConfig, heads: HeadsConfig | None) -> list[dict]:
    """Freeze or scale parameter groups for the stage (``heads`` None: the base stage); returns optimizer
    parameter groups."""
    base = model.base_parameters()
    head_params = list(model.heads.parameters())
    if heads is None:
        return [{"params": base + head_params, "lr_scale": 1.0}]
    if heads.training == "frozen":
        for p in base:
            p.requires_grad_(False)
        return [{"params": head_params, "lr_scale": 1.0}]
    for p in model.parameters():
        p.requires_grad_(True)
    groups = [{"params": head_params, "lr_scale": 1.0}]
    if base:
        groups.append({"params": base, "lr_scale": cfg.base_lr_scale})
    return groups


def resume_position(batch_idx: int, saved_world: int, world: int, grad_accum: int) -> int:
    """Per-rank batch index to resume an epoch from, after a checkpoint written at ``saved_world`` processes.

    The checkpointed run had consumed the epoch's first ``batch_idx * saved_world`` batches. Resuming at
    ``world`` processes starts at the same global position rounded down to a whole optimizer step of
    ``world * grad_accum`` batches: exact when the global batch is fixed across world sizes
    (``dist.reference_world_size``); otherwise at most one global step's batches are seen twice.
    """
    if saved_world == world:
        return batch_idx
    return batch_idx * saved_world // (world * grad_accum) * grad_accum


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


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def train(
    model,
    batches: Callable[[int, int], Iterator[Batch]],
    cfg: TrainConfig,
    ckpt_path: str | Path,
    heads: HeadsConfig | None = None,
    seed: int = 0,
    resume: bool = True,
    dev_sets: dict[str, Callable[[], Iterable[Batch]]] | None = None,
    dev_score: Callable[[Any], dict[str, float]] | None = None,
    log: Callable[[dict[str, Any]], None] | None = None,
    device: str | torch.device = "cpu",
    meta: dict[str, Any] | None = None,
    progress: bool = True,
    ddp_model: torch.nn.Module | None = None,
    is_main: bool = True,
) -> dict[str, Any]:
    """Train ``model`` in place; checkpoints atomically to ``ckpt_path`` and resumes from it.

    ``heads`` None trains the base model (p_1 alone); a ``HeadsConfig`` trains the proposal heads, frozen or
    fine-tuned with the base, with its loss (mean or sampled) and p_1 weight. ``seed`` fixes initial RNG state.

    ``dev_score(model)`` (e.g. greedy dev BLEU: ``Task.dev_score``) is called every ``cfg.score_every``
    steps; its first value is "the score" that ``cfg.best_on = "score"`` keeps the best weights by (higher is
    better). Its values join the history as ``dev/<name>``: the learning curve the checkpoint keeps.

    ``ddp_model`` (``bpd.training.distributed.wrap_ddp(model, info)``: DDP around ``LossModule(model)``)
    computes the losses when given; then each rank weights its micro-batches by their share of the global
    token count times the world size (DDP averages over ranks), so N ranks x M micro-batches make exactly
    the step one process makes over the same N*M batches. Micro-batches before the last skip DDP's
    gradient all-reduce (``no_sync``). Only ``is_main`` writes checkpoints, logs and runs dev evaluation.
    """
    ckpt_path = Path(ckpt_path)
    option = "train" if heads is None else "heads_train (or train)"  # the config section errors name
    cfg.validate(option)
    stage = "base" if heads is None else "heads"
    sampled = heads is not None and heads.loss == "sampled"
    p1_weight = 1.0 if heads is None else heads.p1_weight
    model.to(device).train()
    world = 1
    if ddp_model is not None:
        if not isinstance(getattr(ddp_model, "module", None), LossModule):
            raise TypeError("ddp_model must wrap LossModule(model); build it with bpd.training.distributed.wrap_ddp.")
        world = torch.distributed.get_world_size()
    groups = configure_params(model, cfg, heads)
    opt = torch.optim.Adam(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-9, weight_decay=cfg.weight_decay)
    slots = trained_heads(model, heads)
    step, epoch, batch_idx, elapsed = 0, 0, 0, 0.0
    history: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    torch.manual_seed(seed)
    random.seed(seed)
    state_path = state_file(ckpt_path)
    st = None
    if resume and state_path.exists():
        try:
            st = load_checkpoint(state_path, device)
        except CheckpointError as e:  # a kill mid-write is impossible (atomic saves), but disks fail: set it aside
            bad = state_path.with_name(state_path.name + ".corrupt")
            if is_main:
                os.replace(state_path, bad)
                print(f"warning: {e} Moved it to {bad.name}; training this stage from the start.")
    if st is None and cfg.continue_from:
        expect = {"stage": stage, "model_config": model.config_dict(), "seed": seed, "meta": meta,
                  "heads_config": None if heads is None else asdict(heads)}
        st = continued_state(cfg.continue_from, cfg, expect, device, option)
        if is_main:
            print(f"continuing {cfg.continue_from} (step {st['step']}) as {ckpt_path.name}")
    saved = {"step": None}  # the step of the newest resume state on disk: what a re-run resumes from
    if st is not None:
        saved["step"] = st["step"] if state_path.exists() else None
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        step, epoch, batch_idx, elapsed = st["step"], st["epoch"], st["batch_idx"], st["elapsed"]
        batch_idx = resume_position(batch_idx, st.get("world_size", 1), world, cfg.grad_accum)
        history = st.get("history", [])
        best = st.get("best")
        _set_rng_state(st["rng"])
        if is_main:
            print(f"resuming {ckpt_path.name} from step {step} (epoch {epoch}, {elapsed / 60:.1f} min done)")
    if world > 1 and torch.distributed.get_rank() > 0:
        # Each rank draws its own dropout masks (torch RNG); the python RNG that samples heads stays shared.
        torch.manual_seed(seed + 1_000_003 * torch.distributed.get_rank() + step)
    fwd = ddp_model if ddp_model is not None else LossModule(model)  # DDP syncs gradients through its forward
    budget_s = None if cfg.max_minutes is None else cfg.max_minutes * 60
    device_type = torch.device(device).type

    def payload(final: bool) -> dict[str, Any]:
        p = {
            "model_config": model.config_dict(),
            "model": model.state_dict(),
            "train_config": asdict(cfg),
            "stage": stage,
            "heads_config": None if heads is None else asdict(heads),
            "seed": seed,
            "step": step,
            "epoch": epoch,
            "batch_idx": batch_idx,  # per rank: the epoch's first batch_idx * world_size batches are consumed
            "world_size": world,
            "elapsed": elapsed,
            "history": history,
            "meta": meta or {},
            "final": final,
            "stopped_by": stopped_by(),
        }
        if not final:
            p["last_weights"] = True  # the weights of ``step`` (a longer run continues from them), not the best
            p["optimizer"] = opt.state_dict()
            p["rng"] = _rng_state()
            p["best"] = best
        elif best is not None and cfg.best_on == "score":
            p["best_step"], p["best_dev_score"] = best["step"], -best["loss"]
        elif best is not None:
            p["best_step"], p["best_dev_loss"] = best["step"], best["loss"]
        return p

    def checkpoint(final: bool = False) -> None:
        if is_main:
            save_checkpoint(ckpt_path if final else state_path, payload(final))
            if not final:
                saved["step"] = step

    def interrupted() -> TrainingInterrupted:
        """Where Ctrl-C left the stage. The state of the step under way is not saved: it may be half-applied
        (inside the optimizer's update), while the last checkpoint is whole."""
        where = (f"last checkpoint {state_path} (step {saved['step']})" if saved["step"] is not None else
                 f"no checkpoint yet (one is written every {cfg.ckpt_every} steps)")
        return TrainingInterrupted(f"stopped {stage} training at step {step} of {cfg.max_steps}; {where}; run the "
                                   "same command to resume.")

    def stopped_by() -> str | None:
        """What ends the stage now: "steps" (the budget), "minutes" (the cap: the model then depends on the
        machine's speed, so rows record it), "patience" (early stopping), or None (not yet)."""
        if step >= cfg.max_steps:
            return "steps"
        if budget_s is not None and elapsed >= budget_s:
            return "minutes"
        # Only rank 0 evaluates, so early stopping is single-process only (a lone rank stopping would hang DDP).
        if world == 1 and cfg.patience is not None and best is not None and best["evals_since"] >= cfg.patience:
            return "patience"
        return None

    def done() -> bool:
        return stopped_by() is not None

    bar = tqdm(total=cfg.max_steps, initial=step, disable=not (progress and is_main), desc=f"train {stage}")
    last_loss = float("nan")
    try:  # Ctrl-C: one line saying where training stopped and how to resume, not a traceback
        while not done():
            it = batches(epoch, batch_idx)  # on resume: from where the checkpoint stopped inside the epoch
            exhausted = True
            micro: list[Batch] = []
            for batch in it:
                batch_idx += 1
                micro.append(batch)
                if len(micro) < cfg.grad_accum:
                    continue
                t0 = time.perf_counter()
                for g in opt.param_groups:
                    g["lr"] = cfg.lr * lr_at(step + 1, cfg) * g["lr_scale"]
                opt.zero_grad(set_to_none=True)
                chosen = [random.choice(slots)] if sampled else slots
                total = 0.0
                per_head: dict[int, float] = {}
                n_tok = sum(int((b[2] != model.pad_id).sum()) for b in micro)
                if world > 1:  # the global batch's token count: each rank weights by its share of it
                    n_tok = int(all_reduce_sum([n_tok])[0])
                for j, (src, tgt_in, tgt_out) in enumerate(micro):
                    src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
                    tgt_in = noisy_inputs(tgt_in, cfg.input_noise, model.pad_id)
                    # Micro-batches before the last accumulate locally; the last one's backward all-reduces.
                    sync = ddp_model.no_sync() if ddp_model is not None and j < len(micro) - 1 else nullcontext()
                    with sync:
                        with torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=cfg.bf16):
                            losses = fwd(src, tgt_in, tgt_out, chosen, cfg.label_smoothing)
                            # Weight micro-batches by their token share so accumulation equals one big batch
                            # (x world: DDP averages the ranks' gradients, and we want their token-weighted sum).
                            w = int((tgt_out != model.pad_id).sum()) / max(1, n_tok)
                            loss = combine(losses, p1_weight) * (w * world)
                        loss.backward()
                    total += float(loss.detach()) / world
                    for i, v in losses.items():
                        per_head[i] = per_head.get(i, 0.0) + float(v.detach()) * w
                micro = []
                if world > 1:  # log the global batch's loss, not rank 0's share of it
                    keys = sorted(per_head)
                    sums = all_reduce_sum([total, *(per_head[i] for i in keys)])
                    total, per_head = sums[0], dict(zip(keys, sums[1:]))
                if cfg.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_([p for g in groups for p in g["params"]], cfg.grad_clip)
                opt.step()
                step += 1
                dt = time.perf_counter() - t0
                if world > 1:  # the ranks' mean: every rank must reach the same verdict on train.max_minutes
                    dt = all_reduce_sum([dt])[0] / world
                elapsed += dt
                last_loss = total
                if budget_s is not None:  # the bar's total is the budget that will end the stage: steps or minutes
                    by_time = step + int(max(0.0, budget_s - elapsed) / max(1e-9, elapsed / max(1, step)))
                    if by_time < cfg.max_steps and bar.total != by_time:
                        bar.total = by_time
                        bar.set_description(f"train {stage} ({cfg.max_minutes:g} min cap)")
                bar.update(1)
                if step % cfg.log_every == 0:
                    bar.set_postfix(loss=f"{total:.3f}")
                    row = {"step": step, "train/loss": total, "lr": opt.param_groups[0]["lr"],
                           "elapsed_min": elapsed / 60}
                    row.update({f"train/loss_head{i + 1}": v for i, v in per_head.items()})
                    if log and is_main:
                        log(row)
                evals = bool(dev_sets) and step % cfg.eval_every == 0
                scores = dev_score is not None and cfg.score_every > 0 and step % cfg.score_every == 0
                if is_main and (evals or scores):  # not counted as training time
                    row = {"step": step}
                    for name, make in (dev_sets or {}).items() if evals else ():
                        for key, v in evaluate_heads(model, make(), list(range(model.k)), device, cfg.bf16).items():
                            row[f"{name}/{key}"] = v
                    if scores:
                        scored = dev_score(model)
                        row.update({f"dev/{k}": v for k, v in scored.items()})
                        row["dev/score"] = next(iter(scored.values()))
                    history.append(row)
                    if cfg.keep_best:
                        if cfg.best_on == "score":  # lower is better below: the negated score
                            metric = -row["dev/score"] if "dev/score" in row else None
                        else:
                            metric = next((v for k, v in row.items() if k.endswith("/loss_head1")), None)
                        if metric is not None and (best is None or metric < best["loss"]):
                            best = {
                                "loss": metric,
                                "step": step,
                                "evals_since": 0,
                                "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
                            }
                        elif metric is not None:
                            best["evals_since"] += 1
                    if is_main and progress:
                        tqdm.write(f"step {step}: " + " ".join(f"{k}={v:.3f}" for k, v in row.items() if k != "step"))
                    if log and is_main:
                        log(row)
                if step % cfg.ckpt_every == 0:
                    checkpoint()
                if done():
                    exhausted = False
                    break
            if exhausted:
                epoch, batch_idx = epoch + 1, 0
            if batch_idx == 0 and exhausted and step == 0:
                raise RuntimeError("the training set produced no batches; check the data folder and max_tokens.")
    except KeyboardInterrupt:
        bar.close()
        raise interrupted() from None
    bar.close()
    if step % cfg.ckpt_every:  # the state where training stopped, before the best weights replace the last ones
        checkpoint()
    if best is not None:
        model.load_state_dict(best["state"])
        if is_main:
            what = f"dev score {-best['loss']:.3f}" if cfg.best_on == "score" else f"dev loss {best['loss']:.3f}"
            print(f"keeping the best dev checkpoint: step {best['step']} ({what})")
    checkpoint(final=True)
    return {"step": step, "epoch": epoch, "elapsed_min": elapsed / 60, "last_loss": last_loss, "history": history,
            "stopped_by": stopped_by()}
