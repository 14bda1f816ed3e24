"""One stage's training run: what stays fixed while it trains (``Run``), where it stands (``RunState``: what
its resume checkpoint holds beside the weights and the optimizer), and what ends it (``stopped_by``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from bpd.config import HeadsConfig, TrainConfig
from bpd.training.checkpoint import state_file
from bpd.training.evaluation import DevEvaluation
from bpd.training.losses import Smoothing
from bpd.training.ranks import Ranks


def config_section(heads: HeadsConfig | None) -> str:
    """The config section that error messages name for a stage's training options."""
    return "train" if heads is None else "heads_train (or train)"


@dataclass
class Run:
    """A stage's model and optimizer, which head slots carry loss, what it evaluates on dev, where its
    checkpoints go, and the processes it spans (only ``is_main`` writes checkpoints, logs and evaluates)."""

    model: Any
    cfg: TrainConfig
    heads: HeadsConfig | None  # None: the base stage (p_1 alone)
    seed: int
    meta: dict[str, Any] | None
    ckpt_path: Path
    device: str | torch.device
    is_main: bool
    ranks: Ranks
    loss_module: torch.nn.Module
    groups: list[dict]
    opt: torch.optim.Optimizer
    slots: list[int]
    dev: DevEvaluation
    smoothing: Smoothing = 0.0  # what the losses smooth hard targets with (``bpd.training.losses.slot_loss``)
    # heads.p1_distill: a frozen copy of the model as the stage got it (the base), whose p_1 a fine-tuned p_1 is
    # held near; None when off.
    anchor_model: Any = None

    @property
    def stage(self) -> str:
        return "base" if self.heads is None else "heads"

    @property
    def option(self) -> str:
        return config_section(self.heads)

    @property
    def state_path(self) -> Path:
        return state_file(self.ckpt_path)

    @property
    def sampled(self) -> bool:
        """Whether each step trains one slot drawn at random (the paper's sampled loss) instead of all of them."""
        return self.heads is not None and self.heads.loss == "sampled"

    @property
    def soft_targets(self) -> bool:
        """Whether the proposal slots learn p_1's distributions (``heads.soft_targets``) rather than tokens."""
        return self.heads is not None and self.heads.soft_targets

    @property
    def p1_weight(self) -> float:
        return 1.0 if self.heads is None else self.heads.p1_weight

    @property
    def p1_distill(self) -> float:
        return 0.0 if self.heads is None else self.heads.p1_distill

    @property
    def budget_s(self) -> float | None:
        return None if self.cfg.max_minutes is None else self.cfg.max_minutes * 60

    def heads_config(self) -> dict[str, Any] | None:
        return None if self.heads is None else asdict(self.heads)


@dataclass
class RunState:
    """Where a stage's training stands. ``batch_idx`` counts per rank: the epoch's first ``batch_idx *
    world_size`` batches are consumed."""

    step: int = 0
    epoch: int = 0
    batch_idx: int = 0
    elapsed: float = 0.0  # seconds spent in training steps (dev evaluation not counted)
    history: list[dict[str, Any]] = field(default_factory=list)  # dev rows: the learning curve checkpoints keep
    best: dict[str, Any] | None = None  # the best dev metric's step, value, weights and evaluations since
    saved_step: int | None = None  # the step of the newest resume state on disk: what a re-run resumes from
    last_loss: float = float("nan")


def stopped_by(run: Run, state: RunState) -> str | None:
    """What ends the stage now: "steps" (the budget), "minutes" (the cap: the model then depends on the
    machine's speed, so rows record it), "patience" (early stopping), or None (not yet)."""
    cfg = run.cfg
    if state.step >= cfg.max_steps:
        return "steps"
    if run.budget_s is not None and state.elapsed >= run.budget_s:
        return "minutes"
    # Only rank 0 evaluates, so early stopping is single-process only (a lone rank stopping would hang DDP).
    best = state.best
    if run.ranks.world == 1 and cfg.patience is not None and best is not None and best["evals_since"] >= cfg.patience:
        return "patience"
    return None
