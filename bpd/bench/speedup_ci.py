"""Paired speedup estimates with bootstrap confidence intervals (the numbers ``make bench`` prints).

Every batch of inputs is decoded by greedy and by each blockwise configuration back to back, in an order
that rotates from batch to batch, and the whole pass is repeated. That gives, per configuration, a matrix
of batch wall times ``(repeats, batches)`` paired with greedy's: entry ``[r, b]`` of both was measured
within the same few milliseconds, so drift of the machine's speed moves both alike.

The estimate is the speedup on this fixed set of inputs,

    speedup = sum_b median_r greedy[r, b] / sum_b median_r method[r, b]

(greedy's total time over the method's, each batch's time the median of its repeats, so that a repeat
disturbed by another process counts little). Its confidence interval is a bootstrap of the timing noise:
each resample draws, for every batch, repeats with replacement, taking greedy's and the method's time of a
drawn repeat together (the pairing), and recomputes the ratio. The inputs stay fixed: the interval says how
far another run on the same machine and inputs would land, not how the speedup varies over other inputs.
More repeats narrow it, so ``make bench`` repeats until each interval is narrow enough (or a cap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpeedupEstimate:
    """A paired speedup with its bootstrap interval (``level`` coverage) over ``repeats`` repeats."""

    speedup: float
    low: float
    high: float
    repeats: int
    level: float = 0.95

    @property
    def halfwidth(self) -> float:
        """Half the interval's width relative to the estimate (0.03 = +-3%)."""
        return (self.high - self.low) / 2 / self.speedup if self.speedup > 0 else float("inf")


def _ratio(greedy: np.ndarray, method: np.ndarray) -> np.ndarray:
    """sum_b median_r greedy / sum_b median_r method, over the last two axes (repeats, batches)."""
    return np.median(greedy, axis=-2).sum(axis=-1) / np.median(method, axis=-2).sum(axis=-1)


def paired_speedup(greedy: np.ndarray, method: np.ndarray, n_boot: int = 2000, level: float = 0.95,
                   seed: int = 0) -> SpeedupEstimate:
    """The paired speedup of ``method`` over ``greedy`` from two ``(repeats, batches)`` arrays of wall
    times measured back to back, with a percentile bootstrap interval over repeats within each batch.
    Deterministic for given times (fixed ``seed``)."""
    g, m = np.asarray(greedy, dtype=np.float64), np.asarray(method, dtype=np.float64)
    if g.shape != m.shape or g.ndim != 2 or g.size == 0:
        raise ValueError(f"paired timings need two (repeats, batches) arrays of one shape (got {g.shape}, {m.shape}).")
    if (m <= 0).any():
        raise ValueError("paired timings must be positive wall times.")
    reps, batches = g.shape
    est = float(_ratio(g, m))
    if reps == 1:  # nothing to resample: an interval of zero width would claim a precision never measured
        return SpeedupEstimate(est, float("-inf"), float("inf"), 1, level)
    rng = np.random.default_rng(seed)
    lo, hi = [], []
    chunk = max(1, 2_000_000 // (reps * batches))  # resamples per block: bounded memory on long test sets
    draws: list[np.ndarray] = []
    for start in range(0, n_boot, chunk):
        n = min(chunk, n_boot - start)
        idx = rng.integers(0, reps, size=(n, reps, batches))
        cols = np.arange(batches)
        draws.append(_ratio(g[idx, cols], m[idx, cols]))
    boot = np.concatenate(draws)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return SpeedupEstimate(est, float(lo), float(hi), reps, level)


#: Repeats whose speedups disagree by more than this (relative), or an interval wider than +- this, are flagged.
NOISY = 0.05


def repeat_speedups(greedy: np.ndarray, method: np.ndarray) -> list[float]:
    """Each repeat's own speedup (greedy's total over the method's, that repeat's times only)."""
    g, m = np.asarray(greedy, dtype=np.float64), np.asarray(method, dtype=np.float64)
    return [float(a / b) if b > 0 else float("nan") for a, b in zip(g.sum(axis=1), m.sum(axis=1))]


def timing_columns(greedy: np.ndarray, method: np.ndarray, busy: bool = False) -> dict[str, object]:
    """An evaluation row's speedup columns from paired ``(repeats, batches)`` times: the paired estimate and
    its interval, each repeat's speedup, their spread, and ``timing_note``: None for a clean number, else why
    it is not one ("noisy": the repeats disagree, or the interval is wide; "busy": other processes took CPU
    the decoder needed, which can bias the ratio without the repeats disagreeing; "1 repeat": no interval)."""
    est = paired_speedup(greedy, method)
    per_repeat = repeat_speedups(greedy, method)
    spread = (max(per_repeat) - min(per_repeat)) / est.speedup if est.speedup > 0 else float("inf")
    notes = []
    if est.repeats == 1:
        notes.append("1 repeat")
    elif spread > NOISY or est.halfwidth > NOISY:
        notes.append(f"noisy: repeats {min(per_repeat):.2f}-{max(per_repeat):.2f}x")
    if busy:
        notes.append("busy")
    finite = est.repeats > 1
    return {
        "speedup": est.speedup,
        "speedup_ci_low": est.low if finite else None,
        "speedup_ci_high": est.high if finite else None,
        "speedup_ci_halfwidth": est.halfwidth if finite else None,
        "speedup_repeats": per_repeat,
        "speedup_spread": spread,
        "timing_repeats": est.repeats,
        "timing_note": "; ".join(notes) or None,
    }
