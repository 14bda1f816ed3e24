"""Train the base models that ship with the repository and export them (``make pretrain``).

    python experiments/pretrain.py experiment=pretrain_mt                                 # the MT base
    python experiments/pretrain.py experiment=pretrain_mt models=[base,teacher,distilled]  # and Table 1's
    python experiments/pretrain.py experiment=pretrain_sr                                 # the SR base

Budgets are in steps, so the same command trains the same model on any machine; every stage checkpoints
and resumes, so re-running the command after an interruption continues where it stopped. Each finished
model is scored greedily on the whole dev and test sets and written to ``paths.shipped_dir`` (fp16) with a
manifest (``bpd/shipped.py``); later runs whose config matches install it instead of training.
"""

from __future__ import annotations

import dataclasses

import hydra
from _common import CONF_DIR, PretrainEntry, friendly
from omegaconf import DictConfig

from bpd.config import ExperimentConfig

MODELS = ("base", "teacher", "distilled")


def run(cfg: ExperimentConfig, entry: PretrainEntry) -> None:
    from bpd.decoding.common import pad_rows
    from bpd.shipped import already_shipped, export
    from bpd.stages import ensure_base
    from bpd.tasks import load_task
    from bpd.training.checkpoint import load_model

    unknown = [m for m in entry.models if m not in MODELS]
    if unknown or not entry.models:
        raise ValueError(f"unknown models {unknown or entry.models}; use models=[base], [base,teacher,distilled].")
    if "distilled" in entry.models and cfg.task.kind != "translation":
        raise ValueError("models=[...distilled] is for translation (sequence-level distillation); drop it.")
    cfg = dataclasses.replace(cfg, shipped=False)  # this is where shipped models come from
    task = load_task(cfg)
    made = {
        "base": lambda: ensure_base(cfg, task, "gold"),
        "teacher": lambda: ensure_base(cfg, task, "gold", seed=cfg.teacher_seed),
        "distilled": lambda: ensure_base(cfg, task, "distilled"),
    }
    for name in entry.models:
        path = made[name]()
        print(f"{name}: {path}")
        if not entry.export:
            continue
        if already_shipped(path, f"{task.name}_{name}", cfg.paths.shipped_dir):
            # A resumed `make pretrain` passes finished models again: re-scoring them would only restamp
            # the manifest.
            print(f"{name}: already shipped as {task.name}_{name} (delete its manifest to export it again)")
            continue
        model, _ = load_model(path)
        scores = {split: task.dev_score(model, cfg.decode, None, split) for split in ("dev", "test")}
        # A few dev sources, decoded by the shipped weights: tests/test_shipped.py decodes them again.
        sources = task.pairs("dev").sources(range(min(4, len(task.pairs("dev")))))
        manifest = export(path, f"{task.name}_{name}", task.fingerprint(), cfg.paths.shipped_dir, scores,
                          {"role": name, "task": task.name}, sources,
                          task.max_len(cfg.decode)(pad_rows(sources, task.pad_id)))
        print(f"{name}: dev {scores['dev']}, test {scores['test']} -> {manifest}")


@hydra.main(config_path=CONF_DIR, config_name="pretrain", version_base="1.3")
def main(cfg: DictConfig) -> None:
    friendly(run, cfg)


if __name__ == "__main__":
    main()
