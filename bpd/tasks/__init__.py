"""Tasks: translation and super-resolution behind one interface (``bpd.tasks.base.Task``), one class per task kind
registered in ``bpd/config/task.py``, found in this package's modules and paired with it."""

from __future__ import annotations

from bpd.config import ExperimentConfig
from bpd.config.registry import implementations
from bpd.runtime import resolve_path
from bpd.tasks.base import Pairs, Scorer, Task
from bpd.tasks.image import ImageTask
from bpd.tasks.translation import TranslationTask

#: Task classes by ``task.kind``.
TASKS: dict[str, type[Task]] = implementations("task", __name__, Task, "kind")


def load_task(cfg: ExperimentConfig) -> Task:
    """The experiment's task with its encoded splits (prepared once under ``paths.cache_dir/data``). Shipped
    tokenizers come with the shipped models: shipped=false learns them here too."""
    shipped = resolve_path(cfg.paths.shipped_dir) if cfg.shipped else None
    return TASKS[cfg.task.kind](cfg.task, resolve_path(cfg.paths.cache_dir) / "data", shipped)


__all__ = ["TASKS", "ImageTask", "Pairs", "Scorer", "Task", "TranslationTask", "load_task"]
