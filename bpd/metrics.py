"""Quality and speed metrics: sacreBLEU, PSNR, accepted-block statistics."""

from __future__ import annotations

from collections import Counter

import numpy as np
from sacrebleu.metrics import BLEU


def bleu(hyps: list[str], refs: list[str]) -> tuple[float, str]:
    """Detokenized corpus BLEU with sacreBLEU's default 13a tokenization; returns (score, signature)."""
    metric = BLEU()
    score = metric.corpus_score(hyps, [refs])
    return float(score.score), str(metric.get_signature())


def block_histogram(block_sizes: list[list[int]]) -> dict[int, int]:
    """How many rounds accepted each block size, over the whole set."""
    return dict(sorted(Counter(b for row in block_sizes for b in row).items()))


def mean_block_size(greedy_iterations: int, iterations: int) -> float:
    """Iteration reduction over greedy (the paper's mean accepted block size for exact acceptance)."""
    return greedy_iterations / max(1, iterations)


def per_example_block_means(tokens: list[list[int]], iterations: list[int]) -> list[float]:
    return [len(t) / max(1, i) for t, i in zip(tokens, iterations)]


def summarize(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return {}
    return {
        "mean": float(a.mean()),
        "p10": float(np.percentile(a, 10)),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "min": float(a.min()),
        "max": float(a.max()),
    }
