"""Tasks: translation and super-resolution behind one interface (``bpd.tasks.base.Task``)."""

from __future__ import annotations

from bpd.config import ExperimentConfig
from bpd.runtime import cache_root, resolve_path
from bpd.tasks.base import Pairs, Scorer, Task
from bpd.tasks.image import ImageTask
from bpd.tasks.translation import TranslationTask

#: Task classes by ``task.kind``.
TASKS: dict[str, type[Task]] = {"translation": TranslationTask, "image": ImageTask}


def load_task(cfg: ExperimentConfig) -> Task:
    """The experiment's task with its encoded splits (prepared once under ``paths.cache_dir/data``)."""
    if cfg.task.kind == "translation":
        # Shipped tokenizers come with the shipped models: shipped=false learns them here too.
        shipped = resolve_path(cfg.paths.shipped_dir) if cfg.shipped else None
        return TranslationTask(cfg.task, cache_root(cfg) / "data", shipped)
    return TASKS[cfg.task.kind](cfg.task, cache_root(cfg) / "data")


__all__ = ["TASKS", "ImageTask", "Pairs", "Scorer", "Task", "TranslationTask", "load_task"]
