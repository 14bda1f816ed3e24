"""Tasks: translation and super-resolution behind one interface (``bpd.tasks.base.Task``), one class per task kind
registered in ``bpd/config/task.py``, found in this package's modules and paired with it."""

from __future__ import annotations

from bpd.config import TaskConfig
from bpd.config.registry import implementations, kept
from bpd.runtime import Runtime
from bpd.tasks.base import Pairs, Scorer, Task
from bpd.tasks.image import ImageTask
from bpd.tasks.translation import TranslationTask

#: Task classes by ``task.kind``.
TASKS: dict[str, type[Task]] = kept(lambda: implementations("task", __name__, Task, "kind"))


def load_task(runtime: Runtime, task: TaskConfig, shipped: bool) -> Task:
    """The task ``task`` configures, with its encoded splits (prepared once under the runtime's cache root,
    ``data/``). Shipped tokenizers come with the shipped models (``runtime.shipped_dir``): ``shipped`` false (the
    experiment's ``shipped=false``) learns them here too."""
    return TASKS[task.kind](task, runtime.cache_root / "data", runtime.shipped_dir if shipped else None)


__all__ = ["TASKS", "ImageTask", "Pairs", "Scorer", "Task", "TranslationTask", "load_task"]
