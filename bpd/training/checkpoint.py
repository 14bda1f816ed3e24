"""Atomic checkpoints with clear errors: a crash mid-write never corrupts the previous checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bpd.integrity import write_atomic

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
    """Write ``payload`` to ``path`` atomically (readers see the old or the new file, never half of one); a full
    disk leaves the previous checkpoint in place and raises ``bpd.integrity.DiskFull`` with the space needed."""
    write_atomic(path, lambda tmp: torch.save(payload, tmp), size_hint=_tensor_bytes(payload))


def _tensor_bytes(obj: Any, seen: dict[int, int] | None = None) -> int:
    """The bytes of the tensor storages in a (nested) payload, each shared storage once (tied embeddings): about
    what its file needs on disk."""
    seen = {} if seen is None else seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensor_bytes(v, seen)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _tensor_bytes(v, seen)
    return sum(seen.values())
