"""Training a stage for longer without redoing it: ``train.continue_from`` (or ``heads_train.continue_from``).

The learning rate (warm-up, then inverse square root) does not depend on the step budget, and each epoch's
batches are a function of (seed, epoch), so a run stopped after N steps and continued to M > N steps is the
run of M steps: continuing saves the N steps and changes nothing else. That holds only when everything
else that shapes the trajectory is the same, which ``continued_state`` checks before any step is taken,
and when the state holds the weights of the step it stopped at (not the best ones it kept).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from bpd.config import TrainConfig
from bpd.training.checkpoint import load_checkpoint, state_file

#: What may differ between a run and its continuation: the budget and cap, and how often it logs and saves.
MAY_DIFFER = ("max_steps", "max_minutes", "continue_from", "loader_workers", "log_every", "ckpt_every")


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v  # betas: a tuple here, maybe a list in a stored config


def continued_state(source: str | Path, cfg: TrainConfig, expect: dict[str, Any], device,
                    option: str = "train") -> dict[str, Any]:
    """The state to continue from, after checking that continuing it is the same as training from scratch.

    ``expect`` holds what this stage is: ``stage``, ``model_config``, ``heads_config``, ``seed`` and the
    ``meta`` it records (its data, and for a heads stage the base model it starts from). ``option``: the
    config section that named ``source`` (``train`` or ``heads_train``), for the error message."""
    path = state_file(source)
    # Checked here, where the file is read, and not when the config is validated: bpd.config sits below
    # bpd.training and does not know its file naming (tests/test_layers.py).
    if not path.exists():
        raise ValueError(f"{option}.continue_from: no resume state {path} exists; name the .pt or .state.pt of a "
                         "run of this stage in the cache (outputs/cache/models/).")
    st = load_checkpoint(path, device)
    where = f"continue_from={source}"

    def refuse(why: str) -> None:
        raise ValueError(f"{where}: {why}")

    if "optimizer" not in st:
        refuse("that file holds weights only, not a resume state; name a stage's .pt or .state.pt in the cache.")
    for key in ("stage", "model_config", "heads_config", "seed"):
        if st.get(key) != expect[key]:
            refuse(f"that run's {key} differs from this one's; continue a run of the same stage and model.")
    old_meta, meta = st.get("meta") or {}, expect.get("meta") or {}
    if old_meta.get("data") != meta.get("data"):
        refuse("that run trained on other data or another tokenizer; continue a run on this task's data.")
    old_base = (old_meta.get("config") or {}).get("base")
    if old_base != (meta.get("config") or {}).get("base"):
        refuse(f"that run's heads sit on another base model ({old_base}); continue a run on this one.")
    old_cfg = st.get("train_config") or {}
    for f in fields(TrainConfig):
        if f.name in MAY_DIFFER:
            continue
        before = _plain(old_cfg.get(f.name))
        if before != _plain(getattr(cfg, f.name)):
            refuse(f"that run had {f.name}={before!r}, this one {getattr(cfg, f.name)!r}; only the budget "
                   f"({', '.join(MAY_DIFFER[:2])}) and how often it logs or saves may change.")
    if st["step"] > cfg.max_steps:
        refuse(f"that run already took {st['step']} steps; raise max_steps above it.")
    return st
