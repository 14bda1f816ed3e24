"""A tiny synthetic translation task (deterministic word mapping with reordering) for pipeline tests."""

from __future__ import annotations

import random
from pathlib import Path

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
        (folder / f"{split}.src").write_text("\n".join(src) + "\n")
        (folder / f"{split}.tgt").write_text("\n".join(tgt) + "\n")
    return folder


def toy_config(tmp: Path, **over) -> dict:
    """A complete plain-dict experiment config, as Hydra would resolve it, at micro scale."""
    cfg = {
        "name": "toy",
        "seed": 0,
        "device": "cpu",
        "base_targets": "gold",
        "setting": None,
        "task": {
            "kind": "translation",
            "name": "folder",
            "data_dir": str(make_corpus(tmp / "corpus")),
            "vocab_size": 60,
            "max_len": 16,
        },
        "model": {"preset": "micro", "overrides": {}},
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
            "beam_size": 2,
            "alpha": 0.6,
            "ks": [2, 3],
            "criteria": [{"name": "exact"}, {"name": "topk", "param": 2}],
            "max_len_extra": 10,
            "dtype": "float32",
            "naive_greedy": False,
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
    return cfg
