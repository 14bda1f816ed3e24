"""What a compiled step costs, and what compiling it costs, under inductor settings beside the compiled path's own
(``bpd.decoding.compiling.compile_options``):

* ``--buckets each``: one graph per function and source bucket (what the benchmarks compile); ``--buckets one``:
  one graph per function for every bucket, the source length and the cache capacity symbolic (what evaluations
  compile: ``compiling.DYNAMIC_BUCKETS``);
* ``--no-prepack``: frozen weights left unpacked (``cpp.weight_prepack=False``). Prepacked weights are what keep
  a frozen graph out of inductor's FX graph cache (they cannot be pickled), so without them a second process
  loads the graphs instead of compiling them.

Each source length in ``--lengths`` is timed in turn in this one process (``bpd.bench.step_costs`` on the
compiled path: t_1, and t_k and the start call s_k per k), with the wall time of its first call (compilation,
or none when a graph is reused). Run it twice with the same ``TORCHINDUCTOR_CACHE_DIR`` to see what a second
process pays.

    TORCHINDUCTOR_CACHE_DIR=/tmp/ind python bench/compile_variants.py outputs/cache/models/<heads>.pt \
        --buckets each --no-prepack
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import bpd.decoding.compiling as compiling
from bpd.bench.step_costs import StepTiming, step_costs
from bpd.training.checkpoint import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--buckets", choices=("one", "each"), default="each")
    ap.add_argument("--no-prepack", action="store_true")
    ap.add_argument("--lengths", type=int, nargs="+", default=[20, 40, 12])
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--proposal-precision", choices=("float32", "int8"), default="float32",
                    help="the proposal chain's weights (decode.proposal_precision)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    compiling.DYNAMIC_BUCKETS = args.buckets == "one"
    if args.no_prepack:
        import torch._inductor.config as inductor

        inductor.cpp.weight_prepack = False
    model, _ = load_model(args.checkpoint)
    model.eval()
    model.heads.set_proposal_precision(args.proposal_precision)
    gen = torch.Generator().manual_seed(0)
    isa = torch.backends.cpu.get_cpu_capability()
    print(f"buckets {args.buckets}, prepacked weights {not args.no_prepack}, {isa}, {args.threads} thread(s), "
          f"{args.proposal_precision} proposals")
    for n in args.lengths:
        src = torch.randint(4, model.cfg.vocab_size, (1, n), generator=gen)
        t0 = time.perf_counter()
        with torch.inference_mode():
            costs = step_costs(model, src, args.ks, timing=StepTiming(repeats=200), engine="compiled")
        shown = " ".join(f"{k} {v:.3f}" for k, v in costs.items() if k[0] in "ts")
        print(f"source {n:4d}: wall {time.perf_counter() - t0:6.1f} s   ms: {shown}", flush=True)


if __name__ == "__main__":
    main()
