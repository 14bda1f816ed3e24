"""The decoding methods' declarations: each method's name, role beside the others, label and order, what it is
(exact, its decode paths, quadratic cost), and the options an evaluation or the benchmark asks of it
(``decode.methods.<name>``, ``bench.methods.<name>``): plain values that configs, rows and the report (which
imports no torch) share; rows and tables ask a method's role here instead of testing its name.

Every module of this package declares its methods (``declare``, one call beside its options' dataclass, which
registers them in ``bpd.config.registry``) and owns that dataclass: the one type of its options, which configs
hold and its decoder reads as it is (``bpd.decoding.method.Options``: a decoder's options are the shared ones
plus that value, under the method's name). The package imports each module it holds, so a new method is found,
not listed. Their decoders live in ``bpd/decoding/methods/`` (``bpd.decoding.registry`` pairs each one with its
declaration). A plugin declares its methods the same way, naming its decoder's module (``module=``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field, is_dataclass
from enum import IntEnum
from typing import Any, get_args, get_origin

from bpd.config.registry import entries, made, made_from, refill, register


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
    order: int  # its place among the methods: evaluations decode and tables list them by it
    # Its options' value in an evaluation and in the benchmark (None: as in an evaluation); methods without
    # options have neither.
    default: Callable[[], Any] | None = None
    bench_default: Callable[[], Any] | None = None
    # Refuses a bad value of its options with the fix, for options that are no dataclass with a ``validate`` of
    # their own (``where``: the option's path, e.g. decode.methods.tree).
    check: Callable[[Any, str], None] | None = None
    # It builds a model of its own beside the checkpoint (its decoder's ``prepare``): a draft, an n-gram model.
    auxiliary: bool = False
    # With exact acceptance its output is greedy's, token for token: the property test runs it against greedy.
    exact: bool = False
    # The decode paths it has (``decode.engine``): on another it decodes eagerly (its rows say which ran).
    engines: tuple[str, ...] = ("eager",)
    # Recomputes the whole prefix at every step (cost quadratic in length): the bench times it at batch 1 only.
    quadratic: bool = False
    # What one of its decoders holds of its options (``one``): the value of each item of a list it is asked for
    # (a lattice, a tree shape), the options themselves, or None (options that only switch it on: a bool).
    one: Any = None

    @property
    def rounds(self) -> bool:
        """Verifies proposals in rounds (the chain and the methods beyond it): its decoders take k, a criterion and
        a minimum block size, and its rows carry k-hat."""
        return self.role >= Role.CHAIN


def one_of(options: Any) -> Any:
    """What one decoder holds of a method's options type: ``list[X]`` -> X (each item asks for decoders), a bool
    -> None (it only switches the method on), anything else as it is."""
    if get_origin(options) is list:
        return get_args(options)[0]
    return None if options is None or options is bool else options


def declare(name: str, role: Role, label: str, order: int, options: Any = None, module: str | None = None,
            **info: Any) -> None:
    """Register a decoding method beside its options' type (``options``: what a config asks of it, a dataclass,
    a list of one, a bool; default: the type's own, an empty list, false; ``module``: a plugin's, where its
    decoder is)."""
    taken = [n for n, e in entries("method").items() if e.info.order == order]
    if taken:
        raise ValueError(f"the decoding method {name!r} takes order = {order}, already that of {taken[0]!r}; give "
                         "each method its own place.")
    if options is not None and info.get("default") is None:
        info["default"] = list if get_origin(options) is list else options
    register("method", name, options, MethodInfo(role, label, order, one=one_of(options), **info), module)


for _module in pkgutil.iter_modules(__path__, __name__ + "."):
    importlib.import_module(_module.name)

#: In the order evaluations decode and tables list them (greedy first: every ratio's reference), after the
#: plugins' declarations; made again in place when a plugin loads later (``registry.made``).
DECODE_METHODS: dict[str, MethodInfo] = {}
#: The methods that take options, with their types.
_OPTIONS: dict[str, Any] = {}


@dataclass
class MethodsConfig:
    """Each decoding method's options, by method name (``bpd.config.methods``): one field per method that takes
    options, of its own type, made from the registry."""


@dataclass
class MethodOptions:
    """What one decoder of each method that takes options holds of them (``MethodInfo.one``: one lattice, one tree
    shape, beam search's options), by method name: translate.py's ``methods.<name>``, made from the registry."""


@made
def _make() -> None:
    every = made_from("method")
    DECODE_METHODS.clear()
    DECODE_METHODS.update({e.name: e.info for e in sorted(every.values(), key=lambda e: e.info.order)})
    _OPTIONS.clear()
    _OPTIONS.update({name: every[name].options for name in DECODE_METHODS if every[name].options is not None})
    refill(MethodsConfig, [(name, options, field(default_factory=DECODE_METHODS[name].default))
                           for name, options in _OPTIONS.items()])
    refill(MethodOptions, [(name, one, field(default_factory=one)) if is_dataclass(one) else (name, one | None, None)
                           for name, info in DECODE_METHODS.items() if (one := info.one) is not None])


def role_of(name: object) -> Role | None:
    """The role of a row's ``method`` (None for rows no decoding method made, e.g. upsampling baselines)."""
    info = DECODE_METHODS.get(name) if isinstance(name, str) else None
    return info.role if info is not None else None


def methods_of(*roles: Role) -> list[str]:
    """The methods of these roles, in registry order."""
    return [name for name, info in DECODE_METHODS.items() if info.role in roles]


def bench_methods() -> Any:
    """The benchmark's default ``MethodsConfig`` (each method's ``bench_default``)."""
    return MethodsConfig(**{name: (DECODE_METHODS[name].bench_default or DECODE_METHODS[name].default)()
                            for name in _OPTIONS})


def check_methods(methods: Any, where: str) -> None:
    """Each method's options checked by their own ``validate`` (each item of a list; ``where``: decode.methods or
    bench.methods), or by its declaration's ``check``."""
    for name in _OPTIONS:
        value, path = getattr(methods, name), f"{where}.{name}"
        for i, item in enumerate(value) if isinstance(value, list) else [(None, value)]:
            if is_dataclass(item) and hasattr(item, "validate"):
                item.validate(path if i is None else f"{path}[{i}]")
        check = DECODE_METHODS[name].check
        if check is not None:
            check(value, path)


__all__ = ["DECODE_METHODS", "MethodInfo", "MethodOptions", "MethodsConfig", "Role", "bench_methods", "check_methods",
           "declare", "methods_of", "role_of"]
