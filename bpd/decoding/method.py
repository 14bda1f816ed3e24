"""What a decoding method is to the rest of the harness: its options, its decoders' names and row columns, which
configurations an evaluation or benchmark runs, what it builds beside the model, and ``decode``, which decodes a
batch with given options. One subclass of ``Method`` per method, in a module of ``bpd/decoding/methods/`` where
``bpd.decoding.registry`` finds it; ``bpd.decoding.spec.DecodeSpec`` pairs a method with its options.

Rows, tables and the benchmark ask a method what it is (``role``, ``rounds``) rather than testing its name. Its
role, label and order are its torch-free declaration's (``bpd/config/methods/``, registered under its name), so
the report knows every method without importing torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
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
    """A method's options (none of its own for greedy) and the shared decode setting every method is handed:
    ``engine``, the decode path asked for (``decode.engine``; a method without that path decodes eagerly,
    ``Method.engine_of``). One-token-a-step methods decode k = 1 and carry no criterion."""

    k: ClassVar[int] = 1
    # Keyword-only, so that a method's own options keep their positions (``RoundOptions(k, criterion)``).
    engine: str = field(default="eager", kw_only=True)

    def __post_init__(self) -> None:
        checked_engine(self.engine)  # refused before any decoding

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
    """A method's own options, without the shared ``engine``: what its config and ``DecodeSpec("name", **values)``
    set, and what the ``spec`` row column records (rows have an ``engine`` column of their own)."""
    return tuple(f for f in fields(options) if f.name != "engine")


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
    """One decoding method (subclass per method; the registry holds one instance of each)."""

    name: ClassVar[str]  # its declaration's in ``bpd/config/methods/``: in rows and configs
    options: ClassVar[type[Options]] = Options
    #: With exact acceptance its output is greedy's, token for token: the property test runs it against greedy.
    exact: ClassVar[bool] = False
    #: Row columns of its own beyond the common ones (``RoundOptions.columns``), filled by its options.
    own_columns: ClassVar[tuple[str, ...]] = ()
    #: Recomputes the whole prefix at every step (cost quadratic in length): the bench times it at batch 1 only.
    quadratic: ClassVar[bool] = False
    #: The decode paths it has (``bpd.decoding.engine``): a method with a static path decodes on the one its
    #: options ask for; the others decode eagerly whatever ``decode.engine`` says (``engine_of`` tells which ran).
    engines: ClassVar[tuple[str, ...]] = ("eager",)

    @property
    def info(self) -> MethodInfo:
        """Its torch-free declaration (``bpd.config.methods``)."""
        return DECODE_METHODS[self.name]

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
        return issubclass(self.options, RoundOptions)

    def make_options(self, **values: Any) -> Options:
        try:
            return self.options(**values)
        except TypeError as e:
            known = ", ".join(f.name for f in own_fields(self.options)) or "none"
            raise ValueError(f"decoding method {self.name!r} takes the options {known} (got {sorted(values)}): "
                             f"{e}.") from None

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
