"""One side of a before/after comparison of the compiled path: the demo model's compiled greedy and compiled exact
k = 4 on the first ``--n`` test sentences at batch 1, in a process of its own, importing the code of ``--root`` (a
checkout or worktree of the commit to measure; the data and the step store are this checkout's).

Each pass decodes every sentence with greedy, then with k = 4; each decoder's time is split into the encoder, its
compiled calls (greedy steps, start calls, rounds) and the host's bookkeeping between them. The last line is a
``RESULT`` with every pass's times. Run the two sides alternately, several processes each:

    git worktree add /tmp/before <commit>
    for i in 1 2 3; do for root in $PWD /tmp/before; do
        python bench/before_after_compiled.py --root $root --n 100 --passes 3; done; done
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(HERE), help="the checkout whose code is measured")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--store", default=str(HERE / "outputs/cache/compiled"))
    args = ap.parse_args()
    sys.path[:0] = [f"{args.root}/bench", args.root]

    import torch
    from static_greedy_per_sentence import load_heads_model

    from bpd.decoding import step_store
    from bpd.decoding.criteria import Exact
    from bpd.decoding.engine import engine_for

    model, task, cfg = load_heads_model("demo_debian", 2)
    model.heads.set_proposal_precision("int8")
    step_store.use_store(args.store)
    engine, limit = engine_for(model, "compiled"), task.max_len(cfg.decode)
    sources = [torch.tensor([s]) for s in task.pairs("test").sources(range(args.n))]
    spent: dict[str, float] = defaultdict(float)
    call, encode = engine.call, model.encode

    def timed_call(key, make, *a):
        t0 = time.perf_counter()
        out = call(key, make, *a)
        spent[key[0]] += time.perf_counter() - t0
        return out

    def timed_encode(*a, **kw):  # (the eager encoder, where the code has no encoder package)
        t0 = time.perf_counter()
        out = encode(*a, **kw)
        spent["encode(eager)"] += time.perf_counter() - t0
        return out

    decoders = {"greedy": lambda x: engine.greedy(x, limit(x)),
                "k4": lambda x: engine.blockwise(x, 4, Exact(), 1, limit(x))}
    times: dict[str, list[float]] = defaultdict(list)
    with torch.inference_mode():
        for x in sources:
            for fn in decoders.values():
                fn(x)
        print(f"built {engine.compile_seconds:.1f} s, loaded {engine.load_seconds:.2f} s", flush=True)
        engine.call, model.encode = timed_call, timed_encode
        for _ in range(args.passes):
            for name, fn in decoders.items():
                spent.clear()
                t0, tokens = time.perf_counter(), 0
                for x in sources:
                    tokens += len(fn(x).tokens[0])
                wall = time.perf_counter() - t0
                times[name].append(wall)
                parts = " ".join(f"{k}={v * 1e3:.0f}ms" for k, v in spent.items())
                print(f"{name} {wall:.3f}s {tokens / wall:.0f} tok/s | {parts} "
                      f"host={1e3 * (wall - sum(spent.values())):.0f}ms", flush=True)
    ratios = [g / b for g, b in zip(times["greedy"], times["k4"])]
    print("RESULT", json.dumps({"greedy_s": times["greedy"], "k4_s": times["k4"], "ratios": ratios,
                                "tokens": tokens, "isa": torch.backends.cpu.get_cpu_capability()}))


if __name__ == "__main__":
    main()
