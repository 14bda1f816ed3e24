"""Tasks: translation and super-resolution behind one interface (``bpd.tasks.base.Task``), one class per task kind
registered in ``bpd/config/task.py``, found in this package's modules and paired with it."""

from __future__ import annotations

import importlib
import pkgutil

from bpd.config import ExperimentConfig
from bpd.config.registry import names
from bpd.runtime import resolve_path
from bpd.tasks.base import Pairs, Scorer, Task
from bpd.tasks.image import ImageTask
from bpd.tasks.translation import TranslationTask


def discover() -> dict[str, type[Task]]:
    """The ``Task`` class of every registered task kind, by kind; refused unless each kind has exactly one."""
    found = []
    for info in pkgutil.iter_modules(__path__, __name__ + "."):
        module = importlib.import_module(info.name)
        found += [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Task) and c is not Task
                  and c.__module__ == module.__name__ and "kind" in vars(c)]
    kinds = [c.kind for c in found]
    if sorted(kinds) != sorted(names("task")):
        raise RuntimeError(f"the Task classes of bpd/tasks/ ({sorted(kinds)}) must implement the task kinds registered "
                           f"in bpd/config/task.py ({sorted(names('task'))}), each once.")
    by_kind = {c.kind: c for c in found}
    return {kind: by_kind[kind] for kind in names("task")}


#: Task classes by ``task.kind``.
TASKS: dict[str, type[Task]] = discover()


def load_task(cfg: ExperimentConfig) -> Task:
    """The experiment's task with its encoded splits (prepared once under ``paths.cache_dir/data``). Shipped
    tokenizers come with the shipped models: shipped=false learns them here too."""
    shipped = resolve_path(cfg.paths.shipped_dir) if cfg.shipped else None
    return TASKS[cfg.task.kind](cfg.task, resolve_path(cfg.paths.cache_dir) / "data", shipped)


__all__ = ["TASKS", "ImageTask", "Pairs", "Scorer", "Task", "TranslationTask", "load_task"]
