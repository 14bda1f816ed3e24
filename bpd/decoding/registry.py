"""Every decoding method's implementation, by name, in ``bpd.config.methods.DECODE_METHODS``'s order (the order
evaluations decode and tables list them).

The implementations are found, not listed: every concrete ``Method`` subclass defined in a module of
``bpd/decoding/methods/``, each paired by its ``name`` with the method's torch-free declaration in the registry
(``bpd/config/methods/``: its role, label, order and the options a config asks of it). A new method is its
declaration there, its module here (options, decoder name, row columns, sweep, ``prepare`` if it builds a model
of its own, decoder; its rounds run in ``bpd.decoding.loop``) and, if it is exact, its entry in the exact ==
greedy property test (tests/test_decoding.py).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from bpd.config.methods import DECODE_METHODS
from bpd.decoding import methods as methods_package
from bpd.decoding.method import Method


def discover() -> list[Method]:
    """One instance of every concrete ``Method`` subclass defined in ``bpd.decoding.methods``."""
    found = []
    for module_info in pkgutil.iter_modules(methods_package.__path__, methods_package.__name__ + "."):
        module = importlib.import_module(module_info.name)
        found += [cls() for cls in vars(module).values() if isinstance(cls, type) and issubclass(cls, Method)
                  and cls.__module__ == module.__name__ and not inspect.isabstract(cls)]
    return found


def paired(found: list[Method]) -> dict[str, Method]:
    """The implementations by name in the declarations' order, refused unless every declared method has exactly
    one and every one is declared."""
    names = [m.name for m in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    missing = [n for n in DECODE_METHODS if n not in names]
    undeclared = [n for n in names if n not in DECODE_METHODS]
    if twice or missing or undeclared:
        raise RuntimeError(
            "the decoding methods of bpd/decoding/methods/ must implement those declared in bpd/config/methods/, "
            f"every name once: implemented twice {twice}, declared without an implementation {missing}, "
            f"implemented without a declaration {undeclared}.")
    by_name = {m.name: m for m in found}
    return {name: by_name[name] for name in DECODE_METHODS}


METHODS: dict[str, Method] = paired(discover())


def registered(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown decoding method {name!r}; use {', '.join(METHODS)}.")
    return METHODS[name]


__all__ = ["DECODE_METHODS", "METHODS", "Method", "registered"]
