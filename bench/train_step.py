"""What a heads training step costs two ways, in one run, on the same batches:

* ``--compare positions`` (default): every slot computed at every position, against only where its target
  lies inside the sentence (``bpd.training.losses.slot_scores``);
* ``--compare dropout``: ``F.dropout``'s Bernoulli masks, against the masks ``bpd.models.transformer.Dropout``
  draws on a CPU (``rand_like(x) >= p``);
* ``--compare proposal_vocab``: the proposal slots' loss over the whole vocabulary, against among the
  ``--proposal-vocab`` most frequent target tokens (``heads.proposal_vocab``), with the share of the test
  references' tokens those cover (``--task debian``: the Debian corpus's 8k vocabulary).

A training step of k proposal slots (forward and backward of the decoder, the slots and their losses, as
``bpd.training.loop`` takes it) is timed for both paths, alternating, on the first ``--batches`` batches of
the embedded corpus (the demo's token budget, 2,048 per batch). The model has the size of the shipped base
(``small``, dropout 0.3) with random weights: the cost does not depend on what the weights learned. The
losses of the two position paths are checked to agree before anything is timed (the dropout sides draw
different masks). Rows go to results/train-step/rows.jsonl.

    python bench/train_step.py                      # the demo's heads: k = 8 recurrent, 2 threads (~3 min)
    python bench/train_step.py --compare dropout
    python bench/train_step.py --arch medusa --k 10 --threads 1
    python bench/train_step.py --compare proposal_vocab --task debian --proposal-vocab 4000
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bpd.config import ExperimentConfig, HeadsConfig, ModelConfig, TranslationTaskConfig  # noqa: E402
from bpd.config.registry import names  # noqa: E402
from bpd.evaluate import proposal_coverage  # noqa: E402
from bpd.models.transformer import Dropout  # noqa: E402
from bpd.runtime import Runtime  # noqa: E402
from bpd.tasks import load_task  # noqa: E402
from bpd.tracking import append_rows, device_name, git_sha  # noqa: E402
from bpd.training.losses import combine, head_losses  # noqa: E402

SMALL = ModelConfig("small", 256, 4, 1024, 3, 3, dropout=0.3)  # conf/model/small.yaml, the shipped base's size


#: Each comparison's two sides, as (row name, what to set): the reference first, then what the code does.
COMPARISONS = {"positions": ("every_position", "target_positions"), "dropout": ("f_dropout", "rand_mask"),
               "proposal_vocab": ("whole_vocab", "proposal_vocab")}


def use(compare: str, reference: bool, model=None, ids: torch.Tensor | None = None) -> bool:
    """Set up one side of the comparison; returns the losses' ``every_position``. ``proposal_vocab``: the
    proposal slots' loss over the whole vocabulary (reference) or among ``ids`` (``heads.proposal_vocab``)."""
    Dropout.rand_mask_on_cpu = not (compare == "dropout" and reference)
    if compare == "proposal_vocab":
        model.heads.set_loss_vocab(None if reference else ids)
    return compare == "positions" and reference


def step(model, batch, heads: list[int], every_position: bool, seed: int) -> tuple[float, float]:
    """One forward and backward (the optimizer's update costs the same on both paths): (seconds, loss)."""
    src, tgt_in, tgt_out = batch
    torch.manual_seed(seed)  # the same masks on both sides (but for --compare dropout, which draws them otherwise)
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    h, source = model.teacher_forced(src, tgt_in)
    loss = combine(head_losses(model, h, tgt_out, heads, 0.1, every_position, source), p1_weight=7.0)
    loss.backward()
    return time.perf_counter() - t0, float(loss.detach())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", choices=sorted(COMPARISONS), default="positions")
    ap.add_argument("--arch", default="recurrent", help="heads architecture (" + ", ".join(names("head")) + ")")
    ap.add_argument("--k", type=int, default=8, help="slots, p_1 included")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, default=12, help="distinct batches, each timed --repeats times per path")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="results/train-step/rows.jsonl")
    ap.add_argument("--task", choices=("ding", "debian"), default="ding",
                    help="the embedded ding corpus (4k vocabulary) or the Debian corpus (`make data`, 8k)")
    ap.add_argument("--proposal-vocab", type=int, default=1000, help="--compare proposal_vocab: how many tokens")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cfg = ExperimentConfig()
    if args.task == "debian":  # conf/task/debian_en_de.yaml and the Debian base's max_len
        cfg = dataclasses.replace(cfg, task=TranslationTaskConfig(name="debian_en_de", source="debian",
                                                                  vocab_size=8000, max_len=128))
    task = load_task(Runtime.build(cfg), cfg.task, cfg.shipped)
    model = task.build_model(SMALL, HeadsConfig(k=args.k, arch=args.arch, training="finetune"), args.k, seed=0)
    ids = task.proposal_vocab(args.proposal_vocab) if args.compare == "proposal_vocab" else None
    model.train()
    make = task.train_batches(task.pairs("train"), 2048, seed=0)
    batches = [b for _, b in zip(range(args.batches), make(0))]
    heads = list(range(args.k))
    counted = sum(int((b[2] != task.pad_id).sum()) for b in batches)
    if args.compare == "positions":
        for b in batches[:2]:
            a, e = step(model, b, heads, False, 0)[1], step(model, b, heads, True, 0)[1]
            if abs(a - e) > 1e-4 * abs(e):
                raise SystemExit(f"the two paths disagree on the loss ({a} vs {e}): a bug, not a benchmark result.")

    times: dict[bool, list[float]] = {False: [], True: []}  # keyed by "is the reference side"
    ratios = []
    for r in range(args.repeats):
        for j, b in enumerate(batches):
            order = (False, True) if (r + j) % 2 == 0 else (True, False)  # alternate which side goes first
            got = {ref: step(model, b, heads, use(args.compare, ref, model, ids), seed=j)[0] for ref in order}
            for ref, t in got.items():
                times[ref].append(t)
            ratios.append(got[True] / got[False])
    use(args.compare, False, model, ids)
    ref_name, new_name = COMPARISONS[args.compare]
    test = task.pairs("test")
    ref_ms, new_ms = 1e3 * statistics.median(times[True]), 1e3 * statistics.median(times[False])
    q = statistics.quantiles(ratios, n=4)
    row = {
        "bench": "train_step", "compare": args.compare, "arch": args.arch, "k": args.k, "threads": args.threads,
        "model": SMALL.name, "dropout": SMALL.dropout, "vocab": task.vocab_size, "batches": args.batches,
        "repeats": args.repeats, "max_tokens": 2048, "target_tokens": counted, f"{ref_name}_ms": ref_ms,
        f"{new_name}_ms": new_ms, "speedup": statistics.median(ratios), "speedup_q1": q[0], "speedup_q3": q[2],
        "dataset": task.name, "proposal_vocab": args.proposal_vocab if ids is not None else None,
        # The share of the test references' tokens those ids could propose (evaluation rows count greedy's).
        "proposal_coverage": proposal_coverage([test.tgt(i).tolist() for i in range(len(test))], ids),
        "device": device_name(torch.device("cpu")), "torch": torch.__version__, "python": platform.python_version(),
        "git_sha": git_sha(), "command": "python " + " ".join(sys.argv),
    }
    print(f"{args.arch} k={args.k}, {args.threads} thread(s), {args.batches} batches x {args.repeats}: "
          f"{ref_name} {ref_ms:.0f} ms, {new_name} {new_ms:.0f} ms a step; speedup {row['speedup']:.2f}x "
          f"(paired, quartiles {q[0]:.2f}-{q[2]:.2f})"
          + (f"; the {args.proposal_vocab} tokens cover {row['proposal_coverage']:.1%} of the test references"
             if ids is not None else ""))
    append_rows(Path(args.out), [row])


if __name__ == "__main__":
    main()
