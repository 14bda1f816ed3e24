"""The one registry of what the harness can be asked for by name: decoding methods, proposal-head architectures,
task kinds and corpora. Each registers itself with its name, its own options (a torch-free type: a dataclass, a
list of them, a bool; or none) and what its kind says about every entry (``info``: a method's role and label, a
head's chained slots, a corpus's task kind), as fairseq's ``register_task(name, dataclass)`` does.

Registration happens in torch-free declaration modules (``bpd.config.methods``, ``bpd.config.heads``,
``bpd.config.task``, ``bpd.config.corpora``), which ``bpd.config`` imports: configs, rows and the report read the
whole registry without torch. The implementations (``bpd.decoding.registry``, ``bpd.models.heads``, ``bpd.tasks``)
pair themselves with these entries by name and refuse to load with one missing on either side.

Plugins extend it from outside the library, as fairseq's ``--user-dir`` does: modules (import names, or paths of a
module file or a package folder) that ``BPD_PLUGINS`` names, which ``bpd.config`` imports before it makes anything
from the registry, or that ``load_plugins([...])`` imports later in the same process (the entry points load those
their config names so). A plugin's module declares, torch-free as the library's declarations; each entry it
registers names the module of its implementation (``module=``), which the implementations' lookup imports beside the
library's own. What is made from the registry (``made``, ``kept``: the configs' option types, the implementations
by name) is made again, in place, when a plugin loaded later adds entries.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, make_dataclass
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
#: What was made from the registry, each made again (in this order: a later one may read an earlier one) when a
#: plugin loaded later adds entries.
_MAKERS: list[Callable[[], None]] = []
#: The plugins loaded, in order, each with the name of the module it was imported as.
_LOADED: dict[str, str] = {}
#: A plugin is being imported: its entries may join kinds already made (which are then made again).
_loading = False
#: ``BPD_PLUGINS`` was read (once, at the first ``load_plugins``: later changes reach the processes started after).
_env_read = False


def register(kind: str, name: str, options: Any = None, info: Any = None, module: str | None = None) -> Entry:
    """Add ``name`` to ``kind``'s entries; a name is registered once (a second module claiming it is refused).
    ``module``: where a plugin's implementation is (``implementations`` imports it)."""
    if kind not in _ENTRIES:
        raise ValueError(f"unknown registry kind {kind!r}; use one of {', '.join(KINDS)}.")
    if name in _ENTRIES[kind]:
        raise ValueError(f"the {kind} {name!r} is registered twice; give each {kind} its own name.")
    if kind in _MADE and not _loading:
        raise RuntimeError(f"the {kind} {name!r} is registered after configs or implementations were made from the "
                           f"{kind}s; register it in bpd/config/ or in a plugin ({PLUGINS}, load_plugins; a plugin's "
                           "declarations import bpd.config.registry, methods, heads, corpora and common only).")
    entry = Entry(kind, name, options, info, module)
    _ENTRIES[kind][name] = entry
    return entry


def entries(kind: str) -> dict[str, Entry]:
    """``kind``'s entries by name, in registration order (a copy: the registry changes only by ``register``)."""
    return dict(_ENTRIES[kind])


def made_from(kind: str) -> dict[str, Entry]:
    """``kind``'s entries, for something made from all of them (``MethodsConfig``, the task configs' corpora,
    the implementations): the plugins are imported first, and ``kind`` takes no entry after but a plugin's."""
    load_plugins()
    _MADE.add(kind)
    return entries(kind)


def made(maker: Callable[[], None]) -> Callable[[], None]:
    """Run ``maker`` (which makes something from the registry, in place) now, and again whenever a plugin loaded
    later adds entries (a decorator)."""
    _MAKERS.append(maker)
    maker()
    return maker


def kept(make: Callable[[], dict[str, T]]) -> dict[str, T]:
    """The dict ``make()`` returns (implementations by name), made again in place when a plugin loaded later adds
    entries: modules that imported it see the new entries."""
    found: dict[str, T] = {}

    @made
    def remake() -> None:
        new = make()
        found.clear()
        found.update(new)

    return found


def refill(cls: type, fields: list[tuple[str, Any, Any]]) -> type:
    """The dataclass ``cls`` given ``fields`` (as ``make_dataclass`` takes them) in place of its own: the same class
    object (configs' field types and pickles name it), its fields made again from the registry."""
    new = make_dataclass(cls.__name__, fields)
    for attr in ("__annotations__", "__dataclass_fields__", "__dataclass_params__", "__init__", "__repr__", "__eq__",
                 "__match_args__"):
        setattr(cls, attr, getattr(new, attr))
    return cls


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


def loaded() -> tuple[str, ...]:
    """The plugins loaded in this process (``BPD_PLUGINS``'s and those given to ``load_plugins``), in order."""
    return tuple(_LOADED)


class PluginError(ValueError):
    """A plugin ``BPD_PLUGINS`` names that cannot be loaded: one sentence naming it and the fix."""


def load_plugins(named: Sequence[str] = ()) -> None:
    """Import the plugins ``BPD_PLUGINS`` names (at the first call) and ``named``, each once (a plugin loaded
    before is skipped, so its entries are added once): a path (``my_ext/``, ``my_ext.py``) as fairseq imports a
    ``--user-dir``, its folder put on ``sys.path`` (so its implementation modules import by name too); anything
    else by its name. What was made from the registry before is made again with their entries. Whatever goes
    wrong is a ``PluginError`` naming the plugin and the fix."""
    global _loading, _env_read
    env, _env_read = ([] if _env_read else plugins()), True
    new = [p for p in dict.fromkeys([*env, *named]) if p not in _LOADED]
    if not new:
        return
    _loading = True
    try:
        for plugin in new:
            _LOADED[plugin] = plugin  # first: a plugin's own import of bpd.config comes back here
            try:
                _LOADED[plugin] = _load_plugin(plugin)
            except BaseException:
                del _LOADED[plugin]  # not loaded: asked again, it fails again
                raise
    finally:
        _loading = False
    for maker in list(_MAKERS):
        maker()


@contextmanager
def extended(named: Sequence[str]) -> Iterator[None]:
    """The registry with the plugins ``named`` loaded, as it was again afterwards (entries, what was made from
    them, the plugins' modules and ``sys.path``): a test of a plugin leaves none of its entries to the others."""
    saved = ({kind: dict(e) for kind, e in _ENTRIES.items()}, dict(_LOADED), list(sys.path), set(sys.modules))
    try:
        load_plugins(named)
        yield
    finally:
        ours = {m for p, m in _LOADED.items() if p not in saved[1]}
        ours |= {e.module for kind in KINDS for e in _ENTRIES[kind].values() if e.module} - {
            e.module for kind in KINDS for e in saved[0][kind].values() if e.module}
        for kind in KINDS:
            _ENTRIES[kind] = saved[0][kind]
        _LOADED.clear()
        _LOADED.update(saved[1])
        sys.path[:] = saved[2]
        for name in set(sys.modules) - saved[3]:  # imported again, a plugin declares again
            if any(name == m or name.startswith(m + ".") for m in ours):
                del sys.modules[name]
        for maker in list(_MAKERS):
            maker()


def _load_plugin(plugin: str) -> str:
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
    return module.__name__


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
