"""The training stages, written once against a ``Task``: the base model p_1 (on gold or distilled targets)
and the k proposal heads (frozen or fine-tuned, on gold, distilled or self-distilled targets).

Every product is cached under ``paths.cache_dir`` by a hash of exactly the typed config that determines it,
and a finished product is reused: that makes sweeps idempotent and resumable (a killed sweep re-run
retrains nothing that finished, and training stages resume from their last checkpoint).
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bpd.config import DecodeConfig, ExperimentConfig, HeadsConfig, TrainConfig, cache_key, keyed
from bpd.locks import exclusive
from bpd.runtime import Runtime
from bpd.shipped import install
from bpd.targets import base_outputs, distilled_pairs, self_pairs
from bpd.tasks import Pairs, Task
from bpd.tracking import Tracker, command_line, git_sha, make_tracker
from bpd.training import distributed as dist
from bpd.training.checkpoint import CheckpointError, load_checkpoint, load_model
from bpd.training.loop import configure_params, train

BASE = HeadsConfig(k=1)  # the base stage's model: p_1 alone, no heads


@dataclass(frozen=True)
class Stage:
    """One model to train: its name (in logs and W&B), cached path, seed, recipe, heads (None: the base model), dev
    sets, and what its checkpoint and W&B run record of its config."""

    name: str
    path: Path
    seed: int
    train: TrainConfig
    heads: HeadsConfig | None
    dev_sets: dict
    described: dict[str, Any]


def finished(path: Path) -> bool:
    """True if a finished checkpoint exists; a corrupt one is set aside (renamed) and retrained."""
    if not path.exists():
        return False
    try:
        load_checkpoint(path)
        return True
    except CheckpointError as e:
        bad = path.with_name(path.name + ".corrupt")
        os.replace(path, bad)
        print(f"warning: {e} Moved it to {bad.name}; retraining.")
        return False


def sampled_targets(n: int | None, targets: str) -> tuple[dict[str, int], ...]:
    """What a model's key adds when it trains on decoded targets of ``n`` of the training sources
    (``distill.max_sources`` for heads, ``distill.base_sources`` for a distilled base); nothing otherwise."""
    return ({"max_sources": n},) if n is not None and targets != "gold" else ()


def base_path_for(runtime: Runtime, cfg: ExperimentConfig, task: Task, targets: str = "gold",
                  seed: int | None = None) -> Path:
    """Where the base model of this config is cached (whether or not it has been trained yet)."""
    seed = cfg.seed if seed is None else seed
    key = cache_key(task.key, keyed(cfg.model), cfg.train.product(), targets, seed, "base",
                      *sampled_targets(cfg.distill.base_sources, targets))
    return runtime.cache_root / "models" / f"base_{targets}_s{seed}_{key}.pt"


def ensure_base(runtime: Runtime, cfg: ExperimentConfig, task: Task, targets: str = "gold",
                seed: int | None = None) -> Path:
    """Train (or reuse) the base model p_1 on gold or distilled targets."""
    seed = cfg.seed if seed is None else seed
    path = base_path_for(runtime, cfg, task, targets, seed)
    if finished(path):
        return path
    with exclusive(lock_for(path), lambda: finished(path)) as done:  # one job trains it, the others wait
        if done:
            return path
        # A shipped base model (make pretrain) of exactly this config: installed instead of trained.
        if cfg.shipped and dist.main_first(lambda: finished(path) or install(path, task.fingerprint(),
                                                                              runtime.shipped_dir)):
            return path
        pairs = (task.pairs("train") if targets == "gold"
                 else distillation_targets(runtime, cfg, task, cfg.distill.base_sources))
        model = task.build_model(cfg.model, BASE, 1, seed)
        dev = {"dev": task.eval_batches(task.pairs("dev"), cfg.train.max_tokens)}
        described = {"model": dataclasses.asdict(cfg.model), "train": dataclasses.asdict(cfg.train),
                     "targets": targets}
        stage = Stage(f"base-{targets}-s{seed}", path, seed, cfg.train, None, dev, described)
        return _train_stage(runtime, task, model, pairs, stage, cfg.decode, cfg.dist.reference_world_size)


def ensure_draft(runtime: Runtime, cfg: ExperimentConfig, task: Task) -> Path | None:
    """The draft model of draft-model speculative decoding (``cfg.draft``), trained like the base model on gold
    targets but with its own sizes (and budget); None when no draft is configured."""
    if cfg.draft.model is None:
        return None
    train = cfg.train if cfg.draft.max_steps is None else dataclasses.replace(cfg.train, max_steps=cfg.draft.max_steps)
    return ensure_base(runtime, dataclasses.replace(cfg, model=cfg.draft.model, train=train), task, "gold")


def lock_for(path: Path) -> Path:
    """The lock file of a cached product (``bpd.locks``): beside it, so every job sharing the cache sees it."""
    return path.with_name(path.name + ".lock")


def distillation_targets(runtime: Runtime, cfg: ExperimentConfig, task: Task, sources: int | None) -> Pairs:
    """The paper's sequence-level distillation data: a teacher (same config, another seed) is trained, then
    beam-decodes the training sources (``sources`` of them, spread evenly; None: all)."""
    teacher = ensure_base(runtime, cfg, task, "gold", seed=cfg.teacher_seed)
    return distilled_pairs(runtime, task, teacher, sources, cfg.distill, cfg.decode)


def heads_path_for(runtime: Runtime, cfg: ExperimentConfig, task: Task) -> Path:
    """Where the heads model of this config is cached (the base model's path when k = 1 needs no heads),
    whether or not it has been trained yet."""
    h = cfg.heads
    base_path = base_path_for(runtime, cfg, task, cfg.base_targets)
    if h.k == 1 and h.identity_p1:
        return base_path  # nothing to train: k=1 with p_1 = base is the base model itself
    key = cache_key(base_path.stem, keyed(h), cfg.heads_train_config.product(), cfg.seed,
                      *sampled_targets(cfg.distill.max_sources, h.targets))
    return runtime.cache_root / "models" / f"heads_k{h.k}_{h.training}_{h.targets}_{key}.pt"


def ensure_heads(runtime: Runtime, cfg: ExperimentConfig, task: Task) -> Path:
    """Train (or reuse) k proposal heads on top of the base model (frozen or fine-tuned)."""
    path = heads_path_for(runtime, cfg, task)
    # A finished heads model is all decoding needs: neither its base nor its training targets are rebuilt.
    if finished(path):
        return path
    base_path = ensure_base(runtime, cfg, task, cfg.base_targets)
    if path == base_path:
        return base_path
    with exclusive(lock_for(path), lambda: finished(path)) as done:  # one job trains it, the others wait
        return path if done else _heads_stage(runtime, cfg, task, path, base_path)


def _heads_stage(runtime: Runtime, cfg: ExperimentConfig, task: Task, path: Path, base_path: Path) -> Path:
    h = cfg.heads
    if h.targets == "gold":
        pairs = task.pairs("train")
    elif h.targets == "distilled":
        pairs = distillation_targets(runtime, cfg, task, cfg.distill.max_sources)
    else:
        pairs = self_pairs(runtime, task, base_path, cfg.distill, cfg.decode, cfg.shipped)
    base, base_payload = load_model(base_path)
    task.check_model(base, base_path)
    model = task.build_model(cfg.model, h, h.k, cfg.seed)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    if unexpected or any(not m.startswith("heads.") for m in missing):
        raise CheckpointError(f"base checkpoint {base_path} does not match the model config; delete it and retrain.")
    model.heads.set_loss_vocab(task.proposal_vocab(h.proposal_vocab))
    tcfg = cfg.heads_train_config
    mt = tcfg.max_tokens
    dev = {"dev": task.eval_batches(task.pairs("dev"), mt)}
    if h.targets == "self" or h.eval_vs_self:
        # Under torchrun rank 0 decodes the dev set, the others then read its file.
        dev["dev_vs_base"] = task.eval_batches(
            dist.main_first(lambda: base_outputs(runtime, task, base_path, "dev", cfg.decode)), mt)
    described = {"heads": dataclasses.asdict(h), "heads_train": dataclasses.asdict(tcfg), "base": base_path.name,
                 "base_stopped_by": base_payload.get("stopped_by")}
    name = f"heads-k{h.k}-{h.training}-{h.targets}"
    stage = Stage(name, path, cfg.seed, tcfg, h, dev, described)
    return _train_stage(runtime, task, model, pairs, stage, cfg.decode, cfg.dist.reference_world_size)


def _train_stage(runtime: Runtime, task: Task, model, pairs: Pairs, stage: Stage, decode: DecodeConfig,
                 reference_world_size: int | None) -> Path:
    """Train ``stage`` on ``pairs`` (``decode`` scores the dev set) and return its checkpoint's path."""
    info, device = runtime.info, runtime.device
    name, path, seed, heads, described = stage.name, stage.path, stage.seed, stage.heads, stage.described
    # Fixed global batch across world sizes: each rank accumulates reference_world_size * grad_accum / world.
    tcfg = dataclasses.replace(
        stage.train, grad_accum=dist.grad_accum_for(stage.train.grad_accum, info.world_size, reference_world_size)
    )
    tracker = make_tracker(runtime, name=name, job_type="base" if heads is None else "heads", extra=described) \
        if info.is_main else Tracker(False)
    workers = tcfg.loader_workers if tcfg.loader_workers is not None else (4 if device.type == "cuda" else 0)
    batches = task.train_batches(pairs, tcfg.max_tokens, seed, info.rank, info.world_size, workers,
                                 pin_memory=device.type == "cuda")
    ddp = None
    if info.distributed:
        configure_params(model.to(device), tcfg, heads)  # DDP hooks only what requires grad when it is built
        ddp = dist.wrap_ddp(model, info, find_unused_parameters=heads is not None and heads.loss == "sampled")
    t0 = time.time()
    summary = train(
        model,
        batches,
        tcfg,
        path,
        heads=heads,
        seed=seed,
        resume=True,
        dev_sets=stage.dev_sets,
        dev_score=lambda m: task.dev_score(m, decode, tcfg.score_examples, device=device),
        log=tracker.log,
        device=device,
        meta={"name": name, "data": task.key, "config": described, "command": command_line(), "git_sha": git_sha()},
        ddp_model=ddp,
        is_main=info.is_main,
    )
    tracker.summary({"train_minutes": (time.time() - t0) / 60, **{k: v for k, v in summary.items() if k != "history"}})
    tracker.finish()
    if info.is_main:
        steps, minutes, loss = summary["step"], summary["elapsed_min"], summary["last_loss"]
        # A run resumed at its budget takes no step of its own: it has no loss to report.
        last = f"last loss {loss:.3f}" if loss == loss else "no step taken in this run"
        print(f"{name}: {steps} steps, {minutes:.1f} min, {last}")
    dist.barrier()  # rank 0 wrote the checkpoint: every rank sees it before the next stage reads it
    return path
