"""A tiny synthetic translation task (deterministic word mapping with reordering) for pipeline tests."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

from bpd.config import ExperimentConfig, experiment_config

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def make_corpus(folder: Path, n_train: int = 300, n_dev: int = 20, n_test: int = 20, seed: int = 0) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        src, tgt = [], []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            src.append(" ".join(words))
            tgt.append(" ".join(w.upper()[:3] for w in reversed(words)))
        for name, lines in ((f"{split}.src", src), (f"{split}.tgt", tgt)):
            # Atomic: the lock tests run two jobs that each build this corpus while the other may read it
            # (a plain write_text truncates the file first: the reader saw an empty dev split).
            part = folder / f"{name}.{os.getpid()}.part"
            part.write_text("\n".join(lines) + "\n")
            os.replace(part, folder / name)
    return folder


def toy_config(tmp: Path, **over) -> ExperimentConfig:
    """An experiment config at micro scale (built from a nested dict, as from a resolved Hydra config);
    ``over`` replaces whole top-level values or updates sections."""
    cfg = {
        "name": "toy",
        "seed": 0,
        "device": "cpu",
        "base_targets": "gold",
        "setting": None,
        "task": {
            "kind": "translation",
            "name": "folder",
            "source": "folder",
            "data_dir": str(make_corpus(tmp / "corpus")),
            "vocab_size": 60,
            "max_len": 16,
        },
        "model": {"name": "micro", "d_model": 32, "n_heads": 2, "d_ff": 64, "n_enc_layers": 1, "n_dec_layers": 2,
                  "dropout": 0.0},
        "train": {
            "lr": 3e-3,
            "warmup_steps": 10,
            "max_steps": 30,
            "max_minutes": None,
            "max_tokens": 256,
            "grad_clip": 1.0,
            "label_smoothing": 0.0,
            "bf16": False,
            "eval_every": 15,
            "ckpt_every": 10,
            "log_every": 5,
        },
        "heads": {
            "k": 3,
            "arch": "paper",
            "d_ff": None,
            "identity_p1": True,
            "training": "frozen",
            "loss": "mean",
            "targets": "gold",
        },
        "heads_train": {"max_steps": 20},
        "distill": {"teacher_seed": 1, "beam": 2, "alpha": 0.6, "batch_size": 32, "shard_size": 100},
        "decode": {
            "split": "test",
            "n_examples": None,
            "batch_size": 1,
            "methods": {"beam": {"size": 2, "alpha": 0.6}, "naive_greedy": False},
            "ks": [2, 3],
            "criteria": [{"name": "exact"}, {"name": "topk", "param": 2}],
            "max_len_extra": 10,
            "dtype": "float32",
            "skip_existing": True,
        },
        "logger": {"enabled": False},
        "paths": {"cache_dir": str(tmp / "cache"), "results_dir": str(tmp / "results")},
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    return experiment_config(cfg).validate()


def tweak(cfg: ExperimentConfig, **over) -> ExperimentConfig:
    """``cfg`` with top-level values replaced or sections updated, e.g. ``tweak(cfg, heads={"k": 4})``
    (not validated: tests of bad values validate themselves)."""
    kw = {}
    for k, v in over.items():
        cur = getattr(cfg, k)
        kw[k] = dataclasses.replace(cur, **v) if isinstance(v, dict) and dataclasses.is_dataclass(cur) else v
    return dataclasses.replace(cfg, **kw)


def staged(fn, cfg: ExperimentConfig, *args, **kw):
    """A ``bpd.stages`` function called as an entry point calls it: with the runtime and recipe of ``cfg``."""
    from bpd.runtime import Runtime
    from bpd.stages import Recipe

    return fn(Runtime.build(cfg), Recipe.of(cfg), *args, **kw)


def toy_task(cfg: ExperimentConfig):
    """``bpd.tasks.load_task`` called as an entry point calls it: the runtime built from ``cfg``, its task section."""
    from bpd.runtime import Runtime
    from bpd.tasks import load_task

    return load_task(Runtime.build(cfg), cfg.task, cfg.shipped)


def evaluate_toy(cfg: ExperimentConfig, task, model_path: Path, draft_path: Path | None = None) -> list[dict]:
    """``bpd.evaluate.evaluate`` called as experiments/run.py calls it: the runtime, decode section and
    provenance of ``cfg`` (the entry points' ``provenance``)."""
    import sys

    from bpd.evaluate import evaluate
    from bpd.runtime import Runtime, resolve_path

    if str(resolve_path("experiments")) not in sys.path:
        sys.path.insert(0, str(resolve_path("experiments")))
    from _common import provenance

    return evaluate(Runtime.build(cfg), task, model_path, cfg.decode, provenance(cfg, draft_path), draft_path)


def self_pairs(cfg: ExperimentConfig, task, base_path: Path):
    """``bpd.targets.self_pairs`` as the heads stage calls it, with the sections of ``cfg``."""
    from bpd import targets
    from bpd.runtime import Runtime

    return targets.self_pairs(Runtime.build(cfg), task, base_path, cfg.distill, cfg.decode, cfg.shipped)
