"""Acceptance criteria for the verify step of blockwise decoding.

A criterion looks at the base model's logits at the position *before* each proposal (p_1's prediction
for that slot) and says, per slot, whether the proposed token is acceptable. Exact acceptance
reproduces greedy decoding; the others trade fidelity for longer blocks (paper, Section 5).

Every criterion carries ``min_block_size`` (the paper's l): at least that many tokens are accepted per
round whatever the verify step says (still capped by k, EOS and max_len).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bpd.models.heads import top1


@dataclass(frozen=True)
class Criterion:
    # Keyword-only, so that TopK(3) / Distance(2.0) read as the paper writes them.
    min_block_size: int = field(default=1, kw_only=True)

    name = "criterion"
    # True where acceptance depends on p_1's argmax and the proposal alone (``accept_ids``): the verify round
    # then decides it on the host from the argmax ids it synchronises anyway, instead of in a chain of tiny
    # device ops (a distance test is ~10 of them: 37 us alone on a 2-core CPU; moving it to the host took the
    # SR demo's eps = 2 rounds from 0.94 to 1.03 of the speed their step costs predict, README "Benchmark").
    by_argmax = False

    @property
    def param(self) -> float | None:
        return None

    def accept_ids(self, best: int, proposal: int) -> bool:
        """``accept`` for one slot, from p_1's argmax id ``best``; only where ``by_argmax``."""
        raise NotImplementedError

    def accept(
        self, base_logits: torch.Tensor, proposals: torch.Tensor, argmax: torch.Tensor | None = None
    ) -> torch.Tensor:
        """base_logits (..., V) and proposals (...) -> bool (...); ``argmax`` of base_logits if known."""
        raise NotImplementedError

    def __post_init__(self) -> None:
        if self.min_block_size < 1:
            raise ValueError(f"min_block_size must be >= 1 (got {self.min_block_size}).")


@dataclass(frozen=True)
class Exact(Criterion):
    """Accept iff the proposal is p_1's argmax: output identical to greedy decoding."""

    name = "exact"
    by_argmax = True

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
class Distance(Criterion):
    """Accept iff |proposal - argmax| <= eps, for ordinal vocabularies (pixel intensities).

    ``offset`` maps token ids to ordinal values (value = id - offset); ids outside
    ``[offset, offset + n_values)`` are only accepted on an exact match.
    """

    eps: float = 2.0
    offset: int = 0
    n_values: int = 256
    name = "distance"
    by_argmax = True

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


CRITERIA = {"exact": Exact, "topk": TopK, "distance": Distance}


def make_criterion(name: str, param: float | None = None, min_block_size: int = 1, **kw) -> Criterion:
    """Build a criterion from config values, with one clear error for unknown names."""
    if name not in CRITERIA:
        raise ValueError(f"unknown acceptance criterion {name!r}; choose one of {', '.join(CRITERIA)}.")
    if name == "topk":
        return TopK(min_block_size=min_block_size, n=int(param if param is not None else 2))
    if name == "distance":
        return Distance(min_block_size=min_block_size, eps=float(param if param is not None else 2.0), **kw)
    return Exact(min_block_size=min_block_size)
