"""Blockwise decoding inside Hugging Face ``generate`` (the export's ``custom_generate``) on a trained heads model:
is it our greedy's output on the test set, and is it faster than transformers' own greedy ``generate``?

The model is exported with its heads (proposing among the experiment's ``decode.proposal_vocab`` tokens, as its
evaluation does), then our greedy, our exact blockwise decoder at each k, HF greedy ``generate`` and HF blockwise
``generate`` at each k decode the first ``--n`` test sentences one batch at a time, back to back in a rotating
order, ``--repeats`` times (``bpd.bench.peers.round_robin``, what ``make bench-peers`` runs). Printed per decoder:
tokens/s, the paired speedup over our greedy and over HF greedy with 95% intervals, outputs identical to our
greedy, BLEU. Rows go to results/hf-blockwise/measured.jsonl (not a ``rows.jsonl``: ``make figures`` does not read
it).

    python bench/hf_blockwise.py --checkpoint outputs/cache/models/heads_....pt --experiment demo_debian
    python bench/hf_blockwise.py --checkpoint ... --n 1000 --repeats 1 --ks 4     # identity on the whole test set
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="a heads model's checkpoint")
    ap.add_argument("--experiment", default="demo_debian", help="the experiment it was trained in (task, vocabulary)")
    ap.add_argument("--overrides", nargs="*", default=[], help="more Hydra overrides, e.g. paths.cache_dir=...")
    ap.add_argument("--n", type=int, default=100, help="test sentences")
    ap.add_argument("--ks", default="2,4,6", help="block sizes, comma-separated")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--export-dir", default="outputs/export")
    ap.add_argument("--out", default="results/hf-blockwise/measured.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from _common import CONF_DIR, register, to_configs
    from hydra import compose, initialize_config_dir

    from bpd import machine_load
    from bpd.bench.peers import batches_of, our_decoders, our_specs, round_robin, speedups
    from bpd.bench.speedup_ci import paired_speedup
    from bpd.decoding.peers import hf_blockwise, hf_generate
    from bpd.export import export_hf
    from bpd.export.bundle import load_hf
    from bpd.runtime import Runtime, resolve_path
    from bpd.tasks import load_task
    from bpd.tracking import append_rows, device_name, git_sha
    from bpd.training.checkpoint import load_model

    register()
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={args.experiment}", "logger=none", *args.overrides])
    exp, _ = to_configs(cfg)
    task = load_task(Runtime.build(exp), exp.task, exp.shipped)
    path = Path(args.checkpoint)
    model, payload = load_model(path)
    model.heads.set_proposal_vocab(task.proposal_vocab(exp.decode.proposal_vocab))
    hf_dir = export_hf(model, task.tokenizer.model_path, resolve_path(args.export_dir) / path.stem / "hf")
    hf = load_hf(hf_dir)
    ks = [k for k in (int(x) for x in args.ks.split(",")) if 2 <= k <= model.k]
    specs = our_specs(model, ks)
    decoders = {**our_decoders(model, specs), "hf_greedy": hf_generate(hf),
                **{f"hf_blockwise_k{k}": hf_blockwise(hf, str(hf_dir), k) for k in ks}}
    sources = task.pairs("test").sources(range(min(args.n, len(task.pairs("test")))))
    print(f"{path.name} (step {payload.get('step')}, {model.heads.arch}, k={model.k}): {len(sources)} test "
          f"sentences, batch {args.batch_size}, {args.threads} thread(s), {args.repeats} repeats", flush=True)
    start, t0 = machine_load.sample(), time.time()
    times, outputs = round_robin(decoders, batches_of(sources, args.batch_size), args.repeats)
    load = machine_load.load_columns(start, machine_load.sample(), args.threads)
    ours = speedups(times, "greedy")
    scorer = task.scorer("test", len(sources))
    def finite(x: float) -> float | None:  # one repeat has no interval (its bounds come back infinite)
        return x if math.isfinite(x) else None

    rows = []
    for name, t in times.items():
        hf_ratio = paired_speedup(times["hf_greedy"], t)
        tokens = sum(len(o) for o in outputs[name])
        row = {"experiment": "hf-blockwise", "source_experiment": args.experiment, "model": path.name,
               "train_step": payload.get("step"), "heads_arch": model.heads.arch, "trained_k": model.k,
               "proposal_vocab": exp.decode.proposal_vocab, "decoder": name, "batch_size": args.batch_size,
               "n_examples": len(sources), "repeats": args.repeats, "threads": args.threads,
               "tokens_per_s": tokens * t.shape[0] / t.sum(), "speedup": ours[name].speedup,
               "speedup_ci_low": finite(ours[name].low), "speedup_ci_high": finite(ours[name].high),
               "speedup_over_hf_greedy": hf_ratio.speedup, "speedup_over_hf_greedy_ci_low": finite(hf_ratio.low),
               "speedup_over_hf_greedy_ci_high": finite(hf_ratio.high),
               "identical_to_greedy": sum(a == b for a, b in zip(outputs[name], outputs["greedy"])) / len(sources),
               "bleu": scorer.score(outputs[name], None)["bleu"], "device": device_name("cpu"),
               "git_sha": git_sha(), "command": " ".join(["python", *sys.argv]),
               "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **load}
        rows.append(row)
        print(f"{name:20s} {row['tokens_per_s']:7.1f} tok/s  over ours greedy {row['speedup']:.3f} "
              f"[{ours[name].low:.3f}, {ours[name].high:.3f}]  over HF greedy "
              f"{hf_ratio.speedup:.3f} [{hf_ratio.low:.3f}, {hf_ratio.high:.3f}]  = our greedy "
              f"{row['identical_to_greedy']:.1%}  BLEU {row['bleu']:.2f}", flush=True)
    print(f"{time.time() - t0:.0f} s; load: other processes used {load['load_other_cores']} of "
          f"{load['load_cores']} cores (timing_busy={load['timing_busy']})")
    append_rows(resolve_path(args.out), rows)
    print(json.dumps({"rows": str(resolve_path(args.out))}))


if __name__ == "__main__":
    main()
