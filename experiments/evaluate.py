"""Evaluate a trained model (the one the config would train, or checkpoint=PATH) and write result rows.

    python experiments/evaluate.py heads.k=8 'decode.ks=[2,4,8]' decode.batch_size=1
    python experiments/evaluate.py checkpoint=outputs/cache/models/heads_....pt decode=blockwise
    python experiments/evaluate.py experiment=demo_debian checkpoint=debian_en_de_both   # a shipped model
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, friendly, provenance, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import EvaluateEntry

    from bpd.config import ExperimentConfig



def run(cfg: ExperimentConfig, entry: EvaluateEntry) -> list[dict]:
    from bpd.evaluate import evaluate
    from bpd.runtime import Runtime
    from bpd.stages import Recipe, ensure_draft, ensure_heads
    from bpd.tasks import load_task

    given = checkpoint_path(entry, cfg)  # before the task loads: a wrong name ends at once
    runtime, recipe = Runtime.build(cfg), Recipe.of(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)
    path = given or ensure_heads(runtime, recipe, task)
    draft = ensure_draft(runtime, recipe, task)  # no draft unless draft.model
    return evaluate(runtime, task, path, cfg.decode, provenance(cfg, draft), draft)


def checkpoint_path(entry: EvaluateEntry, cfg: ExperimentConfig) -> Path | None:
    """``checkpoint=``: a file, or a shipped model's name as translate.py takes it (``debian_en_de_both`` ->
    checkpoints/debian_en_de_both.pt); a missing one is refused with the shipped names. None: the config's own."""
    from bpd.translator import resolve_checkpoint

    return resolve_checkpoint(entry.checkpoint, cfg.paths.shipped_dir) if entry.checkpoint else None


@hydra.main(config_path=CONF_DIR, config_name="evaluate", version_base="1.3")
def job(cfg: DictConfig) -> None:
    friendly(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
