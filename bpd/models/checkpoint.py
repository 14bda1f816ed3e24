"""Reading a checkpoint: its payload, or the model it holds (writing one is training's: ``bpd.training.checkpoint``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bpd.integrity import DamagedArtifact, check_zip
from bpd.models import model_from_config


class CheckpointError(RuntimeError):
    pass


class DamagedCheckpoint(CheckpointError, DamagedArtifact):
    """A checkpoint whose bytes fail their check: a user's is refused with the fix, a stage's cached product is set
    aside and retrained (``damage``: what is wrong, without the fix)."""

    def __init__(self, damage: str) -> None:
        self.damage = damage
        super().__init__(f"{damage}; restore it from a copy, or delete it and retrain it.")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist; train it first (experiments/train.py) or fix it.")
    try:
        # torch.load checks no CRC: damaged weights would load as NaNs and decode garbage without a word.
        check_zip(path, "checkpoint")
    except DamagedArtifact as e:
        raise DamagedCheckpoint(str(e)) from None
    try:
        payload = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # torch raises many types for truncated/corrupt files
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a bpd checkpoint ({type(e).__name__}); delete it and retrain."
        ) from e
    if not isinstance(payload, dict) or "model_config" not in payload or "model" not in payload:
        raise CheckpointError(f"checkpoint {path} is not a bpd checkpoint (no model_config); delete it and retrain.")
    return payload


def load_model(path: str | Path, map_location: str | torch.device = "cpu"):
    """The model of a checkpoint, on ``map_location`` in eval mode, and the checkpoint's payload."""
    payload = load_checkpoint(path, map_location)
    model = model_from_config(payload["model_config"])
    model.load_state_dict(payload["model"])
    return model.to(map_location).eval(), payload
