"""Every decoding method's implementation, by name, in ``bpd.config.methods.DECODE_METHODS``'s order (the order
evaluations decode and tables list them).

The implementations are found, not listed: every concrete ``Method`` subclass defined in a module of
``bpd/decoding/methods/`` (or in the module a plugin's declaration names, ``BPD_PLUGINS``), each paired by its
``name`` with the method's torch-free declaration in the registry (``bpd/config/methods/``: its role, label,
order, what it is, and the one dataclass of its options, which its decoders read as they are). A new method is
its declaration there, its module here (decoder name, row columns, sweep, ``prepare`` if it builds a model of its
own, decoder; its rounds run in ``bpd.decoding.loop``) and, if it is exact, its entry in the exact == greedy
property test (tests/test_decoding.py).
"""

from __future__ import annotations

from bpd.config import registry
from bpd.config.methods import DECODE_METHODS
from bpd.decoding import methods as methods_package
from bpd.decoding.method import Method


def discover() -> list[Method]:
    """One instance of every ``Method`` subclass of ``bpd.decoding.methods`` that names its method."""
    return [cls() for cls in registry.implementations("method", methods_package.__name__, Method, "name").values()]


def paired(found: list[Method]) -> dict[str, Method]:
    """The implementations by name in the declarations' order, refused unless every declared method has exactly
    one and every one is declared."""
    return registry.paired("method", [(m.name, m) for m in found], list(DECODE_METHODS), methods_package.__name__)


#: ``kept``: with a plugin loaded later, its methods too.
METHODS: dict[str, Method] = registry.kept(lambda: paired(discover()))


def registered(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown decoding method {name!r}; use {', '.join(METHODS)}.")
    return METHODS[name]


__all__ = ["DECODE_METHODS", "METHODS", "Method", "registered"]
