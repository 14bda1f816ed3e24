"""Every decoding method's implementation, by name, in ``bpd.config.methods.DECODE_METHODS``'s order (the order
evaluations decode and tables list them).

The methods are found, not listed: every concrete ``Method`` subclass defined in a module of
``bpd/decoding/methods/``. A new method is one module there (its options, decoder name, row columns, sweep and
decoder, and its name, role, label and order as literals; its rounds run in ``bpd.decoding.loop``) and, if it is
exact, its entry in the exact == greedy property test (tests/test_decoding.py).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from bpd.config.methods import DECODE_METHODS, MethodInfo
from bpd.decoding import methods as methods_package
from bpd.decoding.method import Method


def discover() -> list[Method]:
    """One instance of every concrete ``Method`` subclass defined in ``bpd.decoding.methods``, in their order."""
    found = []
    for module_info in pkgutil.iter_modules(methods_package.__path__, methods_package.__name__ + "."):
        module = importlib.import_module(module_info.name)
        found += [cls() for cls in vars(module).values() if isinstance(cls, type) and issubclass(cls, Method)
                  and cls.__module__ == module.__name__ and not inspect.isabstract(cls)]
    return sorted(found, key=lambda m: m.order)


def checked(found: list[Method]) -> dict[str, Method]:
    """The methods by name, refused unless they are exactly what ``bpd.config.methods`` read from their source
    (what the report and configs see without importing them)."""
    imported = [(m.name, MethodInfo(m.role, m.label, m.order)) for m in found]
    if imported != list(DECODE_METHODS.items()):
        raise RuntimeError(
            f"the decoding methods imported from bpd/decoding/methods/ ({imported}) disagree with those "
            f"bpd.config.methods reads from their source ({list(DECODE_METHODS.items())}): declare name, role, "
            "label and order as literals in each method's class body, every name once.")
    return {m.name: m for m in found}


METHODS: dict[str, Method] = checked(discover())


def registered(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown decoding method {name!r}; use {', '.join(METHODS)}.")
    return METHODS[name]


__all__ = ["DECODE_METHODS", "METHODS", "Method", "registered"]
