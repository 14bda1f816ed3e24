"""Our decoders and other libraries' (``bpd.decoding.peers``) timed in one paired round-robin run.

Every decoder here is a callable ``(sources, max_len) -> tokens`` over one batch, ours wrapped to that shape
too, so that one loop times them all alike: each batch is decoded by every decoder back to back, in an order
that rotates from batch to batch and from repeat to repeat, and the pass is repeated. Per-batch times are
then paired as in ``make bench`` (``bpd.bench.speedup_ci``): each decoder's speedup over our greedy, and our best
exact decoder's ratio to each peer, with bootstrap intervals. A decoder that runs in another process (the
CTranslate2 peers: ``bpd.export.ct2_process``) is still called here, batch by batch in the same rotation, and
reports the time of its decode there (``SelfTimed``).

Rows say what each decoder is in columns, never in its name: ours carry their spec's columns as ``make bench``'s
rows do (``method``, ``k``, ``criterion``, ...), a peer those columns empty and its ``library``, ``peer_mode``
(what the library runs: ``greedy``, ``assisted``, ``prompt_lookup``) and ``peer_quantization`` (CTranslate2's
weights; None where the library runs the exported float32 model as it is).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from bpd.bench.speedup_ci import SpeedupEstimate, paired_speedup
from bpd.config import output_limit
from bpd.config.methods import Role
from bpd.data.batches import pad_rows
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import precompile

Decoder = Callable[[Sequence[Sequence[int]], int], list[list[int]]]
#: The columns that say what a peer is; None in our decoders' rows.
PEER_COLUMNS = ("peer_mode", "peer_quantization")
#: transformers' plain greedy generate: the other transformers peers' rows also carry their speedup over it.
HF_GREEDY = "hf_greedy"


@runtime_checkable
class SelfTimed(Protocol):
    """A decoder that times its own decode: ``timed`` returns the outputs and the seconds it took."""

    def timed(self, sources: Sequence[Sequence[int]], max_len: int) -> tuple[list[list[int]], float]: ...


def our_specs(model, ks: Sequence[int], engines: Sequence[str] = ("eager",)) -> list[DecodeSpec]:
    """Our greedy and exact blockwise decoding at each k up to the model's, on each decode path of ``engines``
    (the first path's greedy first: every ratio's reference)."""
    return [spec.on(e) for e in engines
            for spec in (DecodeSpec("greedy"), *(DecodeSpec("blockwise", k=k) for k in ks if 2 <= k <= model.k))]


def our_decoders(model, specs: Sequence[DecodeSpec]) -> dict[str, Decoder]:
    """Our decoders of ``specs`` as batch callables, by ``spec.key`` (the decoder's name, with its decode path
    off the eager one)."""

    def batch(s: DecodeSpec) -> Decoder:
        return lambda sources, max_len: s.entry.decode(
            model, pad_rows([list(x) for x in sources], model.pad_id, min_width=1), max_len, s.options).tokens

    return {s.key: batch(s) for s in specs}


def compile_shapes(model, specs: Sequence[DecodeSpec], batches: list[list[list[int]]]
                   ) -> dict[str, tuple[float, float]]:
    """Every shape the batches give compiled, untimed, for each spec off the eager path (``timed.precompile``,
    with this module's padding and length limit); the seconds building and loading took, by ``spec.key``."""
    padded = [pad_rows(batch, model.pad_id, min_width=1) for batch in batches]
    return precompile(model, padded, list(specs), lambda src: output_limit(src.shape[1]))


def identity_columns(specs: Sequence[DecodeSpec], peers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each decoder's row columns that say what it is, by decoder name: ours a spec's columns with ``library``
    ``bpd``; a peer (``peers``: its ``library`` and ``PEER_COLUMNS``) the same columns, our methods' left empty."""
    ours = {s.key: {**s.columns(), "library": "bpd", **dict.fromkeys(PEER_COLUMNS)} for s in specs}
    empty = dict.fromkeys(specs[0].columns())
    return {**ours, **{name: {**empty, "decoder": name, "library": None, **dict.fromkeys(PEER_COLUMNS), **cols}
                       for name, cols in peers.items()}}


def batches_of(sources: Sequence[Sequence[int]], batch_size: int) -> list[list[list[int]]]:
    return [[list(s) for s in sources[i: i + batch_size]] for i in range(0, len(sources), batch_size)]


def round_robin(decoders: dict[str, Decoder], batches: list[list[list[int]]], repeats: int, warmup: int = 2
                ) -> tuple[dict[str, np.ndarray], dict[str, list[list[int]]]]:
    """Each decoder's ``(repeats, batches)`` wall times and its outputs (of the first repeat); the output limit
    of a batch is the harness's rule for its longest source, as our decoders apply it to a padded batch.
    ``warmup`` batches are first decoded untimed by every decoder (allocators, thread pools, caches). A
    ``SelfTimed`` decoder's time is its own report."""
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
                out, times[name][r, b] = timed_call(decoders[name], batch, limit)
                if r == 0:
                    outputs[name].extend(out)
    return times, outputs


def timed_call(decoder: Decoder, batch: list[list[int]], limit: int) -> tuple[list[list[int]], float]:
    """One batch decoded and its wall time: the decoder's own report where it is ``SelfTimed`` (a worker
    process's decode, without the pipe's round trip), else the call's time here."""
    if isinstance(decoder, SelfTimed):
        return decoder.timed(batch, limit)
    t0 = time.perf_counter()
    out = decoder(batch, limit)
    return out, time.perf_counter() - t0


def speedups(times: dict[str, np.ndarray], baseline: str) -> dict[str, SpeedupEstimate]:
    """Every decoder's paired speedup over ``baseline`` (baseline time / its time)."""
    return {n: paired_speedup(times[baseline], t) for n, t in times.items()}


def best_exact(specs: Sequence[DecodeSpec], estimates: dict[str, SpeedupEstimate]) -> str:
    """Our fastest exact decoder (greedy itself when no blockwise one beats it)."""
    exact = [s.key for s in specs if s.role is Role.REFERENCE or (s.rounds and s.options.exact)]
    return max(exact, key=lambda n: estimates[n].speedup)


def peer_rows(times: dict[str, np.ndarray], outputs: dict[str, list[list[int]]], specs: Sequence[DecodeSpec],
              peers: dict[str, dict[str, Any]], score: Callable[[list[list[int]]], float], common: dict
              ) -> tuple[list[dict], str]:
    """One row per decoder (ours: ``specs``, greedy first; ``peers``: each peer's ``library`` and
    ``PEER_COLUMNS``) with the columns of ``make bench``'s rows that apply (what the decoder is, tokens/s, speedup
    over our greedy with its interval, BLEU, identical-to-greedy), and for peers the ratio of our best exact
    decoder to them (> 1: ours is faster) with its interval, and for transformers peers their paired speedup over
    transformers' greedy (``hf_greedy``, when timed); also the best decoder's name."""
    assert specs[0].role is Role.REFERENCE, "greedy is the reference and must come first"
    greedy = specs[0].key
    est = speedups(times, greedy)
    best = best_exact(specs, est)
    identity = identity_columns(specs, peers)
    greedy_out = outputs[greedy]
    rows = []
    for name, t in times.items():
        wall = float(np.median(t.sum(axis=1)))
        tokens = sum(len(o) for o in outputs[name])
        e = est[name]
        vs = paired_speedup(t, times[best]) if name in peers else None
        # Each of our greedy decoders (one per decode path) against the peer: e.g. compiled greedy over CTranslate2.
        greedy_vs = {s.path: _triple(paired_speedup(t, times[s.key])) for s in specs
                     if s.role is Role.REFERENCE} if name in peers else None
        # A transformers peer beside transformers' own greedy (blockwise decoding in generate against plain generate).
        hf = paired_speedup(times[HF_GREEDY], t) if name in peers and name != HF_GREEDY and HF_GREEDY in times \
            and peers[name].get("library") == "transformers" else None
        rows.append({
            **common,
            **identity[name],
            "n_examples": len(outputs[name]),
            "repeats": t.shape[0],
            "output_tokens": tokens,
            "wallclock_s": wall,
            "greedy_wallclock_s": float(np.median(times[greedy].sum(axis=1))),
            "tokens_per_s": tokens / wall if wall > 0 else None,
            "speedup": e.speedup, "speedup_ci_low": e.low, "speedup_ci_high": e.high,
            "baseline": specs[0].baseline,  # what ``speedup`` divides by: our greedy on the first decode path
            "bleu": score(outputs[name]),
            "identical_to_greedy": sum(a == b for a, b in zip(outputs[name], greedy_out)) / max(1, len(greedy_out)),
            "best_exact": best,
            "best_vs_peer": vs.speedup if vs else None,
            "best_vs_peer_ci_low": vs.low if vs else None,
            "best_vs_peer_ci_high": vs.high if vs else None,
            "greedy_vs_peer": greedy_vs,
            "speedup_over_hf_greedy": hf.speedup if hf else None,
            "speedup_over_hf_greedy_ci_low": hf.low if hf else None,
            "speedup_over_hf_greedy_ci_high": hf.high if hf else None,
        })
    return rows, best


def _triple(e: SpeedupEstimate) -> list[float]:
    return [e.speedup, e.low, e.high]


def format_peer_rows(rows: list[dict]) -> str:
    lines = [f"{'decoder':24s} {'tok/s':>8s} {'speedup [95% CI]':>22s} {'BLEU':>6s} {'same':>6s} "
             f"{'best/peer [95% CI]':>24s} {'over HF greedy [95% CI]':>24s}"]
    for r in rows:
        sp = f"{r['speedup']:.3f} [{r['speedup_ci_low']:.3f}, {r['speedup_ci_high']:.3f}]"
        vs = (f"{r['best_vs_peer']:.3f} [{r['best_vs_peer_ci_low']:.3f}, {r['best_vs_peer_ci_high']:.3f}]"
              if r["best_vs_peer"] is not None else "")
        hf = r.get("speedup_over_hf_greedy")
        hf = "" if hf is None else \
            f"{hf:.3f} [{r['speedup_over_hf_greedy_ci_low']:.3f}, {r['speedup_over_hf_greedy_ci_high']:.3f}]"
        name = r["decoder"] + (f"@{r['engine']}" if r.get("engine") not in (None, "eager") else "")
        lines.append(f"{name:24s} {r['tokens_per_s']:8.1f} {sp:>22s} {r['bleu']:6.2f} "
                     f"{r['identical_to_greedy']:6.1%} {vs:>24s} {hf:>24s}")
    return "\n".join(lines)

