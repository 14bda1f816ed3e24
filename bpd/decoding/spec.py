"""Which decoders an evaluation or benchmark runs: ``DecodeSpec`` (one decoder with its options), the list of
them a ``DecodeConfig`` asks for, and the function that runs each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from bpd.config import DecodeConfig, parse_tree_shape
from bpd.decoding.beam import beam_decode
from bpd.decoding.blockwise import blockwise_decode
from bpd.decoding.criteria import make_criterion
from bpd.decoding.draft import draft_decode
from bpd.decoding.greedy import greedy_decode, naive_greedy_decode
from bpd.decoding.rescore import NgramLM, Rescorer
from bpd.decoding.tree import TreeShape, tree_decode

METHODS = ("greedy", "beam", "blockwise", "naive_greedy", "tree", "draft", "rescored")
#: Methods that verify proposals in rounds (their rows carry k, criterion and k_hat).
ROUND_METHODS = ("blockwise", "tree", "draft", "rescored")


@dataclass
class DecodeAux:
    """What some decoders need beside the model: the draft model (``draft``) and the n-gram model that
    rescores the heads' lattice (``rescored``)."""

    draft: Any = None
    lm: NgramLM | None = None


@dataclass(frozen=True)
class DecodeSpec:
    method: str  # greedy | beam | blockwise | naive_greedy | tree | draft | rescored
    k: int = 1
    criterion: str = "exact"
    criterion_param: float | None = None
    min_block_size: int = 1
    beam_size: int = 4
    alpha: float = 0.6
    tree: str | None = None  # method tree: the shape (bpd.decoding.tree.TreeShape.parse: "3x2x1", "beam4", "chain+1")
    rescore_beam: int = 0  # method rescored: candidates per depth of the lattice
    rescore_weight: float = 0.0  # method rescored: the n-gram model's weight beside the heads' log-probability

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown decoding method {self.method!r}; use {', '.join(METHODS)}.")
        if self.method in ROUND_METHODS:
            make_criterion(self.criterion, self.criterion_param, self.min_block_size)  # validates early
        if self.method == "tree":
            TreeShape.parse(self.tree or "", self.k)  # validates early

    @cached_property  # frozen dataclass: cached_property writes the instance dict, not a field
    def shape(self) -> TreeShape | None:
        return TreeShape.parse(self.tree, self.k) if self.method == "tree" else None

    def columns(self) -> dict[str, Any]:
        """The row columns that identify this decoder (None where a field does not apply)."""
        bw = self.method in ROUND_METHODS
        return {
            "decoder": self.name,
            "method": self.method,
            "k": self.k if bw else 1,
            "criterion": self.criterion if bw else None,
            "criterion_param": self.criterion_param if bw else None,
            "min_block_size": self.min_block_size if bw else None,
            # What the rule really is: a minimum block size > 1 overrides acceptance, so such "exact" rows are
            # approximate (their outputs need not equal greedy's).
            "criterion_label": self.criterion_label if bw else None,
            "beam_size": self.beam_size if self.method == "beam" else None,
            "tree": self.shape.name if self.method == "tree" else None,
            "tree_nodes": self.shape.n_nodes if self.method == "tree" else None,
            "rescore_beam": self.rescore_beam if self.method == "rescored" else None,
            "rescore_weight": self.rescore_weight if self.method == "rescored" else None,
        }

    @property
    def criterion_label(self) -> str:
        base = self.criterion if self.criterion == "exact" else f"{self.criterion} {self.criterion_param:g}"
        return base if self.min_block_size == 1 else f"{base}, min block {self.min_block_size} (approximate)"

    @cached_property
    def name(self) -> str:
        if self.method == "beam":
            return f"beam{self.beam_size}_a{self.alpha:g}"
        if self.method not in ROUND_METHODS:
            return self.method
        p = "" if self.criterion == "exact" else f"{self.criterion_param:g}"
        m = "" if self.min_block_size == 1 else f"_l{self.min_block_size}"
        if self.method == "tree":
            return f"tree_{self.shape.name}_k{self.k}_{self.criterion}{p}"
        if self.method == "draft":
            return f"draft_k{self.k}_{self.criterion}{p}"
        if self.method == "rescored":
            return f"rescored_b{self.rescore_beam}_w{self.rescore_weight:g}_k{self.k}_{self.criterion}{p}"
        return f"blockwise_k{self.k}_{self.criterion}{p}{m}"


def decode_specs(decode: DecodeConfig, trained_k: int, draft: bool = False) -> list[DecodeSpec]:
    """Greedy first (every ratio's reference), then naive greedy and beam if asked, then blockwise search for
    every criterion x minimum block size x k (k = 1 only with plain exact acceptance: it is greedy), then tree
    verification for every shape of ``decode.trees`` x criterion x k >= 2 that the shape fits, rescored
    chains for every ``decode.rescore`` entry x criterion x k >= 2, then (with ``draft``) draft-model
    speculative decoding for every criterion x k >= 2."""
    decode.validate(trained_k)
    specs = [DecodeSpec("greedy")]
    if decode.naive_greedy:
        specs.append(DecodeSpec("naive_greedy"))
    if decode.beam_size:
        specs.append(DecodeSpec("beam", beam_size=decode.beam_size, alpha=decode.alpha))
    for crit in decode.criteria:
        for l in crit.min_block_sizes:
            for k in decode.ks:
                if (k == 1 and (crit.name != "exact" or l != 1)) or l > k:
                    continue  # k = 1 approximate is greedy; a block of k tokens cannot hold l > k
                specs.append(DecodeSpec("blockwise", k=k, criterion=crit.name, criterion_param=crit.param,
                                        min_block_size=int(l)))
    specs += tree_specs(decode.trees, decode.ks, decode.criteria)
    specs += rescore_specs(decode.rescore, decode.ks, decode.criteria)
    if draft:
        specs += draft_specs(decode.ks, decode.criteria)
    return specs


def draft_specs(ks: list[int], criteria: list) -> list[DecodeSpec]:
    """Draft-model speculative decoding for every criterion x k >= 2 (no minimum block sizes)."""
    return [DecodeSpec("draft", k=k, criterion=c.name, criterion_param=c.param) for c in criteria for k in ks if k >= 2]


def rescore_specs(rescore: list, ks: list[int], criteria: list) -> list[DecodeSpec]:
    """Rescored chains for every ``RescoreConfig`` x criterion x k >= 2."""
    return [DecodeSpec("rescored", k=k, criterion=c.name, criterion_param=c.param, rescore_beam=r.beam,
                       rescore_weight=r.weight) for r in rescore for c in criteria for k in ks if k >= 2]


def tree_specs(trees: list[str], ks: list[int], criteria: list) -> list[DecodeSpec]:
    """Tree verification for every shape x criterion x k >= 2 the shape fits (widths deeper than k - 1 slots
    are skipped at that k)."""
    out = []
    for shape in trees:
        for crit in criteria:
            for k in ks:
                beam, widths, extra = parse_tree_shape(shape)
                # A budgeted tree grows to any k; the chain of a 'chain+...' shape does too, its extra paths do not.
                depth = 1 if beam else len(widths) or max(len(p) for p in extra)
                if k >= 2 and depth <= k - 1:
                    out.append(DecodeSpec("tree", k=k, criterion=crit.name, criterion_param=crit.param, tree=shape))
    return out


def decoder_fn(spec: DecodeSpec, criterion_kwargs: dict[str, Any] | None = None, aux: DecodeAux | None = None
               ) -> Callable:
    """``fn(model, src, max_len) -> DecodeResult`` for the spec (a task's criterion options included; ``aux``:
    the draft model or n-gram model the spec needs)."""
    aux = aux or DecodeAux()
    if spec.method == "greedy":
        return lambda m, s, n: greedy_decode(m, s, max_len=n)
    if spec.method == "naive_greedy":
        return lambda m, s, n: naive_greedy_decode(m, s, max_len=n)
    if spec.method == "beam":
        return lambda m, s, n: beam_decode(m, s, beam_size=spec.beam_size, alpha=spec.alpha, max_len=n)
    crit = make_criterion(spec.criterion, spec.criterion_param, spec.min_block_size, **(criterion_kwargs or {}))
    if spec.method == "tree":
        shape = spec.shape
        return lambda m, s, n: tree_decode(m, s, shape, k=spec.k, criterion=crit, max_len=n)
    if spec.method == "draft":
        if aux.draft is None:
            raise ValueError(f"{spec.name} needs a draft model; set draft.model (e.g. draft=tiny).")
        return lambda m, s, n: draft_decode(m, aux.draft, s, k=spec.k, criterion=crit, max_len=n)
    if spec.method == "rescored":
        if aux.lm is None:
            raise ValueError(f"{spec.name} needs an n-gram model of the training targets (bpd.decoding.rescore).")
        rescorer = Rescorer(aux.lm, spec.rescore_beam, spec.rescore_weight)
        return lambda m, s, n: blockwise_decode(m, s, k=spec.k, criterion=crit, max_len=n, proposer=rescorer)
    return lambda m, s, n: blockwise_decode(m, s, k=spec.k, criterion=crit, max_len=n)
