"""What beam search costs when it decodes training sources for distillation, two ways in one run:

* ``--compare rows`` (default): finished rows left in the batch to the end (``beam_decode(...,
  drop_finished=False)``, the reference) against finished rows leaving it (the default);
* ``--compare cache``: a KV cache allocated whole at the start (``KVCache.first_entries`` = its capacity, the
  reference) against one that starts at 16 entries and doubles as it fills (the default): beam search copies
  the cache at every step to reorder its beams, so the copy costs what is allocated;
* ``--compare both``: both references at once (what beam search did before either change) against the default.

The sources are those ``bpd.targets`` decodes (an evenly spread sample of the training set, shortest first, in
batches of ``--batch-size``), the model a shipped checkpoint (the Debian teacher by default: the distilled base's
targets are its beam-4 outputs). Every batch is decoded by both sides back to back, in an order that alternates
from batch to batch, ``--repeats`` times; the outputs must agree token for token before anything is reported.
The speedup and its 95% interval are ``bpd.bench.speedup_ci.paired_speedup`` over (repeats, batches), the
estimate ``make bench`` prints. Rows go to results/beam-decode/rows.jsonl.

    python bench/beam_decode.py                          # 1,024 Debian training sources, beam 4, 2 threads
    python bench/beam_decode.py --compare cache --batch-size 128
    python bench/beam_decode.py --task ding --sources 4096 --threads 1
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bpd.bench.speedup_ci import paired_speedup  # noqa: E402
from bpd.config import ExperimentConfig, TranslationTaskConfig  # noqa: E402
from bpd.data.batches import pad_rows  # noqa: E402
from bpd.decoding import beam_decode  # noqa: E402
from bpd.models import KVCache  # noqa: E402
from bpd.runtime import Runtime  # noqa: E402
from bpd.targets import sampled_sources  # noqa: E402
from bpd.tasks import load_task  # noqa: E402
from bpd.tracking import append_rows, device_name, git_sha  # noqa: E402
from bpd.training.checkpoint import load_model  # noqa: E402

#: --task: the corpus (conf/task/, with ``task.max_len`` as in its base's recipe) and the shipped teacher whose
#: beam outputs distill it.
TASKS = {"debian": (TranslationTaskConfig(name="debian_en_de", source="debian", vocab_size=8000, max_len=128),
                    "checkpoints/debian_en_de_teacher.pt"),
         "ding": (ExperimentConfig().task, "checkpoints/ding_en_de_teacher.pt")}


#: Each comparison's two sides, as row names: the reference first, then what the code does by default.
COMPARISONS = {"rows": ("keep_finished", "drop_finished"), "cache": ("whole_cache", "growing_cache"),
               "both": ("keep_finished_whole_cache", "drop_finished_growing_cache")}


def decode(model, src, a: argparse.Namespace, compare: str, reference: bool, max_len: int):
    """One side of the comparison: beam search with its setting, the other setting at its default."""
    entries = KVCache.first_entries
    if compare in ("cache", "both") and reference:
        KVCache.first_entries = 1 << 30  # min(capacity, this): the whole capacity at the start
    try:
        keep = compare in ("rows", "both") and reference
        return beam_decode(model, src, a.beam, a.alpha, max_len, drop_finished=not keep)
    finally:
        KVCache.first_entries = entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", choices=sorted(COMPARISONS), default="rows")
    ap.add_argument("--task", choices=sorted(TASKS), default="debian")
    ap.add_argument("--checkpoint", default=None, help="the model that decodes (default: the task's shipped teacher)")
    ap.add_argument("--sources", type=int, default=1024, help="training sources, evenly spread")
    ap.add_argument("--batch-size", type=int, default=64, help="sources a batch (distill.batch_size)")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="results/beam-decode/rows.jsonl")
    a = ap.parse_args()
    if a.sources < 1 or a.batch_size < 1 or a.repeats < 1 or a.beam < 1:
        ap.error("--sources, --batch-size, --repeats and --beam must be at least 1.")
    task_cfg, default_ckpt = TASKS[a.task]
    ckpt = Path(a.checkpoint or default_ckpt)
    if not ckpt.is_file():
        ap.error(f"no checkpoint at {ckpt}: pass --checkpoint, or run from the repository root.")
    torch.set_num_threads(a.threads)
    cfg = ExperimentConfig(task=task_cfg).validate()
    task = load_task(Runtime.build(cfg), cfg.task, cfg.shipped)  # says how to build the corpus if it is not there
    train = task.pairs("train")
    chosen = sampled_sources(len(train), a.sources)
    order = chosen[np.argsort(train.src_lengths[chosen], kind="stable")]
    batches = [order[i : i + a.batch_size].tolist() for i in range(0, len(order), a.batch_size)]
    model, _ = load_model(ckpt, torch.device("cpu"))
    limit = task.max_len(cfg.decode)
    sides = ("reference", "default")
    times = {s: np.zeros((a.repeats, len(batches))) for s in sides}
    calls = dict.fromkeys(sides, 0)
    for rep in range(a.repeats):
        for bi, b in enumerate(batches):
            src = pad_rows(train.sources(b), task.pad_id, min_width=1)
            got = {}
            for side in sides if (rep * len(batches) + bi) % 2 == 0 else sides[::-1]:
                t0 = time.perf_counter()
                got[side] = decode(model, src, a, a.compare, side == "reference", limit(src))
                times[side][rep, bi] = time.perf_counter() - t0
                calls[side] += got[side].invocations if rep == 0 else 0
            if got["reference"].tokens != got["default"].tokens:
                sys.exit(f"batch {bi}: the two sides decoded different outputs; nothing is reported.")
    est = paired_speedup(times["reference"], times["default"])
    ref_name, new_name = COMPARISONS[a.compare]
    per_s = {s: len(order) / float(np.median(times[s], axis=0).sum()) for s in sides}
    row = {
        "bench": "beam_decode", "compare": a.compare, "reference": ref_name, "default": new_name, "task": task.name,
        "checkpoint": ckpt.name, "sources": len(order), "of": len(train),
        "batch_size": a.batch_size, "beam": a.beam, "alpha": a.alpha, "repeats": a.repeats, "threads": a.threads,
        **{f"{side}_sources_per_s": per_s[side] for side in sides},
        **{f"{side}_decoder_calls": calls[side] for side in sides},
        "speedup": est.speedup, "speedup_ci_low": est.low, "speedup_ci_high": est.high, "outputs_equal": True,
        "hours_for_all_sources": len(train) / per_s["default"] / 3600,
        "device": device_name(torch.device("cpu")), "torch": torch.__version__, "python": platform.python_version(),
        "git_sha": git_sha(), "command": "python " + " ".join(sys.argv),
    }
    append_rows(Path(a.out), [row])
    interval = f"[{est.low:.2f}, {est.high:.2f}]" if a.repeats > 1 else "(no interval from one repeat)"
    print(f"{len(order)} of {len(train)} sources, beam {a.beam}, batches of {a.batch_size}, {a.threads} threads: "
          f"{ref_name} {per_s['reference']:.1f} sources/s, {new_name} {per_s['default']:.1f} sources/s; speedup "
          f"{est.speedup:.2f}x {interval} over {a.repeats} repeat(s); outputs identical. "
          f"All {len(train)} sources: {row['hours_for_all_sources']:.1f} h at this rate. Row: {a.out}")


if __name__ == "__main__":
    main()
