"""`make bench-peers`: our greedy and exact blockwise decoders timed beside Hugging Face transformers (greedy,
blockwise decoding with our exported heads, assisted generation, prompt lookup) and CTranslate2 (greedy,
float32 and int8) on the same weights, sentences and thread count, in one paired round-robin run
(docs/export.md).

    python experiments/bench_peers.py experiment=demo                      # batch 1, the demo's threads
    python experiments/bench_peers.py experiment=demo draft=tiny           # + HF assisted generation
    python experiments/bench_peers.py experiment=demo 'bench.batch_sizes=[1]'  # batch 1 only (default [1, 8])

The peers decode the base model; HF blockwise also the exported proposal heads; rows go to
results/bench-peers/rows.jsonl.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import PeersEntry

    from bpd.config import ExperimentConfig



def run(cfg: ExperimentConfig, entry: PeersEntry) -> list[dict]:
    import torch

    from bpd import machine_load
    from bpd.bench.peers import (
        batches_of,
        compile_shapes,
        format_peer_rows,
        our_decoders,
        our_specs,
        peer_rows,
        round_robin,
    )
    from bpd.export.bundle import BATCH_ONE_PEERS, PEERS, bundle_peers, close_peers, peer_columns
    from bpd.runtime import Runtime, resolve_path
    from bpd.tasks import load_task
    from bpd.tracking import append_rows, device_name, git_sha

    b = entry.bench
    b.validate()
    runtime = Runtime.build(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)
    tok = task.tokenizer
    vocab = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    path, model, payload, dirs, draft_path, draft_hf = exported_models(runtime, cfg, entry, task)
    split = cfg.decode.split
    pairs = task.pairs(split)
    threads = torch.get_num_threads()
    specs = our_specs(model, b.ks, b.engines)
    all_rows = []
    for bs in b.batch_sizes:
        n = min(len(pairs), (b.n_examples or {}).get(bs, len(pairs)))
        sources = pairs.sources(range(n))
        peers = bundle_peers(dirs, vocab, tok.eos_id, threads, draft_hf, entry.prompt_lookup, batch_one=bs == 1,
                             blockwise_ks=tuple(s.k for s in specs if s.rounds))
        try:  # the CTranslate2 peers decode in worker processes of their own (bpd.export.ct2_process)
            decoders = {**our_decoders(model, specs), **peers}
            print(f"batch {bs}: {n} {split} sentences, {threads} threads, {b.repeats} repeats: "
                  f"{', '.join(decoders)}")
            for key, (built, loaded) in compile_shapes(model, specs, batches_of(sources, bs)).items():
                print(f"{key}: compiled steps built in {built:.0f} s, loaded in {loaded:.1f} s (untimed)")
            start = machine_load.sample()
            times, outputs = round_robin(decoders, batches_of(sources, bs), b.repeats)
            load = machine_load.load_columns(start, machine_load.sample(), threads)
        finally:
            close_peers(peers)
        left_out = [] if bs == 1 else [p for p in BATCH_ONE_PEERS
                                       if PEERS[p]["peer_mode"] != "assisted" or draft_hf is not None]
        scorer = task.scorer(split, n)
        common = {**common_columns(cfg, task, path, model, payload, draft_path), "batch_size": bs,
                  "device": device_name("cpu"), "threads": threads, "dtype": "float32", "git_sha": git_sha(),
                  "command": cfg.command, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "prompt_lookup_num_tokens": entry.prompt_lookup,
                  # transformers' generate runs assisted and prompt-lookup decoding at batch size 1 only
                  "peers_batch_one_only": ", ".join(left_out) or None, **load}
        rows, best = peer_rows(times, outputs, specs, {name: peer_columns(name) for name in peers},
                               lambda t, s=scorer: s.score(t, None)["bleu"], common)
        print(format_peer_rows(rows))
        print(f"best/peer: our best exact decoder ({best}) over each peer, paired, 95% interval")
        for r in rows:
            for path, (ratio, low, high) in (r["greedy_vs_peer"] or {}).items():
                print(f"our {path} greedy over {r['decoder']}: {ratio:.3f} [{low:.3f}, {high:.3f}]")
        if left_out:
            print(f"not at batch {bs}: {', '.join(left_out)} (transformers runs them at batch size 1 only)")
        print(f"load: other processes used {load['load_other_cores']} of {load['load_cores']} cores "
              f"(timing_busy={load['timing_busy']})")
        append_rows(resolve_path(b.results_dir) / "rows.jsonl", rows)
        all_rows += rows
    return all_rows


def exported_models(runtime, cfg: ExperimentConfig, entry: PeersEntry, task):
    """The experiment's model (trained if missing) and its export for the peers, and the draft model's export for
    HF assisted generation where the experiment has one: (path, model, payload, export dirs, draft path, draft's
    HF directory or None)."""
    from bpd.export.bundle import export_bundle
    from bpd.runtime import resolve_path
    from bpd.stages import Recipe, ensure_draft, ensure_heads
    from bpd.training.checkpoint import load_model

    tok = task.tokenizer
    recipe = Recipe.of(cfg)
    path = ensure_heads(runtime, recipe, task)
    model, payload = load_model(path)
    model.heads.set_proposal_vocab(task.proposal_vocab(cfg.decode.proposal_vocab))  # the experiment's setting
    export_root = resolve_path(entry.export_dir)
    dirs = export_bundle(model, tok.model_path, export_root / path.stem, source=path.name)
    draft_path = ensure_draft(runtime, recipe, task)
    draft_hf = None
    if draft_path is not None:
        draft = load_model(draft_path)[0]
        draft_hf = export_bundle(draft, tok.model_path, export_root / draft_path.stem, source=draft_path.name)["hf"]
    return path, model, payload, dirs, draft_path, draft_hf


def common_columns(cfg: ExperimentConfig, task, path, model, payload: dict, draft_path) -> dict:
    """The columns that say which model every row of the run timed, and how it was trained."""
    return {"experiment": "bench-peers", "source_experiment": cfg.name, "task": task.kind, "dataset": task.name,
            "split": cfg.decode.split, "model": path.name, "trained_k": model.k,
            "proposal_vocab": cfg.decode.proposal_vocab, "train_steps": payload.get("step"),
            "train_stopped_by": payload.get("stopped_by"),
            "draft_model": draft_path.name if draft_path is not None else None}


@hydra.main(config_path=CONF_DIR, config_name="bench_peers", version_base="1.3")
def job(cfg: DictConfig) -> None:
    from bpd.decoding.compiling import graph_per_bucket

    # Benchmarks time steady-state steps: one compiled graph per source bucket, whose steps are faster than those
    # of the one graph an evaluation shares across buckets (docs/benchmark.md).
    with graph_per_bucket():
        run_experiment(run, cfg)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
