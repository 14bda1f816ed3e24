"""What a decoding method is to the rest of the harness: its decoders' names and row columns, which
configurations an evaluation or benchmark runs, what it builds beside the model, and ``decode``, which decodes a
batch with given options. One subclass of ``Method`` per method, in a module of ``bpd/decoding/methods/`` where
``bpd.decoding.registry`` finds it; ``bpd.decoding.spec.DecodeSpec`` pairs a method with its options.

Rows, tables and the benchmark ask a method what it is (``role``, ``rounds``, ``exact``) rather than testing its
name. All of that is its torch-free declaration's (``bpd/config/methods/``, registered under its name, beside the
one dataclass of its options), so the report knows every method without importing torch; a decoder's options
(``options_type``) are the shared ones plus that dataclass's value, read as it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, is_dataclass, make_dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from bpd.config import CriterionConfig
from bpd.config.methods import DECODE_METHODS, MethodInfo, Role
from bpd.decoding.criteria import make_criterion
from bpd.decoding.engine import checked_engine
from bpd.decoding.result import DecodeResult


@dataclass(frozen=True)
class Options:
    """The shared decode setting every method is handed: ``engine``, the decode path asked for (``decode.engine``;
    a method without that path decodes eagerly, ``Method.engine_of``). One-token-a-step methods decode k = 1 and
    carry no criterion. A method with options of its own decodes with ``options_type``'s subclass, which holds
    them under its name."""

    k: ClassVar[int] = 1
    #: The field holding the method's own options (``options_type``); None: it has none.
    OWN: ClassVar[str | None] = None
    # Keyword-only, so that the round options keep their positions (``RoundOptions(k, criterion)``).
    engine: str = field(default="eager", kw_only=True)

    def __post_init__(self) -> None:
        checked_engine(self.engine)  # refused before any decoding

    @property
    def own(self) -> Any:
        """The method's own options, of their declared type (``bpd/config/methods/``): a ``BeamOptions``, a lattice,
        a tree shape; None for a method without."""
        return None if self.OWN is None else getattr(self, self.OWN)

    def columns(self) -> dict[str, Any]:
        """The row columns these options fill (the others keep ``DecodeSpec.columns``' defaults: k = 1, None)."""
        return {}


@dataclass(frozen=True)
class RoundOptions(Options):
    """Options of methods that verify proposals in rounds: decode-time k, the acceptance criterion and the
    minimum block size (the row columns every round method fills)."""

    k: int = 1
    criterion: str = "exact"
    criterion_param: float | None = None
    min_block_size: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        make_criterion(self.criterion, self.criterion_param, self.min_block_size)  # refused before any decoding

    @property
    def criterion_label(self) -> str:
        """What the rule really is: a minimum block size > 1 overrides acceptance, so such "exact" rows are
        approximate (their outputs need not equal greedy's)."""
        base = self.criterion if self.criterion == "exact" else f"{self.criterion} {self.criterion_param:g}"
        return base if self.min_block_size == 1 else f"{base}, min block {self.min_block_size} (approximate)"

    @property
    def criterion_suffix(self) -> str:
        """The criterion as decoder names spell it: ``exact``, ``topk2``."""
        return self.criterion + ("" if self.criterion == "exact" else f"{self.criterion_param:g}")

    @property
    def exact(self) -> bool:
        """Exact acceptance without a forced block: the output is greedy's."""
        return self.criterion == "exact" and self.min_block_size == 1

    def criterion_for(self, criterion_kwargs: dict[str, Any] | None = None):
        """The acceptance criterion, with a task's options (e.g. the pixel vocabulary of a distance rule)."""
        return make_criterion(self.criterion, self.criterion_param, self.min_block_size, **(criterion_kwargs or {}))

    def columns(self) -> dict[str, Any]:
        return {"k": self.k, "criterion": self.criterion, "criterion_param": self.criterion_param,
                "min_block_size": self.min_block_size, "criterion_label": self.criterion_label}


def own_fields(options: Options | type[Options]) -> tuple[Field, ...]:
    """A decoder's options without the shared ``engine``: what ``DecodeSpec("name", **values)`` sets (the round
    options, and the method's own under its name) and what the ``spec`` row column records (rows have an
    ``engine`` column of their own)."""
    return tuple(f for f in fields(options) if f.name != "engine")


#: By method and its options' type (a plugin loaded again brings its type anew).
_TYPES: dict[tuple[str, Any], type[Options]] = {}


def options_type(name: str, info: MethodInfo) -> type[Options]:
    """The type of one decoder's options of the method ``name``: the shared ones (``RoundOptions`` for a method with
    rounds, else ``Options``), and for a method with options of its own one field more, under its name, holding
    one value of their declared type as it is (``o.beam.size``, ``o.tree``, ``o.rescored.weight``). Made once per
    method from its declaration, so that the method's options are declared once (``bpd/config/methods/``)."""
    base = RoundOptions if info.rounds else Options
    if info.one is None:
        return base
    own = info.one
    if (name, own) not in _TYPES:
        # Not hashed: a config's options are plain (mutable) dataclasses; equal options still hash alike.
        default = field(default_factory=own, hash=False) if is_dataclass(own) else field(default=None, hash=False)
        cls = make_dataclass(name.title().replace("_", "") + "Decoding", [(name, own | None, default)], bases=(base,),
                             frozen=True, namespace={"OWN": name, "__module__": __name__})
        _TYPES[name, own] = globals()[cls.__name__] = cls  # found by name: pickled options load
    return _TYPES[name, own]


@dataclass(frozen=True)
class Plan:
    """What an evaluation or a benchmark asks of every method beside its own options: the decode-time ks, the
    criteria, ``floors`` (the evaluation decodes every minimum block size of each criterion, and k = 1 only where
    it is plain greedy: exact, l = 1; the benchmark times l = 1 at every k) and ``models``, the methods whose
    auxiliary checkpoint the run has (``Resources.models``)."""

    ks: tuple[int, ...]
    criteria: tuple[CriterionConfig, ...]
    floors: bool = True
    models: frozenset[str] = frozenset()

    @property
    def round_ks(self) -> tuple[int, ...]:
        """The ks with proposal slots to verify (k >= 2): below that, methods beyond the chain are greedy."""
        return tuple(k for k in self.ks if k >= 2)


@dataclass(frozen=True)
class Resources:
    """Where a run decodes, and the checkpoints its stages trained for a method, by method name (the draft
    model's, for ``draft``): what a method's ``prepare`` builds its own auxiliary model from. The part of the
    process's ``bpd.runtime.Runtime`` that decoding needs (this layer sits below it)."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    models: Mapping[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class Prepared:
    """What one run hands every ``Method.decode`` beside its options, built once (``bpd.decoding.spec.prepare``):
    the task's criterion options (e.g. the pixel range of a distance rule) and what each method built beside the
    model (``Method.prepare``: a draft model, an n-gram model), by method name."""

    criterion_kwargs: Mapping[str, Any] = field(default_factory=dict)
    built: Mapping[str, Any] = field(default_factory=dict)


#: A run that hands nothing beyond the options: no task criterion options, no auxiliary models.
NOTHING = Prepared()


class Method(ABC):
    """One decoding method (subclass per method; the registry holds one instance of each). What it is (role,
    label, exact, engines, quadratic) is its declaration's (``info``), read here."""

    name: ClassVar[str]  # its declaration's in ``bpd/config/methods/``: in rows and configs
    #: Row columns of its own beyond the common ones (``RoundOptions.columns``), filled by ``columns``.
    own_columns: ClassVar[tuple[str, ...]] = ()

    @property
    def info(self) -> MethodInfo:
        """Its torch-free declaration (``bpd.config.methods``)."""
        return DECODE_METHODS[self.name]

    @property
    def options(self) -> type[Options]:
        """The type of its decoders' options (``options_type``)."""
        return options_type(self.name, self.info)

    @property
    def exact(self) -> bool:
        """With exact acceptance its output is greedy's, token for token: the property test runs it against
        greedy."""
        return self.info.exact

    @property
    def quadratic(self) -> bool:
        """Recomputes the whole prefix at every step: the bench times it at batch 1 only."""
        return self.info.quadratic

    @property
    def engines(self) -> tuple[str, ...]:
        """The decode paths it has (``bpd.decoding.engine``): a method with a static path decodes on the one its
        options ask for; the others decode eagerly whatever ``decode.engine`` says (``engine_of`` tells which
        ran)."""
        return self.info.engines

    @property
    def role(self) -> Role:
        """Where it stands beside the others."""
        return self.info.role

    @property
    def label(self) -> str:
        """How tables and figures name it."""
        return self.info.label

    @property
    def order(self) -> int:
        """Its place among the methods: evaluations decode and tables list them by it."""
        return self.info.order

    def engine_of(self, engine: str) -> str:
        """The path this method decodes on when ``engine`` is asked for."""
        return engine if engine in self.engines else "eager"

    @property
    def rounds(self) -> bool:
        """Verifies proposals in rounds: its rows carry k, the criterion and k̂ (mean accepted block size)."""
        return self.info.rounds

    def make_options(self, **values: Any) -> Options:
        """Its decoder's options from their values (its own options as their type, or as a mapping of its fields)."""
        own = self.info.one
        try:
            if is_dataclass(own) and isinstance(values.get(self.name), dict):
                values[self.name] = own(**values[self.name])
            return self.options(**values)
        except TypeError as e:
            known = ", ".join(f.name for f in own_fields(self.options)) or "none"
            raise ValueError(f"decoding method {self.name!r} takes the options {known} (got {sorted(values)}): "
                             f"{e}.") from None

    def check(self, o: Options) -> None:
        """Refuse options none of its decoders takes, before any decoding: its own options' ``validate`` (where
        they have one); a method adds what depends on the round options too (a tree's depth against k)."""
        if hasattr(o.own, "validate"):
            o.own.validate(self.name)

    def columns(self, o: Options) -> dict[str, Any]:
        """The row columns ``o`` fills: the round options' (``RoundOptions.columns``), and its ``own_columns``."""
        return o.columns()

    def decoder_name(self, o: Options) -> str:
        """The decoder's name in rows, output folders and tables (unique per configuration)."""
        return self.name

    def sweep(self, plan: Plan, asked: Any) -> list[Options]:
        """The configurations of this method that a config asks for: ``plan`` (ks, criteria) and ``asked``, its
        own options there (``decode.methods.<name>``; None for a method without options). None by default."""
        return []

    def prepare(self, task, model, resources: Resources) -> Any:
        """What its decoders need beside the model, built once per run from the ``task`` (e.g. its training
        pairs), the ``model`` and the ``resources`` (e.g. a checkpoint its stage trained): an n-gram model, a draft
        model. None by default."""
        return None

    def built(self, run: Prepared, o: Options, needs: str) -> Any:
        """What ``prepare`` built for this run (``run.built``), refused with one sentence when it is missing:
        ``needs`` says what the decoder needs and how to get it."""
        built = run.built.get(self.name)
        if built is None:
            raise ValueError(f"{self.decoder_name(o)} needs {needs}")
        return built

    @abstractmethod
    def decode(self, model, src: torch.Tensor, max_len: int | None, o: Options, run: Prepared = NOTHING
               ) -> DecodeResult:
        """Decode the batch ``src`` (B, S) with options ``o``, on the path ``o.engine`` where the method has it
        (``engine_of``); ``run``: the task's criterion options and what ``prepare`` built (a method that needs
        the latter refuses with the fix when it is missing)."""

    def step_cost_key(self, o: Options) -> str | None:
        """The key of one step's (or round's) isolated cost in ``bpd.bench.step_costs.step_costs``, if it is timed."""
        return None

    def start_cost_key(self, o: Options) -> str | None:
        """The key of the propose-only start call's cost in ``bpd.bench.step_costs.step_costs``, if it is timed."""
        return None
