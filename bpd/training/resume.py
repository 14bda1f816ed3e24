"""What a stage's checkpoints hold, and how a run picks up from one.

Two files per stage: the resume state ``x.state.pt`` (weights of the last step, optimizer, RNG states, position
in the epoch, the best weights kept so far), written every ``ckpt_every`` steps and where training stops; and
the final checkpoint ``x.pt`` (the weights the stage hands on: the best kept, or the last), written once at
the end. A run resumes from its own state, else continues another run's (``continue_from``), else starts.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict
from typing import Any

import torch

from bpd.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from bpd.training.continuation import continued_state
from bpd.training.run import Run, RunState, stopped_by


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


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def _own_state(run: Run) -> dict[str, Any] | None:
    """This stage's resume state, if one is on disk and readable."""
    state_path = run.state_path
    if not state_path.exists():
        return None
    try:
        return load_checkpoint(state_path, run.device)
    except CheckpointError as e:  # a kill mid-write is impossible (atomic saves), but disks fail: set it aside
        bad = state_path.with_name(state_path.name + ".corrupt")
        if run.is_main:
            os.replace(state_path, bad)
            print(f"warning: {str(e).split(';')[0]}; moved it to {bad.name}, training this stage from the start.")
        return None


def _continued(run: Run) -> dict[str, Any]:
    """The state of the run ``continue_from`` names, checked to be this stage's run of fewer steps."""
    expect = {
        "stage": run.stage,
        "model_config": run.model.config_dict(),
        "seed": run.seed,
        "meta": run.meta,
        "heads_config": run.heads_config(),
    }
    st = continued_state(run.cfg.continue_from, run.cfg, expect, run.device,
                         "train" if run.heads is None else "heads_train")  # only that section names one
    if run.is_main:
        print(f"continuing {run.cfg.continue_from} (step {st['step']}) as {run.ckpt_path.name}")
    return st


def resumed_state(run: Run, resume: bool) -> RunState:
    """Where training starts: from this stage's resume state (``resume``), else from the run ``continue_from``
    names, else from step 0. A resumed run also gets its weights, optimizer and RNG states back."""
    st = _own_state(run) if resume else None
    if st is None and run.cfg.continue_from:
        st = _continued(run)
    if st is None:
        return RunState()
    state = RunState(
        step=st["step"],
        epoch=st["epoch"],
        batch_idx=resume_position(st["batch_idx"], st.get("world_size", 1), run.ranks.world, run.cfg.grad_accum),
        elapsed=st["elapsed"],
        history=st.get("history", []),
        best=st.get("best"),
        saved_step=st["step"] if run.state_path.exists() else None,
    )
    run.model.load_state_dict(st["model"])
    run.opt.load_state_dict(st["optimizer"])
    _set_rng_state(st["rng"])
    if run.is_main:
        print(
            f"resuming {run.ckpt_path.name} from step {state.step} (epoch {state.epoch}, "
            f"{state.elapsed / 60:.1f} min done)"
        )
    return state


def payload(run: Run, state: RunState, final: bool) -> dict[str, Any]:
    """A checkpoint's contents: the resume state (``final`` False) or the stage's final checkpoint."""
    p = {
        "model_config": run.model.config_dict(),
        "model": run.model.state_dict(),
        "train_config": asdict(run.cfg),
        "stage": run.stage,
        "heads_config": run.heads_config(),
        "seed": run.seed,
        "step": state.step,
        "epoch": state.epoch,
        "batch_idx": state.batch_idx,  # per rank: the epoch's first batch_idx * world_size batches are consumed
        "world_size": run.ranks.world,
        "elapsed": state.elapsed,
        "history": state.history,
        "meta": run.meta or {},
        "final": final,
        "stopped_by": stopped_by(run, state),
    }
    best = state.best
    if not final:
        p["optimizer"] = run.opt.state_dict()
        p["rng"] = _rng_state()
        p["best"] = best
    elif best is not None and run.cfg.best_on == "score":
        p["best_step"], p["best_dev_score"] = best["step"], -best["loss"]
    elif best is not None:
        p["best_step"], p["best_dev_loss"] = best["step"], best["loss"]
    return p


def save(run: Run, state: RunState, final: bool = False) -> None:
    """Write the resume state (or, ``final``, the final checkpoint) atomically; rank 0 alone writes."""
    if run.is_main:
        save_checkpoint(run.ckpt_path if final else run.state_path, payload(run, state, final))
        if not final:
            state.saved_step = state.step
