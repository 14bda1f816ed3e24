"""Train the base models that ship with the repository and export them (``make pretrain``).

    python experiments/pretrain.py experiment=pretrain_mt                                 # the MT base
    python experiments/pretrain.py experiment=pretrain_mt models=[base,teacher,distilled]  # and Table 1's
    python experiments/pretrain.py experiment=pretrain_sr                                 # the SR base
    python experiments/pretrain.py experiment=table1_debian setting=both models=[heads]   # a setting's heads

A heads model (``models=[heads]``) is the one its experiment and setting train (base and heads together, since
fine-tuning moves the base), on the shipped base models, and ships as ``<task>_<setting>``: runs of that recipe
install it instead of training (the demo decodes Table 1's Both model this way, and a GPU lease trains nothing).

Budgets are in steps, so the same command trains the same model on any machine; every stage checkpoints
and resumes, so re-running the command after an interruption continues where it stopped. Each finished
model is scored greedily on the whole dev and test sets and written to ``paths.shipped_dir`` (fp16) with a
manifest (``bpd/shipped.py``); later runs whose config matches install it instead of training.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import PretrainEntry

    from bpd.config import ExperimentConfig


MODELS = ("base", "teacher", "distilled", "heads")
SELF_TARGETS = ("base",)  # whose greedy outputs ship: the demo's heads train on them (heads.targets=self)


def run(cfg: ExperimentConfig, entry: PretrainEntry) -> None:
    from bpd.data.batches import pad_rows
    from bpd.data.tokenizer import export_tokenizer
    from bpd.runtime import Runtime
    from bpd.shipped import already_shipped, export, export_greedy_targets, install, refuse_other_data
    from bpd.stages import Recipe, ensure_base, ensure_heads
    from bpd.targets import Search, decode_targets, read_shards, targets_dir_name
    from bpd.tasks import load_task
    from bpd.training.checkpoint import load_model

    unknown = [m for m in entry.models if m not in MODELS]
    if unknown or not entry.models:
        raise ValueError(f"unknown models {unknown or entry.models}; use models=[base], [base,teacher,distilled] "
                         "or [heads].")
    if "heads" in entry.models and (cfg.setting is None or cfg.heads.k == 1):
        raise ValueError("models=[heads] ships the heads model of a Table 1 setting: add setting=both (or another) "
                         "to an experiment whose heads.k is above 1, e.g. experiment=table1_debian.")
    if "distilled" in entry.models and cfg.task.kind != "translation":
        raise ValueError("models=[...distilled] is for translation (sequence-level distillation); drop it.")
    cfg = dataclasses.replace(cfg, shipped=False)  # this is where shipped models come from
    runtime, recipe = Runtime.build(cfg), Recipe.of(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)
    stems = {name: f"{task.name}_{cfg.setting if name == 'heads' else name}" for name in entry.models}
    if entry.export:  # before any training
        fingerprint = task.fingerprint()  # hashes every data file: once, not per model
        for stem in stems.values():
            refuse_other_data(stem, fingerprint, runtime.shipped_dir)
    if "distilled" in entry.models and "teacher" not in entry.models:
        # The distilled base's teacher, not being made now: installed as any run installs a shipped base when it
        # is shipped (what `models=[teacher]` made with this config), else trained here as the distilled stage would.
        ensure_base(runtime, dataclasses.replace(recipe, shipped=True), task, "gold", seed=recipe.teacher_seed)
    made = {
        "base": lambda: ensure_base(runtime, recipe, task, "gold"),
        "teacher": lambda: ensure_base(runtime, recipe, task, "gold", seed=recipe.teacher_seed),
        "distilled": lambda: ensure_base(runtime, recipe, task, "distilled"),
        # on the shipped bases: a heads model ships what a run of its recipe would train
        "heads": lambda: ensure_heads(runtime, dataclasses.replace(recipe, shipped=True), task),
    }
    for name in entry.models:
        path = made[name]()
        print(f"{name}: {path}")
        if not entry.export:
            continue
        manifest = runtime.shipped_dir / f"{stems[name]}.json"
        if already_shipped(path, manifest.stem, runtime.shipped_dir):
            # A resumed `make pretrain` passes finished models again: re-scoring them would only restamp
            # the manifest.
            print(f"{name}: already shipped as {manifest.stem} (delete its manifest to export it again)")
        else:
            model, _ = load_model(path)
            # decode.n_examples: the first N of each split (a photo corpus's splits take hours to decode whole).
            n = cfg.decode.n_examples
            scores = {split: task.dev_score(model, cfg.decode, n, split) for split in ("dev", "test")}
            if n is not None:
                scores["scored_examples"] = n
            if name == "heads":
                scores["test_block_size"] = block_sizes(task, model, cfg.decode)
            # A few dev sources, decoded by the shipped weights: tests/test_shipped.py decodes them again.
            sources = task.pairs("dev").sources(range(min(4, len(task.pairs("dev")))))
            limit = task.max_len(cfg.decode)(pad_rows(sources, task.pad_id, min_width=1))
            export(path, manifest.stem, fingerprint, runtime.shipped_dir, scores,
                   {"role": name, "task": task.name, **({"setting": cfg.setting} if name == "heads" else {})},
                   sources, limit)
            print(f"{name}: dev {scores['dev']}, test {scores['test']} -> {manifest}")
        corpus = task.tokenizer_corpus if cfg.task.kind == "translation" else None
        if corpus is not None:  # runs on this corpus install it instead of learning it (bpd.data.tokenizer)
            tok = export_tokenizer(task.tokenizer.model_path, runtime.shipped_dir, corpus,
                                   task.vocab_size)
            if tok is not None:
                print(f"{name}: its tokenizer -> {tok}")
        if name in SELF_TARGETS and cfg.task.kind == "translation" and "greedy_train" not in json.loads(
                manifest.read_text()):
            # The heads' self-distillation targets (setting=finetune-self, the demo's) ship with the base,
            # decoded by the weights as shipped (fp16-rounded), which is what a run that installs them has.
            shipped = runtime.cache_root / "shipped" / path.name
            if not shipped.is_file():
                install(shipped, fingerprint, runtime.shipped_dir)
            decoded = shipped.with_name(targets_dir_name(shipped.stem, "greedy", cfg.distill.max_sources))
            decode_targets(runtime, task, shipped, decoded, Search(1, 0.0, cfg.distill, cfg.decode),
                           cfg.distill.max_sources)
            export_greedy_targets(manifest, read_shards(sorted(decoded.glob("shard*.npz"))), task.pairs("train"))
            print(f"{name}: its greedy outputs on the training sources -> {manifest.with_suffix('.greedy.npz')}")

def block_sizes(task, model, decode) -> dict[str, float]:
    """Exact blockwise decoding's mean accepted block size k-hat on the whole test split, at every k of
    ``decode.ks`` the model has heads for, proposing from ``decode.proposal_vocab`` as evaluations do (batches of
    32, eager): the manifest's record of what its heads do."""
    from bpd.decoding.spec import DecodeSpec
    from bpd.decoding.timed import Passes, decode_and_time

    model.eval().heads.set_proposal_vocab(task.proposal_vocab(decode.proposal_vocab))
    specs = {k: DecodeSpec("blockwise", k=k) for k in decode.ks if 1 < k <= model.k}
    pairs = task.pairs("test")
    outs = decode_and_time(model, pairs.sources(range(len(pairs))), list(specs.values()), task.max_len(decode),
                           batch_size=32, passes=Passes(warmup=0, progress=False))
    return {str(k): sum(map(len, outs[s.key].tokens)) / sum(outs[s.key].iterations) for k, s in specs.items()}


@hydra.main(config_path=CONF_DIR, config_name="pretrain", version_base="1.3")
def job(cfg: DictConfig) -> None:
    run_experiment(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
