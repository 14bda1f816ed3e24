"""The cost of one decoding step, timed in isolation at a representative cache length.

t_1 is a greedy step (decode one token, p_1, argmax, host sync) and t_k a blockwise round (verify k tokens,
accept, truncate, propose); a tree round builds, verifies and accepts one candidate tree. The encoder
(t_enc) and blockwise's propose-only start call (t_start,k) are timed too, so that ``bpd.bench.rows`` can
predict a whole run from them.

Each step is also split into its parts, timed in a second set of turns (``median_ms``) with its own totals: the decoder
layers alone over 1 and over k new tokens (d_1, d_k) and the proposal chain at one position (p_k); the
rest of a step is scoring (p_1's vocabulary projection at 1 or k positions, argmax, accept test, host
sync, cache rollback). ``step_parts`` reads that split back for a row; ``bpd.bench.cost_model`` builds on the
same timers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bpd.config.methods import Role
from bpd.decoding.common import last_position, top1
from bpd.decoding.criteria import Criterion, make_criterion
from bpd.decoding.methods.blockwise import propose, run_round, start
from bpd.decoding.methods.tree import TreeShape, build_tree, verify_tree
from bpd.decoding.spec import DecodeSpec


def warm_up(fns: list[Callable[[], Any]], calls: int = 5, budget_s: float = 0.5) -> None:
    """Call each distinct function ``calls`` times before timing (allocator, kernels and caches settle),
    fewer when calls are slow: after the first call, at most ``budget_s`` seconds more per function, and
    always a second call. A transformer_big verify pass at batch 32 takes seconds on 2 cores; five
    warm-up calls of each would cost more than the timed repetitions."""
    seen: set[int] = set()
    for fn in fns:
        if id(fn) in seen:  # the parts' rotation reuses the steps' functions
            continue
        seen.add(id(fn))
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        for _ in range(max(1, min(calls - 1, int(budget_s / max(dt, 1e-9))))):
            fn()


#: Calls of one function back to back in each turn of ``median_ms``; the first of each run is not kept.
RUN = 5


def median_ms(fns: dict[str, Any], repeats: int, device: torch.device, run: int = RUN) -> dict[str, float]:
    """Median milliseconds of each function over ``repeats`` kept calls, timed in turns: each turn calls every
    function ``run`` times back to back and keeps all but the first of them. Turns alternate the functions, so a
    drift in machine speed (shared CPUs, clock changes) affects every ratio's numerator and denominator alike;
    runs keep what a decoder's loop keeps, since it calls one function over and over: a model whose step reads
    fewer bytes than the last-level cache holds finds its weights there at the next step, which one call after
    another function's (a round's slots, the encoder) does not. The first call of a run pays for that switch,
    and is dropped (``bench/static_call_accounting.py`` compares these costs with the calls of real decodes)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    per_turn = max(1, run - 1)
    for _ in range(-(-repeats // per_turn)):
        for name, fn in fns.items():
            for i in range(max(2, run)):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if i:
                    times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


@dataclass
class Prefilled:
    """What every timed step starts from: the encoder output, a cache holding the prefix (rolled back to ``mark``
    after every step), the token each step feeds and the decoder state at one position."""

    enc: Any
    cache: Any
    mark: Any
    tok: torch.Tensor
    h_one: torch.Tensor


def prefill(model, src: torch.Tensor, prefix_len: int, slots: int) -> Prefilled:
    """Encode ``src`` and fill a cache with ``prefix_len`` BOS tokens, with room for ``slots`` more."""
    device = src.device
    b = src.shape[0]
    enc = model.encode(src)
    cache = model.new_cache(b, prefix_len + slots + 2)
    prefix = torch.full((b, prefix_len), model.bos_id, dtype=torch.long, device=device)
    model.decode(prefix, enc, cache)
    mark = cache.mark()
    tok = torch.full((b, 1), model.bos_id, dtype=torch.long, device=device)
    h_one = model.decode(tok, enc, cache)[:, 0]
    cache.rewind(mark)
    return Prefilled(enc, cache, mark, tok, h_one)


@dataclass(frozen=True)
class StepTiming:
    """How each isolated step is timed: from a cache holding ``prefix_len`` tokens (rolled back after every step),
    the median of ``repeats`` calls, taken in runs of back-to-back calls (``median_ms``)."""

    prefix_len: int = 12
    repeats: int = 200


@torch.inference_mode()
def step_costs(
    model,
    src: torch.Tensor,
    ks: list[int],
    criterion: Criterion | None = None,
    timing: StepTiming | None = None,
    trees: list[tuple[int, TreeShape]] | None = None,
    engine: str = "eager",
    max_len: int | None = None,
) -> dict[str, float]:
    """Median milliseconds of one greedy step (``t1``), one blockwise round per k (``t<k>``), one tree round
    per (k, shape) of ``trees`` (``tree<k>_<shape>``: build the tree, verify, accept, keep the path), the
    encoder (``enc``) and blockwise's propose-only start call per k (``s<k>``), and the parts of the
    steps, timed in a second rotation and keyed ``part_*``: the whole steps again (``part_t1``,
    ``part_t<k>``), the decoder layers alone over 1 and k tokens (``part_d1``, ``part_d<k>``) and the
    proposal chain at one position (``part_p<k>``). The rounds judge their proposals by ``criterion``
    (default: exact).

    The cache is filled with ``timing.prefix_len`` tokens first (default ``StepTiming()``) and rolled back after
    every timed step, so every step and round sees the same cache length.

    On the static path (``engine``: static, compiled) the engine's own fixed-shape functions are timed (steps,
    rounds, start calls and the encoder; no parts, no trees), with the capacity an output of ``max_len`` tokens
    gets (default: the output-length rule's for ``src``).
    """
    crit = make_criterion("exact") if criterion is None else criterion
    timing = StepTiming() if timing is None else timing
    prefix_len, repeats = timing.prefix_len, timing.repeats
    if engine != "eager":
        from bpd.config.decode import output_limit
        from bpd.decoding.engine import engine_for

        limit = max_len if max_len is not None else output_limit(src.shape[1])
        fns = engine_for(model, engine).step_functions(src, ks, crit, prefix_len, limit)
        warm_up(list(fns.values()))
        return median_ms(fns, repeats, src.device)
    p = prefill(model, src, prefix_len, max(ks + [1] + [shape.n_nodes for _, shape in trees or []]))
    fns, parts = step_functions(model, src, p, ks, crit, trees or [])
    warm_up([*fns.values(), *parts.values()])
    costs = median_ms(fns, repeats, src.device)
    # The parts get their own round-robin, with their own totals: timing more functions in one rotation
    # leaves each with colder caches, which would change the t_1 and t_k that the ideal is built on.
    costs |= {f"part_{name}": ms for name, ms in median_ms(parts, repeats, src.device).items()}
    return costs


def step_functions(model, src: torch.Tensor, p: Prefilled, ks: list[int], crit,
                   trees: list[tuple[int, TreeShape]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The functions ``step_costs`` times, each leaving the cache as it found it: the steps (``t1``, ``enc``,
    ``t<k>``, ``s<k>``, ``tree<k>_<shape>``) and the parts (``t1``, ``d1``, ``t<k>``, ``d<k>``, ``p<k>``); a
    whole step among the parts is the same function object as among the steps, so it is warmed up once."""
    enc, cache, mark, tok, h_one = p.enc, p.cache, p.mark, p.tok, p.h_one
    b = src.shape[0]

    def greedy_step() -> None:
        h = model.decode(tok, enc, cache)
        top1(model.heads.base_logits(h[:, 0])).tolist()
        cache.rewind(mark)

    def encode() -> None:
        model.encode(src)

    def decoder_only(toks: torch.Tensor) -> None:
        model.decode(toks, enc, cache)
        cache.rewind(mark)

    fns: dict[str, Any] = {"t1": greedy_step, "enc": encode}
    parts: dict[str, Any] = {"t1": greedy_step, "d1": lambda: decoder_only(tok)}
    for k in ks:
        props = torch.full((b, k), model.bos_id, dtype=torch.long, device=src.device)

        def round_k(k: int = k, props: torch.Tensor = props) -> None:
            r = run_round(model, props, enc, cache, crit, k, 1)
            propose(model, r.h_last, r.first, k, enc, cache)
            cache.rewind(mark)

        def start_k(k: int = k) -> None:  # blockwise_decode's first call, before any round
            start(model, tok, enc, cache, k)
            cache.rewind(mark)

        fns[f"t{k}"], fns[f"s{k}"] = round_k, start_k
        parts[f"t{k}"], parts[f"d{k}"] = round_k, lambda props=props: decoder_only(props)
        parts[f"p{k}"] = lambda k=k: propose(model, h_one, tok, k, enc, cache)
    for k, shape in trees:
        def tree_round(shape: TreeShape = shape) -> None:
            verify_tree(model, build_tree(model, h_one, tok, shape, enc, last_position(cache)), enc, cache, crit)
            cache.rewind(mark)

        fns[f"tree{k}_{shape.name}"] = tree_round
    return fns, parts


def step_parts(costs: dict[str, float], spec: DecodeSpec) -> dict[str, float | None]:
    """A step's cost split into decoder layers, scoring (the rest of the step) and, for a blockwise
    round, the proposal chain; None where the parts were not timed or do not apply."""
    keys = ("total", "decoder", "scoring", "propose")
    c = {name.removeprefix("part_"): ms for name, ms in costs.items() if name.startswith("part_")}
    if spec.role is Role.REFERENCE and "d1" in c:
        return dict(zip((f"step_{p}_ms" for p in keys), (c["t1"], c["d1"], c["t1"] - c["d1"], None)))
    k = spec.k
    if spec.role is Role.CHAIN and f"d{k}" in c:
        t, d, pr = c[f"t{k}"], c[f"d{k}"], c[f"p{k}"]
        return dict(zip((f"step_{p}_ms" for p in keys), (t, d, t - d - pr, pr)))
    return {f"step_{p}_ms": None for p in keys}
