"""Sequence-level distillation: train a teacher (another seed), beam-decode the training sources in
resumable shards, and write the distilled training set; with ``stage=all``, then base and heads on it.

    python experiments/distill.py                       # teacher + distilled data only
    python experiments/distill.py stage=all heads.k=8   # then base and heads on distilled data
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import DistillEntry

    from bpd.config import ExperimentConfig



def run(cfg: ExperimentConfig, entry: DistillEntry) -> None:
    from bpd.runtime import Runtime
    from bpd.stages import Recipe, distillation_targets, ensure_heads
    from bpd.tasks import load_task

    if entry.stage not in ("data", "all"):
        raise ValueError(f"unknown stage {entry.stage!r}; use stage=data or stage=all.")
    runtime = Runtime.build(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)
    # The distilled base's training set (distill.base_sources); heads on distilled targets decode their own sample.
    pairs = distillation_targets(runtime, Recipe.of(cfg), task, cfg.distill.base_sources)
    print(f"distilled training set: {len(pairs)} pairs")
    if entry.stage == "all":
        heads = dataclasses.replace(cfg.heads, targets="distilled")
        cfg = dataclasses.replace(cfg, base_targets="distilled", heads=heads)
        print(f"heads checkpoint: {ensure_heads(runtime, Recipe.of(cfg), task)}")


@hydra.main(config_path=CONF_DIR, config_name="distill", version_base="1.3")
def job(cfg: DictConfig) -> None:
    run_experiment(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
