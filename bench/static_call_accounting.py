"""Where a compiled decode's time goes, call by call, against the isolated step costs ``make bench`` predicts from.

``make bench`` predicts a blockwise speedup from isolated costs (``k_hat * t_1 / t_k``, each call timed from a
12-token cache). This decodes the first ``--n`` test sentences at batch 1 with compiled greedy and compiled
exact blockwise at each ``--ks`` (every shape compiled first, untimed; one graph per bucket, as the benchmarks
run), times every engine call as the decoders make it, and prints per decoder: the wall time, what its calls
took (greedy steps, start calls, rounds: count, total and mean ms), the encoder, and what is left (the host's
bookkeeping between calls), beside the isolated t_1 / t_k / s_k of the same engine. So a gap between predicted
and measured speedup shows up as a part: calls dearer in a real decode than in isolation (longer caches,
other shapes), the start call, or host time.

    python bench/static_call_accounting.py --experiment demo_debian --n 60 --ks 4 --threads 1
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="demo_debian")
    ap.add_argument("--n", type=int, default=60, help="the first N test sentences")
    ap.add_argument("--ks", type=int, nargs="+", default=[4])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--passes", type=int, default=2, help="timed passes over the sentences (the best is kept)")
    args = ap.parse_args()

    from static_greedy_per_sentence import load_heads_model

    from bpd.bench.step_costs import StepTiming, step_costs
    from bpd.decoding.compiling import graph_per_bucket
    from bpd.decoding.criteria import Exact
    from bpd.decoding.engine import engine_for

    model, task, cfg = load_heads_model(args.experiment, args.threads)
    engine, limit = engine_for(model, "compiled"), task.max_len(cfg.decode)
    sources = [torch.tensor([s]) for s in task.pairs("test").sources(range(args.n))]
    print(f"{args.experiment}: {args.n} test sentences, batch 1, compiled, {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.threads} thread(s)")

    spent: dict[str, list[float]] = defaultdict(list)
    call = engine.call

    def timed_call(key, make, *a):
        t0 = time.perf_counter()
        out = call(key, make, *a)
        spent[key[0]].append(time.perf_counter() - t0)  # (a CPU graph runs before the call returns)
        return out

    encode = model.encode

    def timed_encode(*a, **kw):
        t0 = time.perf_counter()
        out = encode(*a, **kw)
        spent["encoder"].append(time.perf_counter() - t0)
        return out

    decoders = {"greedy": lambda x: engine.greedy(x, limit(x))}
    for k in args.ks:
        decoders[f"exact k={k}"] = lambda x, k=k: engine.blockwise(x, k, Exact(), 1, limit(x))
    with graph_per_bucket(), torch.inference_mode():
        for x in sources:  # untimed: every shape compiles
            for fn in decoders.values():
                fn(x)
        iso = step_costs(model, sources[0], args.ks, timing=StepTiming(), engine="compiled")
        engine.call, model.encode = timed_call, timed_encode
        best: dict[str, tuple[float, dict, int]] = {}
        for _ in range(args.passes):
            for name, fn in decoders.items():
                spent.clear()
                t0, tokens = time.perf_counter(), 0
                for x in sources:
                    tokens += len(fn(x).tokens[0])
                wall = time.perf_counter() - t0
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, {p: list(v) for p, v in spent.items()}, tokens)
        engine.call, model.encode = call, encode
    print("isolated (make bench's step costs: a 12-token cache, sentence 1): "
          + ", ".join(f"{key} {ms:.3f} ms" for key, ms in iso.items() if key[0] in "ts" or key == "enc"))
    greedy_wall = best["greedy"][0]
    for name, (wall, parts, tokens) in best.items():
        calls = sum(sum(v) for v in parts.values())
        print(f"\n{name}: {wall:.3f} s, {tokens} tokens, {tokens / wall:.0f} tok/s, {greedy_wall / wall:.2f}x greedy")
        for part, v in parts.items():
            print(f"  {part:8s} {len(v):6d} calls  {sum(v):7.3f} s  {sum(v) / len(v) * 1e3:7.3f} ms each  "
                  f"{sum(v) / wall:5.1%}")
        print(f"  host     {'':6s}        {wall - calls:7.3f} s  {'':7s}            {(wall - calls) / wall:5.1%}")


if __name__ == "__main__":
    main()
