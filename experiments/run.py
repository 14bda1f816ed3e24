"""One experiment end to end: data -> base model -> [distillation] -> proposal heads -> evaluation.

    python experiments/run.py experiment=demo
    python experiments/run.py -m heads.k=2,4 heads.training=frozen,finetune   # a sweep

Every stage is cached by its config hash, so re-running skips finished work and resumes the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, friendly, provenance, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from bpd.config import ExperimentConfig



def run(cfg: ExperimentConfig, _entry=None) -> list[dict]:
    from bpd.evaluate import evaluate
    from bpd.runtime import Runtime, ensure_writable
    from bpd.stages import Recipe, ensure_draft, ensure_heads
    from bpd.tasks import load_task

    runtime, recipe = Runtime.build(cfg), Recipe.of(cfg)
    ensure_writable(runtime.results_dir)  # before training, not after decoding
    task = load_task(runtime, cfg.task, cfg.shipped)
    heads, draft = ensure_heads(runtime, recipe, task), ensure_draft(runtime, recipe, task)  # none unless draft.model
    return evaluate(runtime, task, heads, cfg.decode, provenance(cfg, draft), draft)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def job(cfg: DictConfig) -> None:
    friendly(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
