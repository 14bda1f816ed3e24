"""Translating your own text (``experiments/translate.py``, ``bpd.translate``): which model, which decoder, what
to print. The decoder is a registered method by name with the options that method takes: the round options
shared by the methods with rounds, and its own (``methods.<name>``, one decoder's worth of the type its
declaration names, made from the registry: a plugin's method brings its own); the others are left at their
defaults and not passed."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, get_origin

from bpd.config.common import check
from bpd.config.decode import ENGINES
from bpd.config.methods import DECODE_METHODS, MethodOptions
from bpd.config.registry import entries


@dataclass
class TranslateConfig:
    checkpoint: str | None = None  # a .pt file, or a shipped model's name (checkpoints/<name>.pt)
    tokenizer: str | None = None  # its sentencepiece model; default: the one shipped for its corpus
    text: list[str] = field(default_factory=list)  # sentences (translate.py also takes them as bare arguments)
    input: str | None = None  # a file of sentences, one a line; "-": standard input
    method: str = "greedy"  # a registered method: greedy, beam, blockwise, tree, naive_greedy (CLI: also decode=)
    k: int = 4  # methods with rounds: the block size
    criterion: str = "exact"  # exact | topk
    criterion_param: float | None = None  # topk: n (default 2)
    min_block_size: int = 1
    # Each method's own options: methods.beam.size=8, methods.beam.alpha=1.0, methods.tree=beam4
    methods: MethodOptions = field(default_factory=MethodOptions)
    batch_size: int = 1  # sentences decoded together (1: as the evaluation decodes, token for token)
    stats: bool = False  # also decode with greedy and print k-hat, rounds and time against it (stderr)
    allow_unknown: bool = False  # translate lines with characters the vocabulary lacks (read as <unk>)
    shipped_dir: str = "checkpoints"  # where shipped models and their tokenizers are looked for
    threads: int | None = 1  # torch threads (null: torch's default)
    engine: str = "eager"  # decode path: eager | static | compiled (compiled steps kept under cache_dir/compiled)
    cache_dir: str = "outputs/cache"  # where compiled steps are kept (the experiments' stage cache)
    plugins: list[str] = field(default_factory=list)  # as the experiments': loaded before the config is composed

    def method_options(self, option_names: tuple[str, ...]) -> dict[str, Any]:
        """The options of this config the method takes (``option_names``: its decoder's fields; a method's own
        options are one field, under its name)."""
        param = 2.0 if self.criterion == "topk" and self.criterion_param is None else self.criterion_param
        values = {"k": self.k, "criterion": self.criterion, "criterion_param": param,
                  "min_block_size": self.min_block_size} | {f.name: getattr(self.methods, f.name)
                                                            for f in fields(self.methods)}
        return {name: values[name] for name in option_names if name in values}

    def validate(self) -> TranslateConfig:
        check(bool(self.checkpoint), "name a model: checkpoint=<file.pt> or a shipped one, e.g. "
              "checkpoint=debian_en_de_base.")
        # A method that builds a second model beside the checkpoint (a draft, an n-gram model of the training
        # targets) builds it from an evaluation's corpus: a translation of free text has none.
        auxiliary = self.method in DECODE_METHODS and DECODE_METHODS[self.method].auxiliary
        free = ", ".join(name for name, info in DECODE_METHODS.items() if not info.auxiliary)
        check(not auxiliary, f"decode={self.method} needs a second model beside the checkpoint (a draft or n-gram "
              f"model built from the corpus); use experiments/run.py for it, or one of {free} here.")
        self.check_own()
        check(self.batch_size >= 1, f"batch_size must be >= 1 (got {self.batch_size}).")
        check(self.engine in ENGINES, f"engine={self.engine} is not a decode path; use one of {', '.join(ENGINES)}.")
        check(self.k >= 1, f"k must be >= 1 (got {self.k}): a round proposes k tokens; k=1 is greedy.")
        # 0 would read as "unset" and silently run on torch's default count: refused as the experiments refuse it.
        check(self.threads is None or self.threads >= 1,
              f"threads must be >= 1, or null for torch's default (got {self.threads}).")
        return self

    def check_own(self) -> None:
        """The chosen method's own options checked as its declaration checks them (``methods.<name>``)."""
        own, where = getattr(self.methods, self.method, None), f"methods.{self.method}"
        if own is None:
            return
        if is_dataclass(own) and hasattr(own, "validate"):
            own.validate(where)
        declared = entries("method")[self.method]
        if declared.info.check is not None:  # written for what a config holds: one item of a list is a list of one
            declared.info.check([own] if get_origin(declared.options) is list else own, where)
