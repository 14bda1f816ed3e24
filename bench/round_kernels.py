"""A compiled round's time kernel by kernel, beside a greedy step's, inside real decodes (issue: where a k = 4
round's time goes).

Builds the experiment's compiled steps with inductor's per-kernel profiling on (``cpp.enable_kernel_profile``:
each generated kernel records itself to the PyTorch profiler) into a store of their own (``--store``: these
packages time a little slower and must not be the ones decodes load), decodes the first ``--n`` test sentences at
batch 1 with compiled greedy and compiled exact blockwise at ``--k`` under the profiler, and prints per decoder
the kernels that took the most time: microseconds per greedy step or per round, and calls per step or round.

    python bench/round_kernels.py --experiment demo_debian --n 30 --k 4
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="demo_debian")
    ap.add_argument("--n", type=int, default=30, help="the first N test sentences")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--precision", default="int8", help="proposal precision (the demo's: int8)")
    ap.add_argument("--store", default="/tmp/bpd-kernel-profile-store")
    args = ap.parse_args()

    import torch._inductor.config as inductor
    from static_greedy_per_sentence import load_heads_model

    from bpd.decoding import step_store
    from bpd.decoding.criteria import Exact
    from bpd.decoding.engine import engine_for

    inductor.cpp.enable_kernel_profile = True
    model, task, cfg = load_heads_model(args.experiment, args.threads)
    model.heads.set_proposal_precision(args.precision)
    step_store.use_store(args.store)
    engine, limit = engine_for(model, "compiled"), task.max_len(cfg.decode)
    sources = [torch.tensor([s]) for s in task.pairs("test").sources(range(args.n))]
    decoders = {"greedy": lambda x: engine.greedy(x, limit(x)),
                f"exact k={args.k}": lambda x: engine.blockwise(x, args.k, Exact(), 1, limit(x))}
    print(f"{args.experiment}: {args.n} test sentences, batch 1, compiled ({args.precision} chain), "
          f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s)")
    with torch.inference_mode():
        for x in sources[:3]:  # every function built or loaded
            for fn in decoders.values():
                fn(x)
        for name, fn in decoders.items():
            calls = 0
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for x in sources:
                    calls += sum(fn(x).iterations)
            per: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
            for e in prof.key_averages():
                per[e.key][0] += e.self_cpu_time_total
                per[e.key][1] += e.count
            total = sum(v[0] for v in per.values())
            print(f"\n{name}: {calls} calls (steps or rounds), {total / calls:.1f} us a call in profiled ops")
            for key, (us, count) in sorted(per.items(), key=lambda kv: -kv[1][0])[:args.top]:
                print(f"  {us / calls:8.1f} us  {count / calls:5.2f}x  {us / total:6.1%}  {key[:100]}")


if __name__ == "__main__":
    main()
