"""What a training step does differently when it spans several processes (DDP, ``bpd.training.distributed``).

A step over N ranks must equal the step one process makes over the same N x M micro-batches, so each rank
weights its micro-batch losses by their share of the global token count times the world size (DDP
averages gradients over ranks), micro-batches before the last skip DDP's gradient all-reduce, and what is
logged or decided (the loss, the time spent against ``train.max_minutes``) is the same on every rank. For
one process every method here is the identity, so the loop calls them unconditionally.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from bpd.training.distributed import all_reduce_sum
from bpd.training.losses import LossModule


@dataclass(frozen=True)
class Ranks:
    """The processes a stage trains on: ``ddp_model`` (DDP around ``LossModule(model)``, None for one process)
    and the world size."""

    ddp_model: torch.nn.Module | None = None
    world: int = 1

    @classmethod
    def of(cls, ddp_model: torch.nn.Module | None) -> Ranks:
        if ddp_model is None:
            return cls()
        if not isinstance(getattr(ddp_model, "module", None), LossModule):
            raise TypeError("ddp_model must wrap LossModule(model); build it with bpd.training.distributed.wrap_ddp.")
        return cls(ddp_model, torch.distributed.get_world_size())

    def loss_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """What computes the losses: DDP syncs gradients through its own forward, so under DDP it is the wrapper."""
        return self.ddp_model if self.ddp_model is not None else LossModule(model)

    def seed_dropout(self, seed: int, step: int) -> None:
        """Each rank draws its own dropout masks (torch RNG); the python RNG that samples heads stays shared."""
        if self.world > 1 and torch.distributed.get_rank() > 0:
            torch.manual_seed(seed + 1_000_003 * torch.distributed.get_rank() + step)

    def accumulating(self, last: bool) -> AbstractContextManager:
        """Micro-batches before the last accumulate locally; the last one's backward all-reduces."""
        return self.ddp_model.no_sync() if self.ddp_model is not None and not last else nullcontext()

    def global_tokens(self, n_tok: int) -> int:
        """The global batch's token count: each rank weights its micro-batches by their share of it."""
        return int(all_reduce_sum([n_tok])[0]) if self.world > 1 else n_tok

    def global_losses(self, total: float, per_head: dict[int, float]) -> tuple[float, dict[int, float]]:
        """The global batch's loss and per-head losses (what is logged), not this rank's share of them."""
        if self.world == 1:
            return total, per_head
        keys = sorted(per_head)
        sums = all_reduce_sum([total, *(per_head[i] for i in keys)])
        return sums[0], dict(zip(keys, sums[1:]))

    def mean_seconds(self, dt: float) -> float:
        """The ranks' mean step time: every rank must reach the same verdict on ``train.max_minutes``."""
        return all_reduce_sum([dt])[0] / self.world if self.world > 1 else dt
