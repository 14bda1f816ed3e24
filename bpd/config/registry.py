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

from dataclasses import dataclass
from typing import Any

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
