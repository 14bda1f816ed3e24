"""Acceptance criteria for the verify step of blockwise decoding.

A criterion looks at the base model's logits at the position *before* each proposal (p_1's prediction
for that slot) and says, per slot, whether the proposed token is acceptable (``accept``). What a round
asks of it is one question, ``judge``: how many of these proposals are accepted, as a leading run? Where
that is decided (on the device from the logits, or on the host from p_1's argmax ids) is the criterion's
own business: the round synchronises once, and ``judge`` is that synchronisation.

Exact acceptance reproduces greedy decoding; the others trade fidelity for longer blocks (paper,
Section 5). Every criterion carries ``min_block_size`` (the paper's l): at least that many tokens are
accepted per round whatever the verify step says (still capped by k, EOS and max_len).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bpd.config.common import CRITERIA
from bpd.models.fastpath import top1


@dataclass(frozen=True)
class Verdict:
    """A round's verdict, on the host: the proposals (B lists of k ids) and, per row, how many of proposal
    slots 1..k-1 were accepted before the first rejection (slot 0 is p_1's own argmax, always kept)."""

    proposals: list[list[int]]
    runs: list[int]


def leading_ones(flags: list[int]) -> int:
    n = 0
    for f in flags:
        if not f:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Criterion:
    # Keyword-only, so that TopK(3) / Distance(2.0) read as the paper writes them.
    min_block_size: int = field(default=1, kw_only=True)

    name = "criterion"

    @property
    def param(self) -> float | None:
        return None

    def accept(
        self, base_logits: torch.Tensor, proposals: torch.Tensor, argmax: torch.Tensor | None = None
    ) -> torch.Tensor:
        """base_logits (..., V) and proposals (...) -> bool (...); ``argmax`` of base_logits if known."""
        raise NotImplementedError

    def judge(self, base_logits: torch.Tensor, proposals: torch.Tensor, best: torch.Tensor) -> Verdict:
        """How many proposals each row accepts: ``base_logits`` (B, k, V) and ``best`` (B, k), p_1 after each
        proposal, judge ``proposals`` (B, k). Here: accept flags on the device, sent to the host with the
        proposals in one transfer."""
        k = proposals.shape[1]
        flags = self.accept(base_logits[:, :-1], proposals[:, 1:], best[:, :-1]).to(proposals.dtype)
        host = torch.cat([proposals, flags], dim=1).tolist()
        return Verdict([row[:k] for row in host], [leading_ones(row[k:]) for row in host])

    def __post_init__(self) -> None:
        if self.min_block_size < 1:
            raise ValueError(f"min_block_size must be >= 1 (got {self.min_block_size}).")


@dataclass(frozen=True)
class ArgmaxCriterion(Criterion):
    """A criterion that depends only on p_1's argmax and the proposal (``accept_ids``). A round then ships
    the argmax ids with the proposals in its one transfer and judges slot by slot on the host, up to the
    first rejection: a few Python comparisons instead of a chain of tiny device ops (docs/benchmark.md
    measures the difference)."""

    def accept_ids(self, best: int, proposal: int) -> bool:
        """``accept`` for one slot, from p_1's argmax id ``best``."""
        raise NotImplementedError

    def judge(self, base_logits: torch.Tensor, proposals: torch.Tensor, best: torch.Tensor) -> Verdict:
        k = proposals.shape[1]
        host = torch.cat([proposals, best], dim=1).tolist()
        runs = []
        for row in host:
            n = 0
            while n < k - 1 and self.accept_ids(row[k + n], row[n + 1]):
                n += 1
            runs.append(n)
        return Verdict([row[:k] for row in host], runs)


@dataclass(frozen=True)
class Exact(ArgmaxCriterion):
    """Accept iff the proposal is p_1's argmax: output identical to greedy decoding."""

    name = "exact"

    def accept(self, base_logits, proposals, argmax=None):
        return (top1(base_logits) if argmax is None else argmax) == proposals

    def accept_ids(self, best: int, proposal: int) -> bool:
        return best == proposal


@dataclass(frozen=True)
class TopK(Criterion):
    """Accept iff the proposal is among p_1's ``n`` highest-scoring tokens (paper: n = 2, 3)."""

    n: int = 2
    name = "topk"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n < 1:
            raise ValueError(f"TopK needs n >= 1 (got {self.n}).")

    @property
    def param(self) -> float:
        return float(self.n)

    def accept(self, base_logits, proposals, argmax=None):
        n = min(self.n, base_logits.shape[-1])
        if n == 1:
            return (top1(base_logits) if argmax is None else argmax) == proposals
        # "within the top n" == fewer than n tokens score strictly higher than the proposal
        # (ties resolved in the proposal's favour, which keeps TopK(1) == Exact up to exact ties).
        prop_score = base_logits.gather(-1, proposals.unsqueeze(-1))
        return (base_logits > prop_score).sum(-1) < n


@dataclass(frozen=True)
class Distance(ArgmaxCriterion):
    """Accept iff |proposal - argmax| <= eps, for ordinal vocabularies (pixel intensities).

    ``offset`` maps token ids to ordinal values (value = id - offset); ids outside
    ``[offset, offset + n_values)`` are only accepted on an exact match.
    """

    eps: float = 2.0
    offset: int = 0
    n_values: int = 256
    name = "distance"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.eps < 0:
            raise ValueError(f"Distance needs eps >= 0 (got {self.eps}).")

    @property
    def param(self) -> float:
        return float(self.eps)

    def accept(self, base_logits, proposals, argmax=None):
        best = top1(base_logits) if argmax is None else argmax
        vb, vp = best - self.offset, proposals - self.offset
        ordinal = (vb >= 0) & (vb < self.n_values) & (vp >= 0) & (vp < self.n_values)
        return (best == proposals) | (ordinal & ((vb - vp).abs() <= self.eps))

    def accept_ids(self, best: int, proposal: int) -> bool:
        vb, vp = best - self.offset, proposal - self.offset
        return best == proposal or (0 <= vb < self.n_values and 0 <= vp < self.n_values and abs(vb - vp) <= self.eps)


def make_criterion(name: str, param: float | None = None, min_block_size: int = 1, **kw) -> Criterion:
    """Build a criterion from config values, with one clear error for unknown names. ``kw``: options of the
    criterion (Distance: ``offset``, ``n_values``; a task supplies them)."""
    if name not in CRITERIA:
        raise ValueError(f"unknown acceptance criterion {name!r}; choose one of {', '.join(CRITERIA)}.")
    if name == "topk":
        return TopK(min_block_size=min_block_size, n=int(param if param is not None else 2))
    if name == "distance":
        return Distance(min_block_size=min_block_size, eps=float(param if param is not None else 2.0), **kw)
    return Exact(min_block_size=min_block_size)
