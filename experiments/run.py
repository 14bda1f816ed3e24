"""One experiment end to end: data -> base model -> [distillation] -> proposal heads -> evaluation; or the
evaluation alone of a given model (``checkpoint=``).

    python experiments/run.py experiment=demo
    python experiments/run.py -m heads.k=2,4 heads.training=frozen,finetune   # a sweep
    python experiments/run.py checkpoint=outputs/cache/models/heads_....pt decode=blockwise
    python experiments/run.py experiment=demo_debian checkpoint=debian_en_de_both   # a shipped model

Every stage is cached by its config hash, so re-running skips finished work and resumes the rest; a given
checkpoint trains nothing (its draft model, with ``draft.model``, is still built).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, provenance, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import RunEntry

    from bpd.config import ExperimentConfig


def run(cfg: ExperimentConfig, entry: RunEntry) -> list[dict]:
    from bpd.evaluate import evaluate
    from bpd.runtime import Runtime, ensure_writable
    from bpd.stages import Recipe, ensure_draft, ensure_heads
    from bpd.tasks import load_task

    given = checkpoint_path(entry, cfg)  # before the task loads: a wrong name ends at once
    runtime, recipe = Runtime.build(cfg), Recipe.of(cfg)
    ensure_writable(runtime.results_dir)  # before training, not after decoding
    task = load_task(runtime, cfg.task, cfg.shipped)
    path = given or ensure_heads(runtime, recipe, task)
    draft = ensure_draft(runtime, recipe, task)  # none unless draft.model
    return evaluate(runtime, task, path, cfg.decode, provenance(cfg, draft), draft)


def checkpoint_path(entry: RunEntry, cfg: ExperimentConfig) -> Path | None:
    """``checkpoint=``: a file, or a shipped model's name as translate.py takes it (``debian_en_de_both`` ->
    checkpoints/debian_en_de_both.pt); a missing one is refused with the shipped names. None: the config's own."""
    from bpd.translator import resolve_checkpoint

    return resolve_checkpoint(entry.checkpoint, cfg.paths.shipped_dir) if entry.checkpoint else None


@hydra.main(config_path=CONF_DIR, config_name="run", version_base="1.3")
def job(cfg: DictConfig) -> None:
    run_experiment(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
