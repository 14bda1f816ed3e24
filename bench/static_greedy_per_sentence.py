"""Where the static path's greedy time goes, sentence by sentence: which sources cost more per token than the rest.

Loads an experiment's heads model as ``make bench`` does, decodes the first ``--n`` test sentences one at a time
with compiled greedy (every source bucket compiled first, untimed; one graph per bucket, as the benchmarks run
it), then times a second pass per sentence. Prints tokens/s over the first ``--split`` sentences and over the
rest, and the slowest sentences with their source length, bucket and milliseconds per output token.

    python bench/static_greedy_per_sentence.py --experiment demo_debian --n 100 --split 60

``--sequence 22,85,85`` instead times those sentences (1-based) in that order after one untimed call each in
order of first appearance, so whose shape a fresh engine compiles first is the caller's choice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))


def load_heads_model(experiment: str, threads: int):
    """An experiment's heads model as ``make bench`` loads it (installed or trained by its recipe, in eval mode,
    proposing from ``decode.proposal_vocab``) with its task and config, on ``threads`` threads."""
    import _common
    from hydra import compose, initialize_config_dir

    from bpd.runtime import Runtime
    from bpd.stages import Recipe, ensure_heads
    from bpd.tasks import load_task
    from bpd.training.checkpoint import load_model

    _common.register()
    with initialize_config_dir(config_dir=os.fspath(REPO / "conf"), version_base="1.3"):
        cfg, _ = _common.to_configs(compose(config_name="bench", overrides=[f"experiment={experiment}"]))
    torch.set_num_threads(threads)
    runtime = Runtime.build(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)
    model, _ = load_model(ensure_heads(runtime, Recipe.of(cfg), task))
    model.eval()
    model.heads.set_proposal_vocab(task.proposal_vocab(cfg.decode.proposal_vocab))
    return model, task, cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="demo_debian")
    ap.add_argument("--n", type=int, default=100, help="the first N test sentences (make bench's batch 1: 100)")
    ap.add_argument("--split", type=int, default=60, help="report sentences 1..split and split+1..n apart")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--sequence", default=None, help="comma-separated 1-based sentence numbers to time in order")
    args = ap.parse_args()

    from bpd.decoding.compiling import graph_per_bucket
    from bpd.decoding.engine import bucket, engine_for

    model, task, cfg = load_heads_model(args.experiment, args.threads)
    engine, limit = engine_for(model, "compiled"), task.max_len(cfg.decode)
    sources = task.pairs("test").sources(range(args.n))

    def decode(i: int) -> tuple[float, int]:
        """Sentence ``i`` decoded once: its seconds and output tokens."""
        x = torch.tensor([sources[i]])
        t0 = time.perf_counter()
        out = engine.greedy(x, limit(x))
        return time.perf_counter() - t0, len(out.tokens[0])

    order = [int(i) - 1 for i in args.sequence.split(",")] if args.sequence else list(range(len(sources)))
    with graph_per_bucket(), torch.inference_mode():
        for i in dict.fromkeys(order):  # untimed: every shape compiles, in order of first appearance
            decode(i)
        timed = [(*decode(i), i) for i in order]
    if args.sequence:
        for seconds, n_out, i in timed:
            n_src = len(sources[i])
            print(f"sentence {i + 1} (source {n_src} tokens, bucket {bucket(n_src)}): {seconds * 1e3:.1f} ms, "
                  f"{seconds * 1e3 / max(n_out, 1):.2f} ms/token")
        return
    rows = [(seconds, i, len(sources[i]), bucket(len(sources[i])), n_out) for seconds, n_out, i in timed]
    for lo, hi in ((0, args.split), (args.split, args.n)):
        part = rows[lo:hi]
        seconds, tokens = sum(r[0] for r in part), sum(r[4] for r in part)
        print(f"sentences {lo + 1}-{hi}: {seconds:.3f} s, {tokens} tokens, {tokens / seconds:.0f} tok/s")
    for seconds, i, n_src, b, n_out in sorted(rows, reverse=True)[: args.top]:
        print(f"sentence {i + 1}: {seconds * 1e3:.1f} ms, source {n_src} tokens (bucket {b}), output {n_out} tokens, "
              f"{seconds * 1e3 / max(n_out, 1):.2f} ms/token")


if __name__ == "__main__":
    main()
