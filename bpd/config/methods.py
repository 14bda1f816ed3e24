"""The decoding methods by name, each with its role beside the others and its label: plain values that configs,
rows and the report (which imports no torch) share. Their implementations are ``bpd.decoding.registry``'s
``METHODS``, in this order (tests/test_registry.py checks it); rows and tables ask a method's role here instead
of testing its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Role(IntEnum):
    """Where a method stands beside the others (tables list methods in this order)."""

    REFERENCE = 0  # greedy: every speedup, identity and quality ratio is measured against it
    BASELINE = 1  # other decoders without proposals (naive greedy, beam search): references of their own kind
    CHAIN = 2  # the paper's blockwise decoder
    BEYOND = 3  # decoders beyond the paper, also compared with the chain at the same k and criterion


@dataclass(frozen=True)
class MethodInfo:
    role: Role
    label: str  # how tables and figures name it


#: In the order evaluations decode and tables list them (greedy first: every ratio's reference).
DECODE_METHODS: dict[str, MethodInfo] = {
    "greedy": MethodInfo(Role.REFERENCE, "greedy"),
    "naive_greedy": MethodInfo(Role.BASELINE, "greedy without a cache"),
    "beam": MethodInfo(Role.BASELINE, "beam search"),
    "blockwise": MethodInfo(Role.CHAIN, "chain (the paper)"),
    "tree": MethodInfo(Role.BEYOND, "tree"),
    "rescored": MethodInfo(Role.BEYOND, "rescored chain"),
    "draft": MethodInfo(Role.BEYOND, "draft model"),
}


def role_of(name: object) -> Role | None:
    """The role of a row's ``method`` (None for rows no decoding method made, e.g. upsampling baselines)."""
    info = DECODE_METHODS.get(name) if isinstance(name, str) else None
    return info.role if info is not None else None


def methods_of(*roles: Role) -> list[str]:
    """The methods of these roles, in registry order."""
    return [name for name, info in DECODE_METHODS.items() if info.role in roles]
