"""Every decoding method's implementation, by name, in ``bpd.config.methods.DECODE_METHODS``'s order (the order
evaluations decode and tables list them).

A new method is a module with a ``Method`` subclass (``bpd.decoding.method``: its options, decoder name, row
columns, sweep and decoder; its rounds run in ``bpd.decoding.loop``), its line here and in ``DECODE_METHODS``
(role and label), and, if it is exact, its entry in the exact == greedy property test (tests/test_decoding.py).
"""

from __future__ import annotations

from bpd.config.methods import DECODE_METHODS
from bpd.decoding.beam import Beam
from bpd.decoding.blockwise import Blockwise
from bpd.decoding.draft import Draft
from bpd.decoding.greedy import Greedy, NaiveGreedy
from bpd.decoding.method import Method
from bpd.decoding.rescore import Rescored
from bpd.decoding.tree import TreeVerification

METHODS: dict[str, Method] = {m.name: m for m in (
    Greedy(),
    NaiveGreedy(),
    Beam(),
    Blockwise(),
    TreeVerification(),
    Rescored(),
    Draft(),
)}


def registered(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown decoding method {name!r}; use {', '.join(METHODS)}.")
    return METHODS[name]


__all__ = ["DECODE_METHODS", "METHODS", "Method", "registered"]
