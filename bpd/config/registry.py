"""The one registry of what the harness can be asked for by name: decoding methods, proposal-head architectures,
task kinds and corpora. Each registers itself with its name, its own options (a torch-free type: a dataclass, a
list of them, a bool; or none) and what its kind says about every entry (``info``: a method's role and label, a
head's chained slots, a corpus's task kind), as fairseq's ``register_task(name, dataclass)`` does.

Registration happens in torch-free declaration modules (``bpd.config.methods``, ``bpd.config.heads``,
``bpd.config.task``, ``bpd.config.corpora``), which ``bpd.config`` imports: configs, rows and the report read the
whole registry without torch. The implementations (``bpd.decoding.registry``, ``bpd.models.heads``, ``bpd.tasks``)
pair themselves with these entries by name and refuse to load with one missing on either side.

Plugins extend it from outside the library, as fairseq's ``--user-dir`` does: ``BPD_PLUGINS`` names modules (import
names, or paths of a module file or a package folder) that ``bpd.config`` imports before it makes anything from
the registry. A plugin's module declares, torch-free as the library's declarations; each entry it registers names
the module of its implementation (``module=``), which the implementations' lookup imports beside the library's own.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: The kinds of entry, each its own name space.
KINDS = ("method", "head", "task", "corpus")
#: The environment variable naming the plugins, comma-separated.
PLUGINS = "BPD_PLUGINS"


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    options: Any = None  # its own options' type (None: it takes none)
    info: Any = None  # what its kind records about it
    module: str | None = None  # a plugin's entry: the module implementing it (the library's are found in bpd/)


_ENTRIES: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
#: The kinds that configs or implementations were made from: a later entry would be missing from them.
_MADE: set[str] = set()
_plugins_loaded = False


def register(kind: str, name: str, options: Any = None, info: Any = None, module: str | None = None) -> Entry:
    """Add ``name`` to ``kind``'s entries; a name is registered once (a second module claiming it is refused).
    ``module``: where a plugin's implementation is (``implementations`` imports it)."""
    if kind not in _ENTRIES:
        raise ValueError(f"unknown registry kind {kind!r}; use one of {', '.join(KINDS)}.")
    if name in _ENTRIES[kind]:
        raise ValueError(f"the {kind} {name!r} is registered twice; give each {kind} its own name.")
    if kind in _MADE:
        raise RuntimeError(f"the {kind} {name!r} is registered after configs or implementations were made from the "
                           f"{kind}s; register it in bpd/config/ or in a plugin named by {PLUGINS} (a plugin's "
                           "declarations import bpd.config.registry, methods, heads, corpora and common only).")
    entry = Entry(kind, name, options, info, module)
    _ENTRIES[kind][name] = entry
    return entry


def entries(kind: str) -> dict[str, Entry]:
    """``kind``'s entries by name, in registration order (a copy: the registry changes only by ``register``)."""
    return dict(_ENTRIES[kind])


def made_from(kind: str) -> dict[str, Entry]:
    """``kind``'s entries, for something made from all of them (``MethodsConfig``, the task configs' corpora,
    the implementations): the plugins are imported first, and ``kind`` takes no entry after."""
    load_plugins()
    _MADE.add(kind)
    return entries(kind)


def names(kind: str) -> tuple[str, ...]:
    return tuple(_ENTRIES[kind])


def lookup(kind: str, name: object, where: str) -> Entry:
    """The entry ``name`` of ``kind``, refused with the choices (``where``: the option that named it)."""
    if not isinstance(name, str) or name not in _ENTRIES[kind]:
        raise ValueError(f"unknown {where} {name!r}; choose one of {', '.join(_ENTRIES[kind])}.")
    return _ENTRIES[kind][name]


def plugins() -> tuple[str, ...]:
    """The plugins ``BPD_PLUGINS`` names, in its order."""
    return tuple(p.strip() for p in os.environ.get(PLUGINS, "").split(",") if p.strip())


class PluginError(ValueError):
    """A plugin ``BPD_PLUGINS`` names that cannot be loaded: one sentence naming it and the fix."""


def load_plugins() -> None:
    """Import every plugin once: a path (``my_ext/``, ``my_ext.py``) as fairseq imports a ``--user-dir``, its
    folder put on ``sys.path`` (so its implementation modules import by name too); anything else by its name.
    Whatever goes wrong is a ``PluginError`` naming the plugin and the fix."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True  # first: a plugin's own import of bpd.config comes back here
    for plugin in plugins():
        _load_plugin(plugin)


def _load_plugin(plugin: str) -> None:
    path = Path(plugin)
    is_path = plugin.endswith(".py") or "/" in plugin or os.sep in plugin or path.is_dir()
    name = path.stem if is_path else plugin
    fix = f"fix it or remove it from {PLUGINS}"
    if is_path:
        if not path.exists():
            raise PluginError(f"the plugin {plugin} ({PLUGINS}) does not exist; give the path of a module file or a "
                              f"package folder, or remove it from {PLUGINS}.")
        sys.path.insert(0, str(path.resolve().parent))
    torch_before = "torch" in sys.modules
    try:
        module = importlib.import_module(name)
    except SyntaxError as e:
        raise PluginError(f"the plugin {plugin} ({PLUGINS}) has a syntax error in {e.filename} line {e.lineno} "
                          f"({e.msg}); {fix}.") from None
    except ModuleNotFoundError as e:
        if e.name != name:  # the plugin itself imports what is missing
            raise PluginError(f"the plugin {plugin} ({PLUGINS}) imports {e.name!r}, which is not installed; install "
                              f"it, or remove the plugin from {PLUGINS}.") from None
        raise PluginError(f"the plugin {plugin} ({PLUGINS}) is no importable module; give its import name or the path "
                          f"of its file or folder, or remove it from {PLUGINS}.") from None
    except Exception as e:  # whatever the plugin's own code raises while it declares
        raise PluginError(f"the plugin {plugin} ({PLUGINS}) failed while it was imported ({type(e).__name__}: {e}); "
                          f"{fix}.") from None
    file = getattr(module, "__file__", None)
    found = {Path(f).resolve() for f in [*getattr(module, "__path__", []), *([file] if file else [])]}
    if is_path and path.resolve() not in found | {f.parent for f in found}:
        # An import by the file's stem finds any module of that name first (``typing.py`` is the standard library's).
        raise PluginError(f"the plugin {plugin} ({PLUGINS}) is named {name!r} like the module {file or name}, "
                          "imported instead; rename its file or folder.")
    if not torch_before and "torch" in sys.modules:
        raise PluginError(f"the plugin {name} imports torch where it declares; configs and the report read "
                          "declarations without torch: keep torch in the modules its entries name (module=).")


def implementations(kind: str, package: str, base: type, attr: str, declared: Sequence[str] | None = None
                    ) -> dict[str, type]:
    """The classes that implement ``kind``'s ``declared`` entries (default: all of them), by name in registration
    order: every subclass of ``base`` defined in ``package`` (a module, or each module of a package) or in the
    module a plugin's entry names, and naming its entry in a class attribute ``attr`` of its own (``paired``
    refuses a missing, doubled or undeclared one). Implementations are found this way, never listed."""
    every = made_from(kind)
    declared = tuple(every) if declared is None else tuple(declared)
    top = importlib.import_module(package)
    modules = [importlib.import_module(i.name) for i in pkgutil.iter_modules(top.__path__, package + ".")] \
        if hasattr(top, "__path__") else [top]
    modules += [importlib.import_module(e.module) for e in every.values() if e.module and e.name in declared]
    found = [c for module in dict.fromkeys(modules) for c in vars(module).values()
             if isinstance(c, type) and issubclass(c, base) and c is not base and c.__module__ == module.__name__
             and attr in vars(c)]
    return paired(kind, [(getattr(c, attr), c) for c in found], declared, package)


def paired(kind: str, found: list[tuple[str, T]], declared: Sequence[str], package: str) -> dict[str, T]:
    """``found`` (name, implementation) by name in the order of ``declared``, refused unless every declared name
    has exactly one implementation and every implementation is declared."""
    got = [n for n, _ in found]
    twice = sorted({n for n in got if got.count(n) > 1})
    missing = [n for n in declared if n not in got]
    undeclared = [n for n in got if n not in declared]
    if twice or missing or undeclared:
        raise RuntimeError(
            f"the {kind} implementations of {package} must implement the {kind}s registered in bpd/config/ or by "
            f"a plugin (whose entries name their module), every name once: implemented twice {twice}, declared "
            f"without an implementation {missing}, implemented without a declaration {undeclared}.")
    by_name = dict(found)
    return {n: by_name[n] for n in declared}
