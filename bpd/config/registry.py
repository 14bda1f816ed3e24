"""The one registry of what the harness can be asked for by name: decoding methods, proposal-head architectures,
task kinds and corpora. Each registers itself with its name, its own options (a torch-free type: a dataclass, a
list of them, a bool; or none) and what its kind says about every entry (``info``: a method's role and label, a
head's chained slots, a corpus's task kind), as fairseq's ``register_task(name, dataclass)`` does.

Registration happens in torch-free declaration modules (``bpd.config.methods``, ``bpd.config.heads``,
``bpd.config.task``), which ``bpd.config`` imports: configs, rows and the report read the whole registry without
torch. The implementations (``bpd.decoding.registry``, ``bpd.models.heads``, ``bpd.tasks``) pair themselves with
these entries by name and refuse to load with one missing on either side.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: The kinds of entry, each its own name space.
KINDS = ("method", "head", "task", "corpus")


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    options: Any = None  # its own options' type (None: it takes none)
    info: Any = None  # what its kind records about it


_ENTRIES: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}


def register(kind: str, name: str, options: Any = None, info: Any = None) -> Entry:
    """Add ``name`` to ``kind``'s entries; a name is registered once (a second module claiming it is refused)."""
    if kind not in _ENTRIES:
        raise ValueError(f"unknown registry kind {kind!r}; use one of {', '.join(KINDS)}.")
    if name in _ENTRIES[kind]:
        raise ValueError(f"the {kind} {name!r} is registered twice; give each {kind} its own name.")
    entry = Entry(kind, name, options, info)
    _ENTRIES[kind][name] = entry
    return entry


def entries(kind: str) -> dict[str, Entry]:
    """``kind``'s entries by name, in registration order (a copy: the registry changes only by ``register``)."""
    return dict(_ENTRIES[kind])


def names(kind: str) -> tuple[str, ...]:
    return tuple(_ENTRIES[kind])


def lookup(kind: str, name: object, where: str) -> Entry:
    """The entry ``name`` of ``kind``, refused with the choices (``where``: the option that named it)."""
    if not isinstance(name, str) or name not in _ENTRIES[kind]:
        raise ValueError(f"unknown {where} {name!r}; choose one of {', '.join(_ENTRIES[kind])}.")
    return _ENTRIES[kind][name]


def implementations(kind: str, package: str, base: type, attr: str) -> dict[str, type]:
    """The classes that implement ``kind``'s entries, by name in registration order: every subclass of ``base``
    defined in a module of ``package`` and naming its entry in a class attribute ``attr`` of its own (``paired``
    refuses a missing, doubled or unregistered one). Implementations are found this way, never listed."""
    path = importlib.import_module(package).__path__
    found = []
    for info in pkgutil.iter_modules(path, package + "."):
        module = importlib.import_module(info.name)
        found += [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base) and c is not base
                  and c.__module__ == module.__name__ and attr in vars(c)]
    return paired(kind, [(getattr(c, attr), c) for c in found], names(kind), package)


def paired(kind: str, found: list[tuple[str, T]], declared: Sequence[str], package: str) -> dict[str, T]:
    """``found`` (name, implementation) by name in the order of ``declared``, refused unless every declared name
    has exactly one implementation and every implementation is declared."""
    got = [n for n, _ in found]
    twice = sorted({n for n in got if got.count(n) > 1})
    missing = [n for n in declared if n not in got]
    undeclared = [n for n in got if n not in declared]
    if twice or missing or undeclared:
        raise RuntimeError(
            f"the {kind} implementations of {package} must implement the {kind}s registered in bpd/config/, every "
            f"name once: implemented twice {twice}, declared without an implementation {missing}, implemented "
            f"without a declaration {undeclared}.")
    by_name = dict(found)
    return {n: by_name[n] for n in declared}
