"""The training loop shared by every stage and task (base model, proposal heads, image models).

Token-bucket batches come from a factory ``batches(epoch, start) -> iterator`` (the epoch's batches from
index ``start`` on, so a resume skips the consumed ones without collating them) so that an epoch is a
deterministic function of (seed, epoch), which is what makes resume exact: the checkpoint stores the
epoch, the batch index inside it, the optimizer, the schedule and the RNG states.

Under DDP (see ``bpd.training.distributed``) rank r gets every world_size-th batch of the epoch's batch
list, which is the same list for every world size; so after b batches per rank the run has consumed the
first ``b * world_size`` batches of the epoch. The checkpoint stores the world size, and a run resumed on
another world size restarts at that same global position (``bpd.training.resume.resume_position``).

The loop is flat, nanoGPT-style, over small parts that each own one concern: ``run`` (what stays fixed and
where the run stands), ``resume`` (checkpoint contents, resuming and continuing), ``step`` (one optimizer
step), ``evaluation`` (dev rows, the best weights), ``ranks`` (what DDP changes) and ``report`` (bar, rows).
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bpd.config import HeadsConfig, TrainConfig
from bpd.training.evaluation import DevEvaluation, kept_best
from bpd.training.losses import Smoothing, ordinal_table
from bpd.training.on_request import CheckpointRequests
from bpd.training.ranks import Ranks
from bpd.training.report import Reporter
from bpd.training.resume import resumed_state, save
from bpd.training.run import Run, RunState, config_section, stopped_by
from bpd.training.step import Batch, StepLosses, optimizer_step


@dataclass(frozen=True)
class TrainOutput:
    """What a stage's training leaves and reports: its final checkpoint at ``path`` (the resume state beside it,
    which a run resumes from unless ``resume`` is false) with ``meta`` recorded in it, its rows sent to ``log``
    (e.g. a W&B run's), and a progress bar unless ``progress`` is false."""

    path: str | Path
    resume: bool = True
    meta: dict[str, Any] | None = None
    log: Callable[[dict[str, Any]], None] | None = None
    progress: bool = True


@dataclass(frozen=True)
class Placement:
    """Where a stage trains: its device and, under DDP, ``ddp_model`` (``bpd.training.distributed.wrap_ddp``:
    DDP around ``LossModule(model)``) and whether this process is rank 0 (``is_main``), which alone writes
    checkpoints, logs and runs dev evaluation."""

    device: str | torch.device = "cpu"
    ddp_model: torch.nn.Module | None = None
    is_main: bool = True


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training: its message says where training stopped, which checkpoint a re-run resumes
    from, and that the same command does it (entry points print it as the one line instead of a traceback)."""


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
    for p in base + head_params:  # not what the model keeps frozen for good (an image model's fitted upsampler)
        p.requires_grad_(True)
    groups = [{"params": head_params, "lr_scale": 1.0}]
    if base:
        groups.append({"params": base, "lr_scale": cfg.base_lr_scale})
    return groups


def _prepare(model, cfg: TrainConfig, heads: HeadsConfig | None, seed: int, out: TrainOutput, dev: DevEvaluation,
             place: Placement) -> Run:
    """Check the options, put the model on its device in training mode, freeze what the stage freezes and
    build the optimizer."""
    cfg.validate(config_section(heads))
    smoothing: Smoothing = cfg.label_smoothing
    if cfg.ordinal_sigma > 0:
        ordinal = model.ordinal_values
        if ordinal is None or model.heads.loss_ids is not None:
            raise ValueError(f"{config_section(heads)}.ordinal_sigma spreads targets over ordered token values (an "
                             "image model's intensities, every slot over the whole vocabulary); set it to 0 here.")
        smoothing = ordinal_table(model.heads.output.weight.shape[0], *ordinal, cfg.ordinal_sigma,
                                  cfg.label_smoothing).to(place.device)
    model.to(place.device).train()
    # Copied before a resume loads the run's own weights, so a resumed run is anchored to the same base.
    anchor = frozen_copy(model) if heads is not None and heads.p1_distill > 0 else None
    ranks = Ranks.of(place.ddp_model)
    groups = configure_params(model, cfg, heads)
    opt = torch.optim.Adam(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-9, weight_decay=cfg.weight_decay)
    return Run(
        model=model,
        cfg=cfg,
        heads=heads,
        seed=seed,
        meta=out.meta,
        ckpt_path=Path(out.path),
        device=place.device,
        is_main=place.is_main,
        ranks=ranks,
        loss_module=ranks.loss_module(model),
        groups=groups,
        opt=opt,
        slots=trained_heads(model, heads),
        dev=dev,
        smoothing=smoothing,
        anchor_model=anchor,
    )


def frozen_copy(model) -> torch.nn.Module:
    """``model`` as it is now, in eval mode (no dropout: the same target distributions every step) and without
    gradients: the base a fine-tuned p_1 is held near (``heads.p1_distill``)."""
    anchor = copy.deepcopy(model).eval()
    for p in anchor.parameters():
        p.requires_grad_(False)
    return anchor


def train(
    model,
    batches: Callable[[int, int], Iterator[Batch]],
    cfg: TrainConfig,
    out: TrainOutput | str | Path,
    heads: HeadsConfig | None = None,
    seed: int = 0,
    dev: DevEvaluation | None = None,
    place: Placement | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place; checkpoints atomically to ``out`` (a ``TrainOutput``, or its path alone) and
    resumes from it.

    ``heads`` None trains the base model (p_1 alone); a ``HeadsConfig`` trains the proposal heads, frozen or
    fine-tuned with the base, with its loss (mean or sampled) and p_1 weight. ``seed`` fixes initial RNG state.

    ``dev`` says what to evaluate on dev (none by default). Its ``score(model)`` (e.g. greedy dev BLEU:
    ``Task.dev_score``) is called every ``cfg.score_every`` steps; its first value is "the score" that
    ``cfg.best_on = "score"`` keeps the best weights by (higher is better). Its values join the history as
    ``dev/<name>``: the learning curve the checkpoint keeps.

    ``place`` is the device and the processes (the CPU, one process by default). Its ``ddp_model`` computes the
    losses when given; then each rank weights its micro-batches by their share of the global token count times
    the world size (DDP averages over ranks), so N ranks x M micro-batches make exactly the step one process
    makes over the same N*M batches. Micro-batches before the last skip DDP's gradient all-reduce (``no_sync``).
    Only ``is_main`` writes checkpoints, logs and runs dev evaluation.
    """
    out = out if isinstance(out, TrainOutput) else TrainOutput(out)
    dev = dev if dev is not None else DevEvaluation()  # none: no dev rows, no dev score
    run = _prepare(model, cfg, heads, seed, out, dev, place if place is not None else Placement())
    torch.manual_seed(seed)
    random.seed(seed)
    state = resumed_state(run, out.resume)
    run.ranks.seed_dropout(seed, state.step)
    reporter = Reporter(cfg, run.stage, state.step, out.log, run.is_main, out.progress)
    try:  # Ctrl-C: one line saying where training stopped and how to resume, not a traceback
        with CheckpointRequests() as requests:
            while stopped_by(run, state) is None:
                _train_epoch(run, state, batches, reporter, requests)
    except KeyboardInterrupt:
        reporter.close()
        raise _interrupted(run, state) from None
    reporter.close()
    return _finish(run, state)


def _train_epoch(run: Run, state: RunState, batches: Callable[[int, int], Iterator[Batch]], reporter: Reporter,
                 requests: CheckpointRequests) -> None:
    """Steps over the rest of the current epoch (on resume: from where the checkpoint stopped inside it), until
    the epoch ends or the stage does."""
    exhausted = True
    micro: list[Batch] = []
    for batch in batches(state.epoch, state.batch_idx):
        state.batch_idx += 1
        micro.append(batch)
        if len(micro) < run.cfg.grad_accum:
            continue
        t0 = time.perf_counter()
        losses = optimizer_step(run, micro, state.step)
        micro = []
        state.step += 1
        state.elapsed += run.ranks.mean_seconds(time.perf_counter() - t0)
        state.last_loss = losses.total
        _after_step(run, state, losses, reporter, requests)
        if stopped_by(run, state) is not None:
            exhausted = False
            break
    if exhausted:
        state.epoch, state.batch_idx = state.epoch + 1, 0
    if state.batch_idx == 0 and exhausted and state.step == 0:
        raise RuntimeError("the training set produced no batches; check the data folder and max_tokens.")


def _after_step(run: Run, state: RunState, losses: StepLosses, reporter: Reporter,
                requests: CheckpointRequests) -> None:
    """Report the step, evaluate on dev when due (rank 0; not counted as training time), keep the best weights,
    and write the resume state every ``ckpt_every`` steps and when asked (SIGUSR1)."""
    cfg = run.cfg
    reporter.stepped(state.step, state.elapsed, run.budget_s)
    reporter.train_row(state.step, losses, run.opt.param_groups[0]["lr"], state.elapsed)
    row = run.dev.row(run.model, state.step, cfg, run.device) if run.is_main else None
    if row is not None:
        state.history.append(row)
        if cfg.keep_best:
            state.best = kept_best(state.best, row, run.model, cfg)
        reporter.dev_row(row)
    asked = requests.take()
    if asked or state.step % cfg.ckpt_every == 0:
        save(run, state)
    if asked:
        reporter.note(f"step {state.step}: resume state written on request (SIGUSR1) to {run.state_path}")


def _interrupted(run: Run, state: RunState) -> TrainingInterrupted:
    """Where Ctrl-C left the stage. The state of the step under way is not saved: it may be half-applied
    (inside the optimizer's update), while the last checkpoint is whole."""
    where = (
        f"last checkpoint {run.state_path} (step {state.saved_step})"
        if state.saved_step is not None
        else f"no checkpoint yet (one is written every {run.cfg.ckpt_every} steps)"
    )
    return TrainingInterrupted(
        f"stopped {run.stage} training at step {state.step} of {run.cfg.max_steps}; {where}; "
        "run the same command to resume."
    )


def _finish(run: Run, state: RunState) -> dict[str, Any]:
    """Save where training stopped, then hand on the best weights kept (or the last) as the final checkpoint."""
    if state.step % run.cfg.ckpt_every:  # the state where training stopped, before the best weights replace the last
        save(run, state)
    best = state.best
    if best is not None:
        run.model.load_state_dict(best["state"])
        if run.is_main:
            what = f"dev score {-best['loss']:.3f}" if run.cfg.best_on == "score" else f"dev loss {best['loss']:.3f}"
            print(f"keeping the best dev checkpoint: step {best['step']} ({what})")
    save(run, state, final=True)
    return {
        "step": state.step,
        "epoch": state.epoch,
        "elapsed_min": state.elapsed / 60,
        "last_loss": state.last_loss,
        "history": state.history,
        "stopped_by": stopped_by(run, state),
    }
