"""Prepare a task's data without training: the corpus folder, its tokenizer and its token stores.

    python experiments/data.py task=debian_en_de          # make data: the Debian corpus (minutes, once)
    python experiments/data.py task=debian_en_de 'task.corpora.debian.kinds=[sentences]' task.corpora.debian.min_words=6

A second run reuses everything. Every experiment prepares its data the same way on first use; this entry
point only lets a user do it up front (or on a login node before a cluster run).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import ExperimentSchema

    from bpd.config import ExperimentConfig



def run(cfg: ExperimentConfig, _entry: ExperimentSchema) -> str:
    from bpd.runtime import Runtime
    from bpd.tasks import load_task

    t0 = time.perf_counter()
    task = load_task(Runtime.build(cfg), cfg.task, cfg.shipped)
    sizes = ", ".join(f"{s} {len(task.splits[s])}" for s in ("train", "dev", "test"))
    print(f"{task.name}: {sizes} pairs encoded, vocabulary {task.vocab_size}; folder {getattr(task, 'folder', '')} "
          f"[{time.perf_counter() - t0:.1f} s]")
    return str(getattr(task, "folder", ""))


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def job(cfg: DictConfig) -> None:
    run_experiment(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
