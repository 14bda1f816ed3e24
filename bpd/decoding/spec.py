"""Which decoders an evaluation or benchmark runs: ``DecodeSpec`` (a registered method with its options, the
request its callers hand to ``Method.decode``), the list of them a ``DecodeConfig`` or ``BenchConfig`` asks for,
and what their methods build beside the model (``prepare``, once per run). Everything method-specific is the
method's own (``bpd.decoding.registry``, each method reading its own options in ``decode.methods``); nothing here
tests a method's name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import MISSING, Field, dataclass, field, replace
from functools import cached_property
from typing import Any

from bpd.config import BenchConfig, DecodeConfig
from bpd.config.common import plain
from bpd.config.registry import kept
from bpd.decoding.method import Method, Options, Plan, Prepared, Resources, Role, RoundOptions, own_fields
from bpd.decoding.registry import METHODS, registered

__all__ = ["DecodeSpec", "Plan", "Prepared", "Resources", "bench_specs", "decode_specs", "prepare", "specs_for"]

#: Row columns every decoder's row has, the method's options filling what applies: the design's decoder
#: columns (``RoundOptions.columns``), then each method's own in registry order.
COLUMNS: dict[str, Any] = kept(lambda: {c: None for c in RoundOptions().columns()} | {"k": 1} | {
    c: None for m in METHODS.values() for c in m.own_columns} | {"engine": "eager"})


def _default(f: Field) -> Any:
    return plain(f.default_factory() if f.default is MISSING else f.default)


#: The ``spec`` row column: every option of every method (a method's own under its name), at its default where
#: this method has no such option.
RECORD: dict[str, Any] = kept(lambda: {
    f.name: _default(f) for cls in (RoundOptions, *(m.options for m in METHODS.values())) for f in own_fields(cls)})


@dataclass(frozen=True, init=False)
class DecodeSpec:
    """One decoder configuration: ``DecodeSpec("blockwise", k=4, criterion="topk", criterion_param=2)``, decoded
    by ``spec.entry.decode(model, src, max_len, spec.options, prepared)``. Its options read as attributes
    (``spec.k``; k = 1 for methods without rounds); ``engine`` (the decode path asked for) is one of them."""

    method: str
    options: Options
    entry: Method = field(compare=False, repr=False)  # the registered method, whose ``decode`` decodes it

    def __init__(self, method: str, options: Options | None = None, engine: str | None = None,
                 **option_values: Any) -> None:
        m = registered(method)
        if options is None:
            options = m.make_options(**option_values, **({} if engine is None else {"engine": engine}))
        elif type(options) is not m.options or option_values:
            raise ValueError(f"give {method!r} either a {m.options.__name__} or its option values.")
        elif engine is not None and engine != options.engine:
            options = replace(options, engine=engine)
        m.check(options)
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "entry", m)

    def __getattr__(self, name: str) -> Any:
        """Options as attributes; only called for names the spec itself lacks."""
        if name.startswith("__") or name in ("method", "options", "entry"):
            raise AttributeError(name)
        return getattr(self.options, name)

    def on(self, engine: str) -> DecodeSpec:
        """The same decoder on another decode path."""
        return DecodeSpec(self.method, self.options, engine=engine)

    @property
    def baseline(self) -> str:
        """How rows name this decoder when a speedup divides by it (the ``baseline`` column): method and decode
        path, e.g. ``greedy/compiled``."""
        return f"{self.method}/{self.path}"

    @property
    def engine(self) -> str:
        """The decode path asked for (``decode.engine``); ``path`` is the one the method takes."""
        return self.options.engine

    @property
    def path(self) -> str:
        """The decode path this decoder runs on: the engine asked for where the method has it, else eager."""
        return self.entry.engine_of(self.engine)

    @property
    def key(self) -> str:
        """What tells this decoder apart when several paths decode in one run (the benchmark's): its name, with
        ``@<path>`` off the eager path."""
        return self.name if self.path == "eager" else f"{self.name}@{self.path}"

    @property
    def role(self) -> Role:
        return self.entry.role

    @property
    def rounds(self) -> bool:
        """Verifies proposals in rounds (rows carry k, the criterion and k̂)."""
        return self.entry.rounds

    @cached_property  # frozen dataclass: cached_property writes the instance dict, not a field
    def name(self) -> str:
        return self.entry.decoder_name(self.options)

    def columns(self) -> dict[str, Any]:
        """The row columns that identify this decoder (None where a column does not apply)."""
        return {"decoder": self.name, "method": self.method, **COLUMNS, **self.entry.columns(self.options),
                "engine": self.path}

    def record(self) -> dict[str, Any]:
        """The ``spec`` row column: the method and every option (other methods' at their defaults)."""
        return {"method": self.method, **RECORD, **{f.name: plain(getattr(self.options, f.name))
                                                     for f in own_fields(self.options)}}

    @property
    def step_cost_key(self) -> str | None:
        return self.entry.step_cost_key(self.options)

    @property
    def start_cost_key(self) -> str | None:
        return self.entry.start_cost_key(self.options)


def specs_for(plan: Plan, methods: Any, engine: str = "eager") -> list[DecodeSpec]:
    """Every method's configurations that ``plan`` and ``methods`` (a ``MethodsConfig``: each method's own
    options) ask for, methods in registry order (greedy, every ratio's reference, first), on the decode path
    ``engine`` (where a method has it)."""
    return [DecodeSpec(name, o, engine=engine) for name, m in METHODS.items()
            for o in m.sweep(plan, getattr(methods, name, None))]


def decode_specs(decode: DecodeConfig, trained_k: int, models: Iterable[str] = ()) -> list[DecodeSpec]:
    """What an evaluation decodes: greedy, then each method's configurations at every criterion x minimum block
    size x k that applies to it (``models``: the methods whose auxiliary checkpoint the run has, e.g. draft)."""
    decode.validate(trained_k)
    plan = Plan(tuple(decode.ks), tuple(decode.criteria), models=frozenset(models))
    return specs_for(plan, decode.methods, decode.engine)


def bench_specs(bench: BenchConfig, ks: list[int], models: Iterable[str] = ()) -> list[DecodeSpec]:
    """What the benchmark times at the decode-time ``ks``: as ``decode_specs``, the chain at l = 1 only."""
    plan = Plan(tuple(ks), tuple(bench.criteria), floors=False, models=frozenset(models))
    return specs_for(plan, bench.methods)


def prepare(specs: list[DecodeSpec], task, model, resources: Resources) -> Prepared:
    """What the decoders of ``specs`` are handed beside their options, built once per run: the task's criterion
    options and what each of their methods builds beside the model (``Method.prepare``), by method name."""
    built = {name: METHODS[name].prepare(task, model, resources) for name in dict.fromkeys(s.method for s in specs)}
    return Prepared(task.criterion_kwargs, {name: value for name, value in built.items() if value is not None})
