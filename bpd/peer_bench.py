"""Our decoders and other libraries' (``bpd.decoding.peers``) timed in one paired round-robin run.

Every decoder here is a callable ``(sources, max_len) -> tokens`` over one batch, ours wrapped to that shape
too, so that one loop times them all alike: each batch is decoded by every decoder back to back, in an order
that rotates from batch to batch and from repeat to repeat, and the pass is repeated. Per-batch times are
then paired as in ``make bench`` (``bpd.speedup_ci``): each decoder's speedup over our greedy, and our best
exact decoder's ratio to each peer, with bootstrap intervals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from bpd.config import output_limit
from bpd.data.batches import pad_rows
from bpd.decoding.blockwise import blockwise_decode
from bpd.decoding.criteria import Exact
from bpd.decoding.greedy import greedy_decode
from bpd.speedup_ci import SpeedupEstimate, paired_speedup

Decoder = Callable[[Sequence[Sequence[int]], int], list[list[int]]]


def our_decoders(model, ks: Sequence[int]) -> dict[str, Decoder]:
    """Our greedy and exact blockwise decoders at each k (up to the model's trained k), as batch callables."""

    def greedy(sources, max_len):
        return greedy_decode(model, pad_rows([list(s) for s in sources], model.pad_id, min_width=1), max_len).tokens

    def blockwise(k):
        return lambda sources, max_len: blockwise_decode(
            model, pad_rows([list(s) for s in sources], model.pad_id, min_width=1), k, Exact(), max_len=max_len).tokens

    return {"greedy": greedy, **{f"blockwise_k{k}_exact": blockwise(k) for k in ks if 2 <= k <= model.k}}


def batches_of(sources: Sequence[Sequence[int]], batch_size: int) -> list[list[list[int]]]:
    return [[list(s) for s in sources[i: i + batch_size]] for i in range(0, len(sources), batch_size)]


def round_robin(decoders: dict[str, Decoder], batches: list[list[list[int]]], repeats: int, warmup: int = 2
                ) -> tuple[dict[str, np.ndarray], dict[str, list[list[int]]]]:
    """Each decoder's ``(repeats, batches)`` wall times and its outputs (of the first repeat); the output limit
    of a batch is the harness's rule for its longest source, as our decoders apply it to a padded batch.
    ``warmup`` batches are first decoded untimed by every decoder (allocators, thread pools, caches)."""
    names = list(decoders)
    for batch in batches[:warmup]:
        for name in names:
            decoders[name](batch, output_limit(max(len(s) for s in batch)))
    times = {n: np.zeros((repeats, len(batches))) for n in names}
    outputs: dict[str, list[list[int]]] = {n: [] for n in names}
    for r in range(repeats):
        for b, batch in enumerate(batches):
            limit = output_limit(max(len(s) for s in batch))
            shift = (b + r) % len(names)
            for name in names[shift:] + names[:shift]:
                t0 = time.perf_counter()
                out = decoders[name](batch, limit)
                times[name][r, b] = time.perf_counter() - t0
                if r == 0:
                    outputs[name].extend(out)
    return times, outputs


def speedups(times: dict[str, np.ndarray], baseline: str = "greedy") -> dict[str, SpeedupEstimate]:
    """Every decoder's paired speedup over ``baseline`` (baseline time / its time)."""
    return {n: paired_speedup(times[baseline], t) for n, t in times.items()}


def best_exact(names: Sequence[str], estimates: dict[str, SpeedupEstimate]) -> str:
    """Our fastest exact decoder (greedy itself when no blockwise one beats it)."""
    ours = [n for n in names if n == "greedy" or n.startswith("blockwise_")]
    return max(ours, key=lambda n: estimates[n].speedup)


def peer_rows(times: dict[str, np.ndarray], outputs: dict[str, list[list[int]]], peers: Sequence[str],
              score: Callable[[list[list[int]]], float], common: dict) -> tuple[list[dict], str]:
    """One row per decoder with the columns of ``make bench``'s rows that apply (tokens/s, speedup over our
    greedy with its interval, BLEU, identical-to-greedy), and for peers the ratio of our best exact decoder to
    them (> 1: ours is faster) with its interval; also the best decoder's name."""
    est = speedups(times)
    best = best_exact([n for n in times if n not in peers], est)
    greedy_out = outputs["greedy"]
    rows = []
    for name, t in times.items():
        wall = float(np.median(t.sum(axis=1)))
        tokens = sum(len(o) for o in outputs[name])
        e = est[name]
        vs = paired_speedup(t, times[best]) if name in peers else None
        rows.append({
            **common,
            "decoder": name,
            "library": ("ctranslate2" if name.startswith("ct2") else "transformers") if name in peers else "bpd",
            "n_examples": len(outputs[name]),
            "repeats": t.shape[0],
            "output_tokens": tokens,
            "wallclock_s": wall,
            "greedy_wallclock_s": float(np.median(times["greedy"].sum(axis=1))),
            "tokens_per_s": tokens / wall if wall > 0 else None,
            "speedup": e.speedup, "speedup_ci_low": e.low, "speedup_ci_high": e.high,
            "bleu": score(outputs[name]),
            "identical_to_greedy": sum(a == b for a, b in zip(outputs[name], greedy_out)) / max(1, len(greedy_out)),
            "best_exact": best,
            "best_vs_peer": vs.speedup if vs else None,
            "best_vs_peer_ci_low": vs.low if vs else None,
            "best_vs_peer_ci_high": vs.high if vs else None,
        })
    return rows, best


def format_peer_rows(rows: list[dict]) -> str:
    lines = [f"{'decoder':24s} {'tok/s':>8s} {'speedup [95% CI]':>22s} {'BLEU':>6s} {'same':>6s} "
             f"{'best/peer [95% CI]':>24s}"]
    for r in rows:
        sp = f"{r['speedup']:.3f} [{r['speedup_ci_low']:.3f}, {r['speedup_ci_high']:.3f}]"
        vs = (f"{r['best_vs_peer']:.3f} [{r['best_vs_peer_ci_low']:.3f}, {r['best_vs_peer_ci_high']:.3f}]"
              if r["best_vs_peer"] is not None else "")
        lines.append(f"{r['decoder']:24s} {r['tokens_per_s']:8.1f} {sp:>22s} {r['bleu']:6.2f} "
                     f"{r['identical_to_greedy']:6.1%} {vs:>24s}")
    return "\n".join(lines)


def set_threads(n: int) -> None:
    """Our decoders and HF's run on torch's thread pool; CTranslate2 gets the same count per translator."""
    torch.set_num_threads(n)
