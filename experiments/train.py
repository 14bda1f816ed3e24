"""Train one stage: ``stage=base`` (p_1), ``stage=heads`` (k proposal heads), ``stage=draft`` (the draft model
of draft-model decoding, ``draft=tiny``), or ``stage=all``.

    python experiments/train.py stage=base model=small train.max_minutes=10
    python experiments/train.py experiment=demo draft=tiny stage=draft                 # resumable, in steps
    python experiments/train.py stage=heads heads.k=8 heads.training=finetune heads.targets=self
    python experiments/train.py -m stage=heads heads.k=1,2,4,6,8,10          # one model per k

The same command runs data-parallel on several GPUs and nodes, unchanged:

    torchrun --nproc_per_node=8 experiments/train.py experiment=table1 task.data_dir=... dist.reference_world_size=8
    python experiments/train.py -m hydra/launcher=submitit_slurm experiment=table1 ...   # one SLURM job per config

Every rank runs this script; rank 0 alone prepares the data cache first, logs and writes checkpoints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import TrainEntry

    from bpd.config import ExperimentConfig


STAGES = ("base", "heads", "draft", "all")


def run(cfg: ExperimentConfig, entry: TrainEntry) -> str:
    from bpd.runtime import Runtime
    from bpd.stages import Recipe, ensure_base, ensure_draft, ensure_heads
    from bpd.tasks import load_task
    from bpd.training.distributed import main_first

    if entry.stage not in STAGES:
        raise ValueError(f"unknown stage {entry.stage!r}; use stage=base, heads, draft or all.")
    if entry.stage == "draft" and cfg.draft.model is None:
        raise ValueError("stage=draft trains the draft model of draft-model decoding; name its size, e.g. draft=tiny.")
    runtime, recipe = Runtime.build(cfg), Recipe.of(cfg)  # once per process: every stage below receives them
    # Rank 0 tokenizes and caches; the others then read its files.
    task = main_first(lambda: load_task(runtime, cfg.task, cfg.shipped))
    if entry.stage == "base":
        path = ensure_base(runtime, recipe, task, recipe.base_targets)
    else:
        path = ensure_draft(runtime, recipe, task) if entry.stage == "draft" else ensure_heads(runtime, recipe, task)
    if runtime.is_main:
        print(f"checkpoint: {path}")
    return str(path)


@hydra.main(config_path=CONF_DIR, config_name="train_stage", version_base="1.3")
def job(cfg: DictConfig) -> None:
    run_experiment(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
