"""The training stages, written once against a ``Task``: the base model p_1 (on gold or distilled targets)
and the k proposal heads (frozen or fine-tuned, on gold, distilled or self-distilled targets).

Every product is cached under ``paths.cache_dir`` by a hash of exactly the typed config that determines it,
and a finished product is reused: that makes sweeps idempotent and resumable (a killed sweep re-run
retrains nothing that finished, and training stages resume from their last checkpoint). The stages take a
``Runtime`` (where and how this process runs) and a ``Recipe`` (what determines their products), both built
once by the entry point from its experiment config; they never see the whole config.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bpd.config import (
    DecodeConfig,
    DistillConfig,
    DraftConfig,
    ExperimentConfig,
    HeadsConfig,
    ModelConfig,
    TrainConfig,
    cache_key,
    keyed,
)
from bpd.locks import exclusive
from bpd.models.checkpoint import DamagedCheckpoint
from bpd.runtime import Runtime
from bpd.shipped import install, manifests
from bpd.targets import base_outputs, distilled_pairs, self_pairs
from bpd.tasks import Pairs, Task
from bpd.tracking import Tracker, command_line, git_sha, make_tracker
from bpd.training import distributed as dist
from bpd.training.checkpoint import CheckpointError, load_checkpoint, load_model, state_file
from bpd.training.evaluation import DevEvaluation
from bpd.training.loop import Placement, TrainOutput, configure_params, train

BASE = HeadsConfig(k=1)  # the base stage's model: p_1 alone, no heads


@dataclass(frozen=True)
class Recipe:
    """What determines the products of the stages (models, decoded targets), the task aside: what their cache
    keys hash (sizes, training options, heads, seeds, targets, the samples of decoded sources) and what else
    shapes them (``decode``: the decoded targets' length limit and the dev score; ``shipped``: install a shipped
    base model of this recipe instead of training it; ``reference_world_size``: the global batch every world
    size keeps).

    Where and how the process runs (device, folders, process group, W&B) is the ``Runtime``'s, and a run's
    labels and evaluation options stay with its entry point: stages that took the whole experiment config would
    hide which of its options shape what they train. ``of`` builds an experiment's recipe."""

    model: ModelConfig
    train: TrainConfig  # the base stage's
    heads: HeadsConfig
    heads_train: TrainConfig  # the heads stage's: ``train`` with the experiment's ``heads_train`` values over it
    base_targets: str  # gold | distilled: what the base model under the heads trains on
    seed: int
    teacher_seed: int  # the distillation teacher's (null ``distill.teacher_seed``: seed + 1)
    distill: DistillConfig
    decode: DecodeConfig
    draft: DraftConfig
    shipped: bool
    reference_world_size: int | None

    @classmethod
    def of(cls, cfg: ExperimentConfig) -> Recipe:
        """The recipe of an experiment: the entry points' glue (with ``Runtime.build``)."""
        return cls(model=cfg.model, train=cfg.train, heads=cfg.heads, heads_train=cfg.heads_train_config,
                   base_targets=cfg.base_targets, seed=cfg.seed, teacher_seed=cfg.teacher_seed, distill=cfg.distill,
                   decode=cfg.decode, draft=cfg.draft, shipped=cfg.shipped,
                   reference_world_size=cfg.dist.reference_world_size)


@dataclass(frozen=True)
class Stage:
    """One model to train: its name (in logs and W&B), cached path, seed, training options, heads (None: the base
    model), dev sets, and what its checkpoint and W&B run record of its config."""

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
        why = e.damage if isinstance(e, DamagedCheckpoint) else str(e).split(";")[0]
        print(f"note: {why}; moved it to {bad.name}, retraining it.")
        return False


def sampled_targets(n: int | None, targets: str) -> tuple[dict[str, int], ...]:
    """What a model's key adds when it trains on decoded targets of ``n`` of the training sources
    (``distill.max_sources`` for heads, ``distill.base_sources`` for a distilled base); nothing otherwise."""
    return ({"max_sources": n},) if n is not None and targets != "gold" else ()


def base_path_for(runtime: Runtime, recipe: Recipe, task: Task, targets: str = "gold",
                  seed: int | None = None) -> Path:
    """Where the base model of this recipe is cached (whether or not it has been trained yet)."""
    seed = recipe.seed if seed is None else seed
    key = cache_key(task.key, keyed(recipe.model), recipe.train.product(), targets, seed, "base",
                    *sampled_targets(recipe.distill.base_sources, targets))
    return runtime.cache_root / "models" / f"base_{targets}_s{seed}_{key}.pt"


def ensure_base(runtime: Runtime, recipe: Recipe, task: Task, targets: str = "gold",
                seed: int | None = None) -> Path:
    """Train (or reuse) the base model p_1 on gold or distilled targets."""
    seed = recipe.seed if seed is None else seed
    path = base_path_for(runtime, recipe, task, targets, seed)
    if finished(path):
        return path
    with exclusive(lock_for(path), lambda: finished(path)) as done:  # one job trains it, the others wait
        if done:
            return path
        # A shipped base model (make pretrain) of exactly this recipe: installed instead of trained.
        if recipe.shipped and dist.main_first(lambda: finished(path) or install(path, task.fingerprint(),
                                                                                 runtime.shipped_dir)):
            return path
        pairs = (task.pairs("train") if targets == "gold"
                 else distillation_targets(runtime, recipe, task, recipe.distill.base_sources))
        model = task.build_model(recipe.model, BASE, 1, seed)
        if not state_file(path).exists():  # a resumed run's state holds what was fitted
            task.fit_before_base(model, recipe.train, seed)
        dev = {"dev": task.eval_batches(task.pairs("dev"), recipe.train.max_tokens)}
        described = {"model": dataclasses.asdict(recipe.model), "train": dataclasses.asdict(recipe.train),
                     "targets": targets}
        stage = Stage(f"base-{targets}-s{seed}", path, seed, recipe.train, None, dev, described)
        return _train_stage(runtime, task, model, pairs, stage, recipe.decode, recipe.reference_world_size)


def ensure_draft(runtime: Runtime, recipe: Recipe, task: Task) -> Path | None:
    """The draft model of draft-model speculative decoding (``recipe.draft``), trained like the base model on gold
    targets but with its own sizes (and budget); None when no draft is configured."""
    draft = recipe.draft
    if draft.model is None:
        return None
    train = recipe.train if draft.max_steps is None else dataclasses.replace(recipe.train, max_steps=draft.max_steps)
    return ensure_base(runtime, dataclasses.replace(recipe, model=draft.model, train=train), task, "gold")


def lock_for(path: Path) -> Path:
    """The lock file of a cached product (``bpd.locks``): beside it, so every job sharing the cache sees it."""
    return path.with_name(path.name + ".lock")


def distillation_targets(runtime: Runtime, recipe: Recipe, task: Task, sources: int | None) -> Pairs:
    """The paper's sequence-level distillation data: a teacher (same recipe, another seed) is trained, then
    beam-decodes the training sources (``sources`` of them, spread evenly; None: all)."""
    teacher = ensure_base(runtime, recipe, task, "gold", seed=recipe.teacher_seed)
    return distilled_pairs(runtime, task, teacher, sources, recipe.distill, recipe.decode)


def heads_path_for(runtime: Runtime, recipe: Recipe, task: Task) -> Path:
    """Where the heads model of this recipe is cached (the base model's path when k = 1 needs no heads),
    whether or not it has been trained yet."""
    h = recipe.heads
    base_path = base_path_for(runtime, recipe, task, recipe.base_targets)
    if h.k == 1 and h.identity_p1:
        return base_path  # nothing to train: k=1 with p_1 = base is the base model itself
    key = cache_key(base_path.stem, keyed(h), recipe.heads_train.product(), recipe.seed,
                    *sampled_targets(recipe.distill.max_sources, h.targets))
    return runtime.cache_root / "models" / f"heads_k{h.k}_{h.training}_{h.targets}_{key}.pt"


def ensure_heads(runtime: Runtime, recipe: Recipe, task: Task) -> Path:
    """Train (or reuse) k proposal heads on top of the base model (frozen or fine-tuned)."""
    path = heads_path_for(runtime, recipe, task)
    # A finished heads model is all decoding needs: neither its base nor its training targets are rebuilt.
    if finished(path):
        return path
    if recipe.shipped and path.name in manifests(runtime.shipped_dir):
        # A shipped heads model of exactly this recipe (a Table 1 setting's): installed, with nothing under it built.
        with exclusive(lock_for(path), lambda: finished(path)) as done:
            if done or dist.main_first(lambda: finished(path) or install(path, task.fingerprint(),
                                                                          runtime.shipped_dir)):
                return path
    base_path = ensure_base(runtime, recipe, task, recipe.base_targets)
    if path == base_path:
        return base_path
    with exclusive(lock_for(path), lambda: finished(path)) as done:  # one job trains it, the others wait
        return path if done else _heads_stage(runtime, recipe, task, path, base_path)


def _heads_stage(runtime: Runtime, recipe: Recipe, task: Task, path: Path, base_path: Path) -> Path:
    h = recipe.heads
    if h.targets == "gold":
        pairs = task.pairs("train")
    elif h.targets == "distilled":
        pairs = distillation_targets(runtime, recipe, task, recipe.distill.max_sources)
    else:
        pairs = self_pairs(runtime, task, base_path, recipe.distill, recipe.decode, recipe.shipped)
    base, base_payload = load_model(base_path)
    task.check_model(base, base_path)
    model = task.build_model(recipe.model, h, h.k, recipe.seed)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    if unexpected or any(not m.startswith("heads.") for m in missing):
        raise CheckpointError(f"base checkpoint {base_path} does not match the model config; delete it and retrain.")
    model.heads.set_loss_vocab(task.proposal_vocab(h.proposal_vocab))
    tcfg = recipe.heads_train
    mt = tcfg.max_tokens
    dev = {"dev": task.eval_batches(task.pairs("dev"), mt)}
    if h.targets == "self" or h.eval_vs_self:
        # Under torchrun rank 0 decodes the dev set, the others then read its file.
        dev["dev_vs_base"] = task.eval_batches(
            dist.main_first(lambda: base_outputs(runtime, task, base_path, "dev", recipe.decode)), mt)
    described = {"heads": dataclasses.asdict(h), "heads_train": dataclasses.asdict(tcfg), "base": base_path.name,
                 "base_stopped_by": base_payload.get("stopped_by")}
    name = f"heads-k{h.k}-{h.training}-{h.targets}"
    stage = Stage(name, path, recipe.seed, tcfg, h, dev, described)
    return _train_stage(runtime, task, model, pairs, stage, recipe.decode, recipe.reference_world_size)


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
    meta = {"name": name, "data": task.key, "config": described, "command": command_line(), "git_sha": git_sha()}
    summary = train(
        model,
        batches,
        tcfg,
        TrainOutput(path, resume=True, meta=meta, log=tracker.log),
        heads=heads,
        seed=seed,
        dev=DevEvaluation(stage.dev_sets, lambda m: task.dev_score(m, decode, tcfg.score_examples, device=device)),
        place=Placement(device, ddp, info.is_main),
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
