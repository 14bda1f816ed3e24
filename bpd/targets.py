"""Training targets decoded by a trained model: the paper's sequence-level distillation (a teacher's beam
outputs), self-distillation (the base model's own greedy outputs), and the base model's dev outputs that
the heads stage tracks per-head agreement against.

Decoding a WMT-sized training set takes hours, so it runs in resumable shards, split across the ranks of
a distributed run; each finished shard is written atomically, so a killed run loses at most one shard.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from bpd.config import DecodeConfig, DistillConfig
from bpd.data.batches import pad_rows
from bpd.data.store import ListPairs, PairStore, open_intact, write_store
from bpd.decoding import beam_decode, greedy_decode
from bpd.locks import exclusive
from bpd.runtime import Runtime
from bpd.shipped import greedy_targets
from bpd.tasks import Pairs, Task
from bpd.training import distributed as dist
from bpd.training.checkpoint import load_model


@dataclass(frozen=True)
class Search:
    """How a model decodes training targets: beam size (1: greedy) and length penalty, the shard and batch sizes
    (``distill``) and the length limit (``decode``)."""

    beam: int
    alpha: float
    distill: DistillConfig
    decode: DecodeConfig


def decode_targets(runtime: Runtime, task: Task, model_path: Path, out: Path, search: Search, max_sources: int | None,
                   shipped: Path | None = None, superset: Path | None = None) -> Pairs:
    """Decode the training sources with a trained model (all, or ``max_sources`` of them spread evenly:
    ``sampled_sources``), in resumable shards; returns the (source, output) pairs as a token store
    (``out/targets.store``), in the training set's order.

    ``search.beam``=1 is greedy (self-distillation targets); beam=4, alpha=0.6 is the paper's sequence-level
    distillation. Outputs cut by the length limit still end in EOS (the heads must learn to stop); empty
    outputs are left out. Sources are decoded shortest first (little padding); each shard is an ``.npz`` of
    its example indices and outputs. ``shipped``: these outputs as ``bpd.shipped`` ships them (one file of
    the shards' arrays), assembled instead of decoded. ``superset``: the folder of a finished decode of all the
    sources by the same model and search; a sample's outputs are then taken from it instead of decoded again
    (each output as decoded in its batch there, whose length limit may have cut it differently).
    """
    out.mkdir(parents=True, exist_ok=True)
    final = out / "targets.store"
    # A damaged store is removed and assembled again from its shards (kept beside it), not decoded again.
    if (final / "manifest.json").is_file() and (store := open_intact(final)) is not None:
        return store
    beam, alpha = search.beam, search.alpha
    with exclusive(out / "decode.lock", lambda: (final / "manifest.json").is_file()) as done:  # one job decodes
        if done:
            return PairStore(final)
        if shipped is not None:
            if runtime.is_main:
                _assemble(final, [shipped], task.pairs("train"), task,
                          {"model": model_path.name, "beam": beam, "alpha": alpha, "shipped": shipped.name})
                print(f"{desc_of(beam)} targets: the shipped {shipped.name}")
            dist.barrier()
            return PairStore(final)
        decoded_all = superset is not None and (superset / "targets.store" / "manifest.json").is_file()
        if max_sources is not None and decoded_all:
            if runtime.is_main:
                train = task.pairs("train")
                _assemble(final, sorted(superset.glob("shard*.npz")), train, task,
                          {"model": model_path.name, "beam": beam, "alpha": alpha, "sampled_from": superset.name},
                          only=sampled_sources(len(train), max_sources))
                print(f"{desc_of(beam)} targets: {max_sources} sources' outputs from {superset.name}")
            dist.barrier()
            return PairStore(final)
        return _decode_targets(runtime, task, model_path, out, search, max_sources)


def _decode_targets(runtime: Runtime, task: Task, model_path: Path, out: Path, search: Search,
                    max_sources: int | None) -> Pairs:
    final, beam, alpha = out / "targets.store", search.beam, search.alpha
    # Under torchrun, rank r decodes shards r, r + world, ... and reads the others'.
    info, device = runtime.info, runtime.device
    model, _ = load_model(model_path, device)
    train = task.pairs("train")
    shard, bs = search.distill.shard_size, search.distill.batch_size
    limit = task.max_len(search.decode)
    chosen = sampled_sources(len(train), max_sources)
    order = chosen[np.argsort(train.src_lengths[chosen], kind="stable")]
    shards = [order[i : i + shard] for i in range(0, len(order), shard)]
    paths = [out / f"shard{si:04d}.npz" for si in range(len(shards))]
    desc = f"decode train ({desc_of(beam)})"
    for si, idx in enumerate(tqdm(shards, desc=desc, disable=not info.is_main)):
        if paths[si].exists() or si % info.world_size != info.rank:
            continue  # finished earlier, or another rank's shard
        outputs: list[list[int]] = []
        for j in range(0, len(idx), bs):
            b = idx[j : j + bs].tolist()
            src = pad_rows(train.sources(b), task.pad_id, min_width=1).to(device)
            n = limit(src)
            res = greedy_decode(model, src, max_len=n) if beam == 1 else beam_decode(model, src, beam, alpha, n)
            for toks in res.tokens:
                if task.eos_id >= 0 and (not toks or toks[-1] != task.eos_id):
                    toks = toks + [task.eos_id]  # cut by max_len: still teach the heads to stop
                outputs.append(toks)
        tmp = paths[si].with_name(f"{paths[si].name}.tmp{os.getpid()}.npz")
        np.savez(tmp, index=np.asarray(idx), lengths=np.array([len(t) for t in outputs], dtype=np.int64),
                 tokens=np.fromiter((x for t in outputs for x in t), dtype=np.int64))
        os.replace(tmp, paths[si])
    if info.distributed:
        dist.wait_for_files(paths)
    if info.is_main:
        _assemble(final, paths, train, task, {"model": model_path.name, "beam": beam, "alpha": alpha})
    dist.barrier()
    return PairStore(final)


def sampled_sources(n: int, max_sources: int | None) -> np.ndarray:
    """The training examples whose sources are decoded: all ``n``, or ``max_sources`` of them spread evenly over
    the training set (a fixed choice, so every run and the shipped targets decode the same ones; evenly spaced
    rather than the first ones, since a corpus file lists its sources one after another)."""
    if max_sources is None or max_sources >= n:
        return np.arange(n)
    return (np.arange(max_sources, dtype=np.int64) * n) // max_sources


def targets_dir_name(stem: str, desc: str, max_sources: int | None) -> str:
    """The cache folder of a model's decoded targets (``_n<count>`` when only a sample of sources is decoded)."""
    return f"{stem}_{desc}" + (f"_n{max_sources}" if max_sources is not None else "")


def desc_of(beam: int) -> str:
    return "greedy" if beam == 1 else f"beam{beam}"


def read_shards(shards: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decode shards' example indices, output lengths and concatenated output tokens, joined in order."""
    index, lengths, tokens = [], [], []
    for p in shards:
        with np.load(p) as z:
            index.append(z["index"]), lengths.append(z["lengths"]), tokens.append(z["tokens"])
    return np.concatenate(index), np.concatenate(lengths), np.concatenate(tokens)


def _assemble(final: Path, shards: list[Path], train: Pairs, task: Task, info: dict,
              only: np.ndarray | None = None) -> None:
    """The shards' outputs in the training set's order, joined to their sources, as one store; ``only``: those of
    these examples alone (a sample of the sources the shards decoded)."""
    n = len(train)
    index, lengths, tokens = read_shards(shards)
    starts = np.zeros(n, dtype=np.int64)
    starts[index] = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    length_of = np.zeros(n, dtype=np.int64)
    length_of[index] = lengths
    if only is not None:
        length_of[np.setdiff1d(index, only)] = 0
        index = only
    keep = np.flatnonzero(length_of > (1 if task.eos_id >= 0 else 0)).tolist()  # EOS alone: nothing to learn
    pairs = ((train.src(i), tokens[starts[i] : starts[i] + length_of[i]]) for i in keep)
    # Sources not decoded (distill.max_sources) have no output and are not counted as dropped.
    write_store(final, pairs, task.vocab_size, {"decoded_by": info, "training_lines": n, "source_lines": len(index),
                                                 "dropped_empty": len(index) - len(keep)})


def distilled_pairs(runtime: Runtime, task: Task, teacher: Path, sources: int | None, distill: DistillConfig,
                    decode: DecodeConfig) -> Pairs:
    """The paper's sequence-level distillation: the ``teacher`` checkpoint beam-decodes the training sources
    (``sources`` of them; None: all)."""
    d = distill
    folder = runtime.cache_root / "distill"
    desc = f"beam{d.beam}_a{d.alpha:g}"
    # The distilled base's decode of every source (distill.base_sources: null) holds the heads' sample too.
    out, superset = (folder / targets_dir_name(teacher.stem, desc, n) for n in (sources, None))
    return decode_targets(runtime, task, teacher, out, Search(d.beam, d.alpha, distill, decode), sources,
                          superset=superset)


def self_pairs(runtime: Runtime, task: Task, base_path: Path, distill: DistillConfig, decode: DecodeConfig,
               use_shipped: bool) -> Pairs:
    """Self-distillation targets: the base model's own greedy outputs on the training sources (the shipped
    ones when ``use_shipped`` (``shipped``) and the base is an installed shipped model:
    ``bpd.shipped.greedy_targets``)."""
    n = len(sampled_sources(len(task.pairs("train")), distill.max_sources))
    out = runtime.cache_root / "distill" / targets_dir_name(base_path.stem, "greedy", distill.max_sources)
    cached = (out / "targets.store" / "manifest.json").is_file()
    shipped = greedy_targets(base_path, runtime.shipped_dir, n) if use_shipped and not cached else None
    return decode_targets(runtime, task, base_path, out, Search(1, 0.0, distill, decode), distill.max_sources, shipped)


def base_outputs(runtime: Runtime, task: Task, base_path: Path, split: str, decode: DecodeConfig) -> Pairs:
    """(source, base model's greedy output) for a small split: the targets that acceptance cares about."""
    out = runtime.cache_root / "distill" / f"{base_path.stem}_{split}_greedy.json"
    if out.exists():
        return ListPairs(json.loads(out.read_text()))
    model, _ = load_model(base_path, runtime.device)
    split_pairs = task.pairs(split)
    sources = split_pairs.sources(range(min(len(split_pairs), task.dev_outputs_sample or len(split_pairs))))
    limit = task.max_len(decode)
    res: list[tuple[list[int], list[int]]] = []
    for j in range(0, len(sources), 64):
        b = sources[j : j + 64]
        src = pad_rows(b, task.pad_id, min_width=1).to(next(model.parameters()).device)
        for s, toks in zip(b, greedy_decode(model, src, max_len=limit(src)).tokens):
            if toks:
                res.append((s, toks))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res))
    return ListPairs(res)
