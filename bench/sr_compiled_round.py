"""Whole-patch decode time of a shipped super-resolution heads model on the eager and compiled paths: greedy and
exact blockwise at one k, on the manifest's first golden-sample source, several passes (the first compiles).

    python bench/sr_compiled_round.py checkpoints/photos_sr_finetune.json --k 4 --threads 2 --passes 3

Prints each pass's time and ms per iteration, and dynamo's graph and graph-break counts (a graph break or a
recompile per call would show the compiled path's cost as a tracing cost). Printed only: a quick check of what a
compiled round costs beside a compiled greedy step, not a paired benchmark (``make bench`` is that)."""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch._dynamo.utils as dynamo_utils

from bpd.decoding import blockwise_decode, greedy_decode
from bpd.shipped import load_shipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_shipped(args.manifest)
    src = torch.tensor(json.load(open(args.manifest))["golden_sample"]["sources"][:1])
    length = model.seq_len
    decoders = {"greedy": lambda e: greedy_decode(model, src, max_len=length, engine=e),
                f"k{args.k}": lambda e: blockwise_decode(model, src, k=args.k, max_len=length, engine=e)}
    for rep in range(args.passes):
        for name, decode in decoders.items():
            for engine in ("eager", "compiled"):
                t = time.perf_counter()
                its = decode(engine).iterations[0]
                dt = time.perf_counter() - t
                print(f"pass {rep} {name:7s} {engine:8s} {dt:6.2f} s  {its} iterations  {1000 * dt / its:.3f} ms each",
                      flush=True)
    print({k: dict(v) for k, v in dynamo_utils.counters.items() if k in ("stats", "recompiles", "graph_break")})


if __name__ == "__main__":
    main()
