"""The training loop shared by every stage and task (base model, proposal heads, image models).

Token-bucket batches come from a factory ``batches(epoch) -> iterator`` so that an epoch is a
deterministic function of (seed, epoch), which is what makes resume exact: the checkpoint stores the
epoch, the batch index inside it, the optimizer, the schedule and the RNG states.

Under DDP (see ``bpd.training.distributed``) rank r gets every world_size-th batch of the epoch's batch
list, which is the same list for every world size; so after b batches per rank the run has consumed the
first ``b * world_size`` batches of the epoch. The checkpoint stores the world size, and a run resumed on
another world size restarts at that same global position (``resume_position``).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from bpd.training.checkpoint import load_checkpoint, save_checkpoint
from bpd.training.distributed import all_reduce_sum
from bpd.training.losses import combine, head_losses, shifted_targets, teacher_tokens

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass
class TrainConfig:
    stage: str = "base"  # base | heads
    heads_training: str = "frozen"  # frozen | finetune (stage=heads)
    heads_loss: str = "mean"  # mean | sampled (paper: one random head per batch)
    p1_weight: float = 1.0  # mean loss: weight of p_1 relative to one proposal head (fine-tuning)
    lr: float = 1e-3  # peak learning rate
    base_lr_scale: float = 1.0  # fine-tuning: base parameters learn at lr * base_lr_scale
    warmup_steps: int = 400
    betas: tuple[float, float] = (0.9, 0.997)  # tensor2tensor's Adam beta2
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    label_smoothing: float = 0.1
    max_steps: int = 10_000
    max_minutes: float | None = None  # wall-clock budget; whichever of steps/minutes comes first
    grad_accum: int = 1
    bf16: bool = False
    eval_every: int = 200
    ckpt_every: int = 200
    seed: int = 0
    log_every: int = 20
    # Early stopping on p_1's dev loss (first dev set): the final checkpoint holds the best weights, and
    # training stops after `patience` evaluations without improvement. Short CPU budgets train without
    # dropout, which overfits the small embedded corpus within minutes.
    keep_best: bool = False
    patience: int | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stage not in ("base", "heads"):
            raise ValueError(f"unknown training stage {self.stage!r}; use stage=base or stage=heads.")
        if self.heads_training not in ("frozen", "finetune"):
            raise ValueError(f"unknown heads.training {self.heads_training!r}; use frozen or finetune.")
        if self.heads_loss not in ("mean", "sampled"):
            raise ValueError(f"unknown heads.loss {self.heads_loss!r}; use mean or sampled.")
        if self.p1_weight <= 0:
            raise ValueError(f"heads.p1_weight must be > 0 (got {self.p1_weight}); 1 is the plain mean.")
        # A run that takes no step would still write a "finished" checkpoint that later stages build on.
        where = "train" if self.stage == "base" else "heads_train (or train)"
        if self.max_steps < 1:
            raise ValueError(f"{where}.max_steps must be >= 1 (got {self.max_steps}).")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ValueError(f"{where}.max_minutes must be > 0, or null for no time cap (got {self.max_minutes}).")
        if self.lr <= 0:
            raise ValueError(f"{where}.lr must be > 0 (got {self.lr}).")
        if self.warmup_steps < 0 or self.grad_accum < 1:
            raise ValueError(f"{where}.warmup_steps must be >= 0 and grad_accum >= 1 "
                             f"(got {self.warmup_steps} and {self.grad_accum}).")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up then inverse-square-root decay (Vaswani et al.), as a multiplier of cfg.lr."""
    s = max(1, step)
    return min(s / max(1, cfg.warmup_steps), math.sqrt(max(1, cfg.warmup_steps) / s))


def trained_heads(model, cfg: TrainConfig) -> list[int]:
    """Which heads carry loss: p_1 is left out when it is frozen and exactly the base model."""
    if cfg.stage == "base":
        return [0]
    first = 1 if (cfg.heads_training == "frozen" and model.heads.identity_p1) else 0
    return list(range(first, model.k))


def configure_params(model, cfg: TrainConfig) -> list[dict]:
    """Freeze or scale parameter groups for the stage; returns optimizer parameter groups."""
    base = model.base_parameters()
    heads = list(model.heads.parameters())
    if cfg.stage == "base":
        return [{"params": base + heads, "lr_scale": 1.0}]
    if cfg.heads_training == "frozen":
        for p in base:
            p.requires_grad_(False)
        return [{"params": heads, "lr_scale": 1.0}]
    for p in model.parameters():
        p.requires_grad_(True)
    groups = [{"params": heads, "lr_scale": 1.0}]
    if base:
        groups.append({"params": base, "lr_scale": cfg.base_lr_scale})
    return groups


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
            h = model.decode(tgt_in, model.encode(src))
            losses = head_losses(model, h, tgt_out, heads)
            logits = model.heads(h, tokens=teacher_tokens(tgt_out, model.k, model.pad_id))
        for i in heads:
            tgt = shifted_targets(tgt_out, i, model.pad_id)
            mask = tgt != model.pad_id
            pred = logits[:, :, i].argmax(-1)
            correct[i] += int(((pred == tgt) & mask).sum())
            count[i] += int(mask.sum())
            tot_loss[i] += float(losses[i])
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
    batches: Callable[[int], Iterator[Batch]],
    cfg: TrainConfig,
    ckpt_path: str | Path,
    resume: bool = True,
    dev_sets: dict[str, Callable[[], Iterable[Batch]]] | None = None,
    log: Callable[[dict[str, Any]], None] | None = None,
    device: str | torch.device = "cpu",
    meta: dict[str, Any] | None = None,
    progress: bool = True,
    ddp_model: torch.nn.Module | None = None,
    is_main: bool = True,
) -> dict[str, Any]:
    """Train ``model`` in place; checkpoints atomically to ``ckpt_path`` and resumes from it.

    ``ddp_model`` (``bpd.training.distributed.wrap_ddp(model, info)``: DDP around ``LossModule(model)``)
    computes the losses when given; then each rank weights its micro-batches by their share of the global
    token count times the world size (DDP averages over ranks), so N ranks x M micro-batches make exactly
    the step one process makes over the same N*M batches. Micro-batches before the last skip DDP's
    gradient all-reduce (``no_sync``). Only ``is_main`` writes checkpoints, logs and runs dev evaluation.
    """
    ckpt_path = Path(ckpt_path)
    model.to(device).train()
    world = 1
    if ddp_model is not None:
        if not isinstance(getattr(ddp_model, "module", None), LossModule):
            raise TypeError("ddp_model must wrap LossModule(model); build it with bpd.training.distributed.wrap_ddp.")
        world = torch.distributed.get_world_size()
    groups = configure_params(model, cfg)
    opt = torch.optim.Adam(groups, lr=cfg.lr, betas=cfg.betas, eps=1e-9, weight_decay=cfg.weight_decay)
    heads = trained_heads(model, cfg)
    step, epoch, batch_idx, elapsed = 0, 0, 0, 0.0
    history: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    state_path = ckpt_path.with_name(ckpt_path.stem + ".state.pt")
    if resume and state_path.exists():
        st = load_checkpoint(state_path, device)
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
        torch.manual_seed(cfg.seed + 1_000_003 * torch.distributed.get_rank() + step)
    fwd = ddp_model if ddp_model is not None else LossModule(model)  # DDP syncs gradients through its forward
    budget_s = None if cfg.max_minutes is None else cfg.max_minutes * 60
    device_type = torch.device(device).type

    def payload(final: bool) -> dict[str, Any]:
        p = {
            "model_config": model.config_dict(),
            "model": model.state_dict(),
            "train_config": asdict(cfg),
            "step": step,
            "epoch": epoch,
            "batch_idx": batch_idx,  # per rank: the epoch's first batch_idx * world_size batches are consumed
            "world_size": world,
            "elapsed": elapsed,
            "history": history,
            "meta": meta or {},
            "final": final,
        }
        if not final:
            p["optimizer"] = opt.state_dict()
            p["rng"] = _rng_state()
            p["best"] = best
        elif best is not None:
            p["best_step"], p["best_dev_loss"] = best["step"], best["loss"]
        return p

    def checkpoint(final: bool = False) -> None:
        if is_main:
            save_checkpoint(state_path, payload(False))
            if final:
                save_checkpoint(ckpt_path, payload(True))

    def done() -> bool:
        # Only rank 0 evaluates, so early stopping is single-process only (a lone rank stopping would hang DDP).
        stalled = world == 1 and cfg.patience is not None and best is not None and best["evals_since"] >= cfg.patience
        return step >= cfg.max_steps or (budget_s is not None and elapsed >= budget_s) or stalled

    bar = tqdm(total=cfg.max_steps, initial=step, disable=not (progress and is_main), desc=f"train {cfg.stage}")
    last_loss = float("nan")
    while not done():
        it = batches(epoch)
        for _ in range(batch_idx):  # fast-forward inside the epoch on resume
            next(it, None)
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
            chosen = [random.choice(heads)] if cfg.heads_loss == "sampled" else heads
            total = 0.0
            per_head: dict[int, float] = {}
            n_tok = sum(int((b[2] != model.pad_id).sum()) for b in micro)
            if world > 1:  # the global batch's token count: each rank weights by its share of it
                n_tok = int(all_reduce_sum([n_tok])[0])
            for j, (src, tgt_in, tgt_out) in enumerate(micro):
                src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
                # Micro-batches before the last accumulate locally; the last one's backward all-reduces.
                sync = ddp_model.no_sync() if ddp_model is not None and j < len(micro) - 1 else nullcontext()
                with sync:
                    with torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=cfg.bf16):
                        losses = fwd(src, tgt_in, tgt_out, chosen, cfg.label_smoothing)
                        # Weight micro-batches by their token share so accumulation equals one big batch
                        # (x world: DDP averages the ranks' gradients, and we want their token-weighted sum).
                        w = int((tgt_out != model.pad_id).sum()) / max(1, n_tok)
                        loss = combine(losses, cfg.p1_weight) * (w * world)
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
            bar.update(1)
            if step % cfg.log_every == 0:
                bar.set_postfix(loss=f"{total:.3f}")
                row = {"step": step, "train/loss": total, "lr": opt.param_groups[0]["lr"], "elapsed_min": elapsed / 60}
                row.update({f"train/loss_head{i + 1}": v for i, v in per_head.items()})
                if log and is_main:
                    log(row)
            if dev_sets and is_main and step % cfg.eval_every == 0:  # not counted as training time
                row = {"step": step}
                for name, make in dev_sets.items():
                    for key, v in evaluate_heads(model, make(), list(range(model.k)), device, cfg.bf16).items():
                        row[f"{name}/{key}"] = v
                history.append(row)
                if cfg.keep_best:
                    metric = next((v for k, v in row.items() if k.endswith("/loss_head1")), None)
                    if metric is not None and (best is None or metric < best["loss"]):
                        best = {
                            "loss": metric,
                            "step": step,
                            "evals_since": 0,
                            "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
                        }
                    elif best is not None:
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
    bar.close()
    if best is not None:
        model.load_state_dict(best["state"])
        if is_main:
            print(f"keeping the best dev checkpoint: step {best['step']} (dev loss {best['loss']:.3f})")
    checkpoint(final=True)
    return {"step": step, "epoch": epoch, "elapsed_min": elapsed / 60, "last_loss": last_loss, "history": history}
