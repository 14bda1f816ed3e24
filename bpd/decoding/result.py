"""The common return type of every decoder."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DecodeResult:
    """Tokens and cost accounting for one batch.

    tokens: per row, no BOS; ends with EOS if produced; nothing after EOS; at most max_len tokens.
    iterations: per row, predict-verify-accept rounds until the row finished (greedy: one per token).
    block_sizes: per row, tokens accepted in each round (sums to len(tokens)).
    invocations: decoder forward calls for the whole batch.
    position_reached / position_accepted: for proposal slots 1..k-1 (index 0 = slot 1), how often the
        verify step examined the slot (all earlier slots accepted) and how often it accepted it,
        summed over rows and rounds; min_block_size overrides are not counted as accepts.
    """

    tokens: list[list[int]]
    iterations: list[int]
    block_sizes: list[list[int]]
    invocations: int
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def total_iterations(self) -> int:
        return sum(self.iterations)

    @property
    def mean_block_size(self) -> float:
        """Output tokens per round (the paper's k-hat bar)."""
        return self.total_tokens / max(1, self.total_iterations)

    def acceptance_rates(self) -> list[float]:
        return [a / r if r else float("nan") for a, r in zip(self.position_accepted, self.position_reached)]
