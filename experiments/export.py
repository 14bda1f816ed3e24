"""`make export`: a trained model's base as a Hugging Face transformers model (Pegasus layout) with its tokenizer
and, for a model with heads, the heads and the custom_generate code that decodes blockwise in HF generate; and
CTranslate2's conversions of the base (float32, int8); checked against our own model (docs/export.md).

    python experiments/export.py experiment=demo                           # the shipped base (checkpoints/)
    python experiments/export.py experiment=demo 'models=[base,heads]'    # and the demo's fine-tuned base
    python experiments/export.py experiment=demo draft=tiny 'models=[draft]' check_examples=100

Directories go to <export_dir>/<checkpoint stem>/{hf,ct2-float32,ct2-int8}; the checks' rows (logit gap,
greedy outputs identical to ours, with the logit gap of every sentence that differs; for a model with heads,
HF blockwise decoding's outputs too) to results_dir (results/export/; make export: outputs/results/export/).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import ExportEntry

    from bpd.config import ExperimentConfig


LOGIT_BATCH = 32  # test sentences whose teacher-forced logits are compared


def model_path(runtime, recipe, task, which: str):
    from bpd.stages import ensure_base, ensure_draft, ensure_heads

    if which == "base":
        return ensure_base(runtime, recipe, task, recipe.base_targets)
    if which == "heads":
        return ensure_heads(runtime, recipe, task)
    if which == "draft":
        if recipe.draft.model is None:
            raise ValueError("models=[draft] exports the draft model of draft-model decoding; name its size, "
                             "e.g. draft=tiny.")
        return ensure_draft(runtime, recipe, task)
    raise ValueError(f"unknown model {which!r} in models; use base, heads or draft.")


def run(cfg: ExperimentConfig, entry: ExportEntry) -> list[dict]:
    import dataclasses

    import torch

    from bpd.export.bundle import bundle_peers, export_bundle, load_hf
    from bpd.export.checks import greedy_identity, logits_gap
    from bpd.runtime import Runtime, resolve_path
    from bpd.stages import Recipe
    from bpd.tasks import load_task
    from bpd.tracking import append_rows, git_sha
    from bpd.training.checkpoint import load_model

    runtime = Runtime.build(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)
    if task.kind != "translation":
        raise ValueError("the export writes translation models (an encoder-decoder with a tokenizer); "
                         "use a translation task.")
    tok = task.tokenizer
    vocab = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    pairs = task.pairs("test")
    n = len(pairs) if entry.check_examples is None else min(len(pairs), entry.check_examples)
    rows = []
    for which in entry.models:
        path = model_path(runtime, Recipe.of(cfg), task, which)
        model = load_model(path)[0]
        if model.heads.n_learned:  # the heads propose among the tokens the experiment's decoding allows
            model.heads.set_proposal_vocab(task.proposal_vocab(cfg.decode.proposal_vocab))
        dirs = export_bundle(model, tok.model_path, resolve_path(entry.export_dir) / path.stem, source=path.name)
        print(f"{which} ({path.name}): " + ", ".join(f"{k} {v}" for k, v in dirs.items()))
        if not entry.check:
            continue
        common = {"experiment": "export", "source_experiment": cfg.name, "model": path.name, "which": which,
                  "split": "test", "n_examples": n, "threads": torch.get_num_threads(), "git_sha": git_sha(),
                  "command": cfg.command, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        batch = [pairs.pair(i) for i in range(min(n, LOGIT_BATCH))]
        gap = logits_gap(model, load_hf(dirs["hf"]), [s for s, _ in batch], [t for _, t in batch])
        print(f"  logits: largest |ours - HF| over {len(batch)} test sentences = {gap:.2e}")
        sources, greedy = pairs.sources(range(n)), None
        # With heads: blockwise decoding inside HF generate at the largest decode k the model has (exact: greedy's).
        decode_ks = [k for k in cfg.decode.ks if 2 <= k <= model.k]
        ks = (max(decode_ks, default=model.k),) if model.k > 1 else ()
        for name, peer in bundle_peers(dirs, vocab, tok.eos_id, torch.get_num_threads(), batch_one=False,
                                       blockwise_ks=ks).items():
            same, greedy = greedy_identity(model, peer, sources, greedy)
            print(f"  {name}: identical to our greedy on {same.identical:.2%} of {n} test sentences")
            for m in same.mismatches[:10]:
                print(f"    sentence {m.index}: parts at position {m.position} (ours {m.ours}, theirs {m.theirs}), "
                      f"logit gap {m.logit_gap}")
            rows.append({**common, "peer": name, "logits_max_abs_diff": gap if name == "hf_greedy" else None,
                         "identical_to_greedy": same.identical,
                         "mismatches": [dataclasses.asdict(m) for m in same.mismatches]})
    if rows:
        append_rows(resolve_path(entry.results_dir) / "rows.jsonl", rows)
    return rows


@hydra.main(config_path=CONF_DIR, config_name="export", version_base="1.3")
def job(cfg: DictConfig) -> None:
    run_experiment(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
