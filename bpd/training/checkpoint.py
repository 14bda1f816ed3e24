"""Atomic checkpoints with clear errors: a crash mid-write never corrupts the previous checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

# Reading a checkpoint is the models layer's (decoders load their own draft models too); re-exported here.
from bpd.models.checkpoint import CheckpointError, load_checkpoint, load_model

__all__ = ["CheckpointError", "final_file", "load_checkpoint", "load_model", "save_checkpoint", "state_file"]


def state_file(path: str | Path) -> Path:
    """The resume state (optimizer, RNG, position) kept beside a stage's final checkpoint: ``x.state.pt`` for
    ``x.pt``; a ``.state.pt`` path is returned as it is."""
    path = Path(path)
    return path if path.name.endswith(".state.pt") else path.with_name(path.stem + ".state.pt")


def final_file(state: str | Path) -> Path:
    """The final checkpoint ``x.pt`` beside the resume state ``x.state.pt``."""
    state = Path(state)
    return state.with_name(state.name.removesuffix(".state.pt") + ".pt")


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # atomic on POSIX: readers see the old or the new file, never half of one
