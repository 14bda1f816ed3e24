"""Where a training stage's progress goes: a progress bar, training and dev rows to the caller's ``log``, and a
line per dev evaluation. Rank 0 alone reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm

from bpd.config import TrainConfig
from bpd.training.step import StepLosses


class Reporter:
    def __init__(
        self,
        cfg: TrainConfig,
        stage: str,
        step: int,
        log: Callable[[dict[str, Any]], None] | None,
        is_main: bool,
        progress: bool,
    ) -> None:
        self.cfg, self.stage, self.log, self.is_main, self.progress = cfg, stage, log, is_main, progress
        self.bar = tqdm(total=cfg.max_steps, initial=step, disable=not (progress and is_main), desc=f"train {stage}")

    def stepped(self, step: int, elapsed: float, budget_s: float | None) -> None:
        """One more step done. The bar's total is the budget that will end the stage: steps, or minutes when
        the cap will bind first (its steps estimated from the pace so far). The pace can recover (a run paused
        with SIGSTOP looks slow at first), so the bar goes back to the steps when the cap no longer binds."""
        if budget_s is not None:
            by_time = step + int(max(0.0, budget_s - elapsed) / max(1e-9, elapsed / max(1, step)))
            capped = by_time < self.cfg.max_steps
            total = by_time if capped else self.cfg.max_steps
            if self.bar.total != total:
                self.bar.total = total
                cap = f" ({self.cfg.max_minutes:g} min cap)" if capped else ""
                self.bar.set_description(f"train {self.stage}{cap}")
        self.bar.update(1)

    def train_row(self, step: int, losses: StepLosses, lr: float, elapsed: float) -> None:
        """Every ``log_every`` steps: the step's loss on the bar, and a row of the losses and learning rate."""
        if step % self.cfg.log_every:
            return
        self.bar.set_postfix(loss=f"{losses.total:.3f}")
        row = {"step": step, "train/loss": losses.total, "lr": lr, "elapsed_min": elapsed / 60}
        row.update({f"train/loss_head{i + 1}": v for i, v in losses.per_head.items()})
        if self.log and self.is_main:
            self.log(row)

    def dev_row(self, row: dict[str, Any]) -> None:
        if self.is_main and self.progress:
            tqdm.write(f"step {row['step']}: " + " ".join(f"{k}={v:.3f}" for k, v in row.items() if k != "step"))
        if self.log and self.is_main:
            self.log(row)

    def note(self, line: str) -> None:
        """A line beside the bar (rank 0)."""
        if self.is_main:
            tqdm.write(line)

    def close(self) -> None:
        self.bar.close()
