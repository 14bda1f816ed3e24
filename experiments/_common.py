"""Glue shared by the Hydra entry points: config -> plain dict, friendly errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# Jobs started by submitit launchers unpickle the entry point and import this module by name.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")) if p
)

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def to_dict(cfg: DictConfig) -> dict:
    d = OmegaConf.to_container(cfg, resolve=True)
    d.pop("hydra", None)
    d["_command"] = " ".join(["python", *sys.argv])
    return d


def friendly(fn: Callable[[dict], object], cfg: DictConfig) -> object:
    """Run a stage; user errors (missing data, bad values, corrupt checkpoints) end with one sentence."""
    from bpd.training.checkpoint import CheckpointError

    d = to_dict(cfg)
    if d.get("threads"):
        import torch

        torch.set_num_threads(int(d["threads"]))
    try:
        return fn(d)
    except (FileNotFoundError, ValueError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
