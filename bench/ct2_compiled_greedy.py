"""Our compiled greedy and exact blockwise beside CTranslate2's float32 greedy on the same weights, each decoding
in a process of its own (a CTranslate2 translator in our process slows our compiled path: results/bench-peers).

Loads an experiment's heads model as ``make bench`` does and the CTranslate2 float32 conversion ``make export``
wrote of it (``--ct2``), builds or loads our compiled steps (untimed), then times ``--passes`` passes over the first
``--n`` test sentences at batch 1, alternating: our compiled greedy (this process), CTranslate2 greedy (its worker
process, ``bpd.export.ct2_process.CT2Process``: the worker's own decode time), our exact blockwise at ``--k``.
Prints each pass, the ratios with their range over the passes, and how many sentences CTranslate2 decodes to our
greedy's tokens.

    python experiments/export.py experiment=demo_debian 'models=[heads]' check_examples=20 logger=none
    python bench/ct2_compiled_greedy.py --experiment demo_debian --n 100 --passes 5 \
        --ct2 outputs/export/<heads checkpoint stem>/ct2-float32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="demo_debian")
    ap.add_argument("--ct2", required=True, help="the CTranslate2 float32 model folder (make export)")
    ap.add_argument("--n", type=int, default=100, help="the first N test sentences")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--precision", default="int8", help="proposal precision (the demo's: int8)")
    args = ap.parse_args()

    from static_greedy_per_sentence import load_heads_model

    from bpd.decoding import step_store
    from bpd.decoding.criteria import Exact
    from bpd.decoding.engine import engine_for
    from bpd.export.ct2_process import CT2Process

    model, task, cfg = load_heads_model(args.experiment, args.threads)
    model.heads.set_proposal_precision(args.precision)
    step_store.use_store(Path(cfg.paths.cache_dir) / "compiled")
    engine, limit = engine_for(model, "compiled"), task.max_len(cfg.decode)
    tok = task.tokenizer
    vocab = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    sources = task.pairs("test").sources(range(args.n))
    ct2 = CT2Process(args.ct2, vocab, tok.eos_id, args.threads)
    print(f"{args.experiment}: {args.n} test sentences, batch 1, {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.threads} threads each")

    def ours(decode) -> tuple[float, list]:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = [decode(torch.tensor([s])) for s in sources]
            return time.perf_counter() - t0, [r.tokens[0] for r in out]

    def theirs() -> tuple[float, list]:
        runs = [ct2.timed([s], limit(torch.tensor([s]))) for s in sources]
        return sum(dt for _, dt in runs), [toks[0] for toks, _ in runs]

    def blockwise(x: torch.Tensor):
        return engine.blockwise(x, args.k, Exact(), 1, limit(x))

    sides = {"ours compiled greedy": lambda: ours(lambda x: engine.greedy(x, limit(x))),
             "CTranslate2 float32 greedy": theirs, f"ours compiled exact k={args.k}": lambda: ours(blockwise)}
    outputs = {name: fn()[1] for name, fn in sides.items()}  # warm-up (our steps built or loaded here)
    print(f"our compiled steps: built {engine.compile_seconds:.0f} s, loaded {engine.load_seconds:.1f} s")
    greedy = outputs["ours compiled greedy"]
    same = sum(a == b for a, b in zip(outputs["CTranslate2 float32 greedy"], greedy))
    print(f"CTranslate2 decodes {same} of {len(greedy)} sentences to our greedy's tokens; exact blockwise "
          f"{sum(a == b for a, b in zip(outputs[f'ours compiled exact k={args.k}'], greedy))}")
    times: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for p in range(args.passes):
            for name, fn in sides.items():
                times[name].append(fn()[0])
            print(f"pass {p + 1}: " + ", ".join(f"{name} {t[-1]:.3f} s" for name, t in times.items()), flush=True)
    finally:
        ct2.close()
    base = times["CTranslate2 float32 greedy"]
    for name in sides:
        ratios = [c / t for c, t in zip(base, times[name])]
        print(f"{name}: median {statistics.median(times[name]):.3f} s a pass; over CTranslate2 float32 greedy "
              f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}]")


if __name__ == "__main__":
    main()
