"""Training targets decoded by a trained model: the paper's sequence-level distillation (a teacher's beam
outputs), self-distillation (the base model's own greedy outputs), and the base model's dev outputs that
the heads stage tracks per-head agreement against.

Decoding a WMT-sized training set takes hours, so it runs in resumable shards, split across the ranks of
a distributed run; each finished shard is written atomically, so a killed run loses at most one shard.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tqdm.auto import tqdm

from bpd.config import ExperimentConfig
from bpd.decoding import beam_decode, greedy_decode
from bpd.decoding.common import pad_rows
from bpd.runtime import cache_root, pick_device, process
from bpd.tasks import Pairs, Task
from bpd.training import distributed as dist
from bpd.training.checkpoint import load_model


def decode_targets(cfg: ExperimentConfig, task: Task, model_path: Path, out: Path, beam: int, alpha: float) -> Pairs:
    """Decode every training source with a trained model, in resumable shards; returns (src, output) pairs.

    beam=1 is greedy (self-distillation targets); beam=4, alpha=0.6 is the paper's sequence-level
    distillation. Outputs cut by the length limit still end in EOS (the heads must learn to stop); empty
    outputs are left out.
    """
    out.mkdir(parents=True, exist_ok=True)
    final = out / "targets.jsonl"
    if final.exists():
        return [tuple(json.loads(line)) for line in final.read_text().splitlines()]
    info, device = process(cfg)  # under torchrun, rank r decodes shards r, r + world, ... and reads the others'
    model, _ = load_model(model_path, device)
    train = task.pairs("train")
    srcs = [s for s, _ in train]
    shard, bs = cfg.distill.shard_size, cfg.distill.batch_size
    limit = task.max_len(cfg.decode)
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    results: dict[int, list[int]] = {}
    shards = [order[i : i + shard] for i in range(0, len(order), shard)]
    desc = f"decode train ({'greedy' if beam == 1 else f'beam{beam}'})"
    for si, idx in enumerate(tqdm(shards, desc=desc, disable=not info.is_main)):
        sp = out / f"shard{si:04d}.json"
        if sp.exists():
            results.update({int(k): v for k, v in json.loads(sp.read_text()).items()})
            continue
        if si % info.world_size != info.rank:
            continue  # another rank's shard
        part: dict[int, list[int]] = {}
        for j in range(0, len(idx), bs):
            b = idx[j : j + bs]
            src = pad_rows([srcs[i] for i in b], task.pad_id).to(device)
            n = limit(src)
            res = greedy_decode(model, src, max_len=n) if beam == 1 else beam_decode(model, src, beam, alpha, n)
            for i, toks in zip(b, res.tokens):
                if task.eos_id >= 0 and (not toks or toks[-1] != task.eos_id):
                    toks = toks + [task.eos_id]  # cut by max_len: still teach the heads to stop
                part[i] = toks
        tmp = sp.with_suffix(".tmp")
        tmp.write_text(json.dumps(part))
        os.replace(tmp, sp)
        results.update(part)
    if info.distributed:
        paths = [out / f"shard{si:04d}.json" for si in range(len(shards))]
        dist.wait_for_files(paths)
        for sp, idx in zip(paths, shards):
            if idx and idx[0] not in results:
                results.update({int(k): v for k, v in json.loads(sp.read_text()).items()})
    pairs = [(srcs[i], results[i]) for i in range(len(srcs)) if len(results[i]) > (1 if task.eos_id >= 0 else 0)]
    if info.is_main:
        tmp = final.with_suffix(".tmp")
        tmp.write_text("\n".join(json.dumps(p) for p in pairs))
        os.replace(tmp, final)
    return pairs


def distilled_pairs(cfg: ExperimentConfig, task: Task, teacher: Path) -> Pairs:
    """The paper's sequence-level distillation: the ``teacher`` checkpoint beam-decodes the training sources."""
    d = cfg.distill
    out = cache_root(cfg) / "distill" / f"{teacher.stem}_beam{d.beam}_a{d.alpha:g}"
    return decode_targets(cfg, task, teacher, out, d.beam, d.alpha)


def self_pairs(cfg: ExperimentConfig, task: Task, base_path: Path) -> Pairs:
    """Self-distillation targets: the base model's own greedy outputs on the training sources."""
    return decode_targets(cfg, task, base_path, cache_root(cfg) / "distill" / f"{base_path.stem}_greedy", 1, 0.0)


def base_outputs(cfg: ExperimentConfig, task: Task, base_path: Path, split: str) -> Pairs:
    """(source, base model's greedy output) for a small split: the targets that acceptance cares about."""
    out = cache_root(cfg) / "distill" / f"{base_path.stem}_{split}_greedy.json"
    if out.exists():
        return [tuple(p) for p in json.loads(out.read_text())]
    model, _ = load_model(base_path, pick_device(cfg.device))
    pairs = task.pairs(split)[: task.dev_outputs_sample]
    limit = task.max_len(cfg.decode)
    res: Pairs = []
    for j in range(0, len(pairs), 64):
        b = pairs[j : j + 64]
        src = pad_rows([s for s, _ in b], task.pad_id).to(next(model.parameters()).device)
        for (s, _), toks in zip(b, greedy_decode(model, src, max_len=limit(src)).tokens):
            if toks:
                res.append((s, toks))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res))
    return res
