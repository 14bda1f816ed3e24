"""Whether one compiled package per source bucket decodes faster than one package for every bucket, paired in one
process (issue: the benchmark compiled per bucket, evaluations once for all buckets).

Two engines on two copies of one model: one builds its packages inside ``compiling.graph_per_bucket`` (every
dimension fixed: a package per function and source bucket), the other as evaluations do (the source length, the
cache capacity and the attended window symbolic). Both decode the same test sentences at batch 1, compiled
greedy and compiled exact blockwise at each ``--ks``, every shape built or loaded first (untimed); then
``--passes`` timed passes alternate the two engines decoder by decoder, and each decoder's per-bucket time ratio
(per bucket / shared) is printed with its spread over the passes. Same tokens from both engines is checked.

    python bench/bucket_packages.py --experiment demo_debian --n 60 --max-bucket 32 --ks 4 --passes 5
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="demo_debian")
    ap.add_argument("--n", type=int, default=60, help="the first N test sentences in those buckets")
    ap.add_argument("--max-bucket", type=int, default=32, help="sentences whose padded source is at most this long "
                    "(each bucket builds its own packages on the per-bucket side)")
    ap.add_argument("--ks", type=int, nargs="+", default=[4])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--precision", default="int8", help="proposal precision (the demo's: int8)")
    args = ap.parse_args()

    from static_greedy_per_sentence import load_heads_model

    from bpd.decoding import step_store
    from bpd.decoding.compiling import graph_per_bucket
    from bpd.decoding.criteria import Exact
    from bpd.decoding.engine import bucket, engine_for

    model, task, cfg = load_heads_model(args.experiment, args.threads)
    model.heads.set_proposal_precision(args.precision)
    step_store.use_store(Path(cfg.paths.cache_dir) / "compiled")
    twin = copy.deepcopy(model)
    shared, each = engine_for(model, "compiled"), engine_for(twin, "compiled")
    limit = task.max_len(cfg.decode)
    test = task.pairs("test")
    sources = [torch.tensor([s]) for s in test.sources(range(len(test))) if bucket(len(s)) <= args.max_bucket]
    sources = sources[:args.n]
    buckets = sorted({bucket(x.shape[1]) for x in sources})
    print(f"{args.experiment}: {args.n} test sentences in source buckets {buckets}, batch 1, compiled, "
          f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s)")

    def decoders(engine):
        out = {"greedy": lambda x: engine.greedy(x, limit(x))}
        for k in args.ks:
            out[f"exact k={k}"] = lambda x, k=k: engine.blockwise(x, k, Exact(), 1, limit(x))
        return out

    sides = {"shared": (decoders(shared), torch.inference_mode), "per bucket": (decoders(each), graph_per_bucket)}

    def run(side: str, name: str) -> tuple[float, list]:
        fns, context = sides[side]
        with context(), torch.inference_mode():
            t0 = time.perf_counter()
            tokens = [fns[name](x).tokens[0] for x in sources]
            return time.perf_counter() - t0, tokens

    names = list(sides["shared"][0])
    for name in names:  # every shape built or loaded, untimed
        for side in sides:
            run(side, name)
    for side, engine in (("shared", shared), ("per bucket", each)):
        count = sum(len(v) for v in engine.packages.values())
        print(f"{side}: {count} packages, built {engine.compile_seconds:.0f} s, loaded {engine.load_seconds:.1f} s")
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    for p in range(args.passes):
        for name in names:
            order = list(sides) if p % 2 == 0 else list(reversed(sides))
            outs = {}
            for side in order:
                dt, outs[side] = run(side, name)
                times[side, name].append(dt)
            assert outs["shared"] == outs["per bucket"], f"{name}: the two engines' tokens differ"
    for name in names:
        ratios = [e / s for e, s in zip(times["per bucket", name], times["shared", name])]
        print(f"{name}: shared {statistics.median(times['shared', name]):.3f} s, per bucket "
              f"{statistics.median(times['per bucket', name]):.3f} s; per bucket / shared median "
              f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] over {args.passes} passes")


if __name__ == "__main__":
    main()
