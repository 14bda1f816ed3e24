"""The experiment stages (data, base model, distillation, proposal heads, evaluation) as plain functions.

Every stage takes the resolved experiment config as a plain ``dict`` (Hydra lives only in
``experiments/``), caches its product under ``outputs/cache/`` keyed by a hash of exactly the config
that determines it, and skips work whose product exists. That is what makes sweeps idempotent and
resumable: a killed sweep re-run retrains nothing that finished, and training stages resume from
their last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from bpd.data.translation import SPLITS
from bpd.evaluation import DecodeSpec, decode_and_time, format_table, make_rows
from bpd.tracking import REPO_ROOT, Tracker, append_rows, command_line, device_name, git_sha, read_rows
from bpd.training import distributed as dist
from bpd.training.checkpoint import CheckpointError, load_checkpoint, load_model
from bpd.training.loop import TrainConfig, train

Pairs = list[tuple[list[int], list[int]]]


# ---------------------------------------------------------------------------------------------------------------
# Config helpers
# ---------------------------------------------------------------------------------------------------------------


def config_hash(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def resolve_path(p: str | Path) -> Path:
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p


def pick_device(name: str | None) -> torch.device:
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={name} was requested but CUDA is not available; use device=cpu.")
    return torch.device(name)


def cache_root(cfg: dict) -> Path:
    return resolve_path(cfg.get("paths", {}).get("cache_dir", "outputs/cache"))


def train_config(section: dict, stage: str, seed: int, heads: dict | None = None) -> TrainConfig:
    keys = TrainConfig.__dataclass_fields__
    kw = {k: v for k, v in section.items() if k in keys}
    if "betas" in kw:
        kw["betas"] = tuple(kw["betas"])
    kw["stage"], kw["seed"] = stage, seed
    if heads is not None:
        kw["heads_training"] = heads["training"]
        kw["heads_loss"] = heads.get("loss", "mean")
        kw["p1_weight"] = float(heads.get("p1_weight", 1.0))
    return TrainConfig(**kw)


def heads_train_config(cfg: dict) -> TrainConfig:
    """The heads stage's training config: ``train`` with the non-null ``heads_train`` values over it."""
    overrides = {k: v for k, v in (cfg.get("heads_train") or {}).items() if v is not None}
    return train_config({**cfg["train"], **overrides}, "heads", int(cfg.get("seed", 0)), cfg["heads"])


def check_train_options(cfg: dict) -> None:
    """Build both stages' training configs once, so that a bad value fails before anything is trained
    (a bad heads_train value would otherwise surface only after the base model's training)."""
    train_config(cfg["train"], "base", int(cfg.get("seed", 0)))
    if cfg.get("heads"):
        heads_train_config(cfg)


# ---------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class TaskData:
    kind: str  # translation | image
    name: str
    key: str  # hash of the data config: part of every downstream cache key
    vocab_size: int
    train: Pairs
    dev: Pairs
    test: Pairs
    tokenizer: Any = None
    dev_refs: list[str] = field(default_factory=list)
    test_refs: list[str] = field(default_factory=list)
    images: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    bos_id: int = 1
    pad_id: int = 0
    eos_id: int = 2

    def refs(self, split: str) -> list[str]:
        return self.dev_refs if split == "dev" else self.test_refs

    def pairs(self, split: str) -> Pairs:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; use train, dev or test.")
        return {"train": self.train, "dev": self.dev, "test": self.test}[split]


def load_task(cfg: dict) -> TaskData:
    t = cfg["task"]
    if t["kind"] == "translation":
        return _load_translation(t, cache_root(cfg) / "data")
    if t["kind"] == "image":
        return _load_images(t, cache_root(cfg) / "data")
    raise ValueError(f"unknown task kind {t['kind']!r}; use translation or image.")


def _load_translation(t: dict, data_cache: Path) -> TaskData:
    from bpd.data.tokenizer import Tokenizer
    from bpd.data.translation import encode_corpus, prepare_ding, prepare_wmt14

    if t["name"].startswith("ding"):
        folder = prepare_ding(
            data_cache,
            ding_path=t.get("ding_path"),
            direction=t.get("direction", "en-de"),
            include_phrases=t.get("include_phrases", False),
            n_dev=t.get("n_dev", 500),
            n_test=t.get("n_test", 1000),
        )
    elif t["name"].startswith("wmt14"):
        if not t.get("data_dir"):
            raise FileNotFoundError(
                "task wmt14_en_de needs task.data_dir=/path/to/wmt14 (train.{en,de}, newstest2013.{en,de}, "
                "newstest2014.{en,de}); see the README section 'WMT14 and CelebA'."
            )
        folder = prepare_wmt14(Path(t["data_dir"]), direction=t.get("direction", "en-de"), cache_dir=data_cache)
    elif t["name"] == "folder":
        folder = Path(t.get("data_dir") or "")
        missing = [
            f"{s}.{x}" for s in ("train", "dev", "test") for x in ("src", "tgt") if not (folder / f"{s}.{x}").exists()
        ]
        if not t.get("data_dir") or missing:
            raise FileNotFoundError(
                f"task folder needs task.data_dir with train/dev/test .src/.tgt files (missing in {folder}: "
                f"{', '.join(missing) or 'data_dir'}); point task.data_dir at such a folder."
            )
    else:
        raise ValueError(f"unknown translation task {t['name']!r}; use ding_en_de, wmt14_en_de or folder.")
    vocab = int(t.get("vocab_size", 4000))
    tok = Tokenizer.train([folder / "train.src", folder / "train.tgt"], folder / f"spm{vocab}", vocab, seed=0)
    max_len = int(t.get("max_len", 64))
    train_pairs = encode_corpus(tok, folder, "train", max_len, truncate=True)
    dev = encode_corpus(tok, folder, "dev", 4 * max_len)
    test = encode_corpus(tok, folder, "test", 4 * max_len)
    # References are the raw target lines whose pairs survived encoding (same filter as encode_corpus).
    dev_refs = _refs(tok, folder, "dev", 4 * max_len)
    test_refs = _refs(tok, folder, "test", 4 * max_len)
    key = config_hash(
        {
            k: t.get(k)
            for k in ("name", "direction", "include_phrases", "vocab_size", "max_len", "n_dev", "n_test", "data_dir")
        }
    )
    return TaskData(
        "translation",
        t["name"],
        key,
        tok.vocab_size,
        train_pairs,
        dev,
        test,
        tok,
        dev_refs,
        test_refs,
        bos_id=tok.bos_id,
        pad_id=tok.pad_id,
        eos_id=tok.eos_id,
    )


def _refs(tok, folder: Path, split: str, max_len: int) -> list[str]:
    src = (folder / f"{split}.src").read_text(encoding="utf-8").splitlines()
    tgt = (folder / f"{split}.tgt").read_text(encoding="utf-8").splitlines()
    out = []
    for t, si, ti in zip(tgt, tok.encode_batch(src), tok.encode_batch(tgt)):
        if si and ti and len(si) <= max_len and len(ti) + 1 <= max_len:
            out.append(t)
    return out


def _load_images(t: dict, data_cache: Path) -> TaskData:
    from bpd.data import images as im

    lr_size, hr = int(t.get("lr_size", 4)), int(t.get("hr_size", 16))
    if t["name"].startswith("celeba"):
        if not t.get("data_dir"):
            raise FileNotFoundError(
                "task celeba_sr needs task.data_dir=/path/to/celeba holding img_align_celeba/*.jpg and "
                "list_eval_partition.txt."
            )
        limits = {"train": t.get("n_train"), "dev": t.get("n_dev"), "test": t.get("n_test")}
        sets = {s: im.load_celeba_sr(t["data_dir"], s, lr_size, hr, limit=limits[s]) for s in ("train", "dev", "test")}
    else:
        path = im.prepare_embedded_sr(
            data_cache,
            lr_size=lr_size,
            factor=hr // lr_size,
            n_train=int(t.get("n_train", 16384)),
            n_dev=int(t.get("n_dev", 128)),
            n_test=int(t.get("n_test", 256)),
            seed=int(t.get("seed", 0)),
        )
        sets = im.load_sr_npz(path)

    def pairs(lr: np.ndarray, hrs: np.ndarray) -> Pairs:
        return [(list(map(int, a)), list(map(int, b))) for a, b in zip(im.image_to_tokens(lr), im.image_to_tokens(hrs))]

    key = config_hash(
        {k: t.get(k) for k in ("name", "lr_size", "hr_size", "n_train", "n_dev", "n_test", "seed", "data_dir")}
    )
    return TaskData(
        "image",
        t["name"],
        key,
        im.VOCAB_SIZE,
        pairs(*sets["train"]),
        pairs(*sets["dev"]),
        pairs(*sets["test"]),
        images=sets,
        bos_id=im.BOS_ID,
        pad_id=im.PAD_ID,
        eos_id=im.EOS_ID,
    )


def batch_factory(data: TaskData, pairs: Pairs, max_tokens: int, seed: int, rank: int = 0, world_size: int = 1):
    from bpd.data.translation import token_batches

    def batches(epoch: int):
        return token_batches(
            pairs,
            max_tokens,
            shuffle=True,
            seed=seed + epoch,
            pad_id=data.pad_id,
            rank=rank,
            world_size=world_size,
            bos_id=data.bos_id,
        )

    return batches


def dev_batches(data: TaskData, pairs: Pairs, max_tokens: int):
    from bpd.data.translation import token_batches

    return lambda: token_batches(pairs, max_tokens, shuffle=False, pad_id=data.pad_id, bos_id=data.bos_id)


# ---------------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------------


def build_model(cfg: dict, data: TaskData, k: int, seed: int):
    m, h = cfg["model"], cfg.get("heads", {})
    overrides = dict(m.get("overrides") or {})
    head_kw = dict(heads_arch=h.get("arch", "paper"), identity_p1=bool(h.get("identity_p1", True)))
    if h.get("d_ff"):
        head_kw["heads_d_ff"] = int(h["d_ff"])
    if data.kind == "image":
        from bpd.models.image_transformer import build_image_model

        t = cfg["task"]
        return build_image_model(
            k, m["preset"], int(t.get("lr_size", 4)), int(t.get("hr_size", 16)), seed=seed, **overrides, **head_kw
        )
    from bpd.models import build_translation_model

    overrides.setdefault("max_positions", 4 * int(cfg["task"].get("max_len", 64)) + 64)
    return build_translation_model(
        data.vocab_size,
        k,
        m["preset"],
        seed=seed,
        pad_id=data.pad_id,
        bos_id=data.bos_id,
        eos_id=data.eos_id,
        **overrides,
        **head_kw,
    )


def finished(path: Path) -> bool:
    """True if a finished checkpoint exists; a corrupt one is set aside (renamed) and retrained."""
    if not path.exists():
        return False
    try:
        load_checkpoint(path)
        return True
    except CheckpointError as e:
        bad = path.with_name(path.name + ".corrupt")
        os.replace(path, bad)
        print(f"warning: {e} Moved it to {bad.name}; retraining.")
        return False


def _dist(cfg: dict) -> dist.DistInfo:
    """This process's place in a torchrun / multi-task SLURM run (joins the process group); one process: rank 0."""
    dc = cfg.get("dist") or {}
    return dist.init_distributed(dc.get("backend"), cfg.get("device"), dc.get("timeout_min"))


def _train_stage(cfg, data, model, pairs, tcfg: TrainConfig, path: Path, name: str, dev_sets, tracker_cfg) -> Path:
    info = _dist(cfg)
    device = info.device if info.distributed else pick_device(cfg.get("device"))
    # Fixed global batch across world sizes: each rank accumulates reference_world_size * grad_accum / world.
    ref = (cfg.get("dist") or {}).get("reference_world_size")
    tcfg.grad_accum = dist.grad_accum_for(tcfg.grad_accum, info.world_size, ref)
    tracker = make_tracker(cfg, name=name, job_type=tcfg.stage, extra=tracker_cfg) if info.is_main else Tracker(False)
    batches = batch_factory(data, pairs, int(cfg["train"]["max_tokens"]), tcfg.seed, info.rank, info.world_size)
    ddp = None
    if info.distributed:
        from bpd.training.loop import configure_params

        configure_params(model.to(device), tcfg)  # DDP hooks only what requires grad when it is built
        ddp = dist.wrap_ddp(model, info, find_unused_parameters=tcfg.heads_loss == "sampled")
    t0 = time.time()
    summary = train(
        model,
        batches,
        tcfg,
        path,
        resume=True,
        dev_sets=dev_sets,
        log=tracker.log,
        device=device,
        meta={"name": name, "data": data.key, "config": tracker_cfg, "command": command_line(), "git_sha": git_sha()},
        ddp_model=ddp,
        is_main=info.is_main,
    )
    tracker.summary({"train_minutes": (time.time() - t0) / 60, **{k: v for k, v in summary.items() if k != "history"}})
    tracker.finish()
    if info.is_main:
        steps = summary["step"]
        print(f"{name}: {steps} steps, {summary['elapsed_min']:.1f} min, last loss {summary['last_loss']:.3f}")
    dist.barrier()  # rank 0 wrote the checkpoint: every rank sees it before the next stage reads it
    return path


def base_path_for(cfg: dict, data: TaskData, targets: str = "gold", seed: int | None = None) -> Path:
    """Where the base model of this config is cached (whether or not it has been trained yet)."""
    seed = int(cfg.get("seed", 0)) if seed is None else seed
    key = config_hash(data.key, cfg["model"], cfg["train"], targets, seed, "base")
    return cache_root(cfg) / "models" / f"base_{targets}_s{seed}_{key}.pt"


def ensure_base(cfg: dict, data: TaskData, targets: str = "gold", seed: int | None = None) -> Path:
    """Train (or reuse) the base model p_1 on gold or distilled targets."""
    seed = int(cfg.get("seed", 0)) if seed is None else seed
    path = base_path_for(cfg, data, targets, seed)
    if finished(path):
        return path
    pairs = data.train if targets == "gold" else distilled_pairs(cfg, data)
    model = build_model(cfg, data, 1, seed)
    tcfg = train_config(cfg["train"], "base", seed)
    dev = {"dev": dev_batches(data, data.dev, int(cfg["train"]["max_tokens"]))}
    return _train_stage(
        cfg,
        data,
        model,
        pairs,
        tcfg,
        path,
        f"base-{targets}-s{seed}",
        dev,
        {"model": cfg["model"], "train": cfg["train"], "targets": targets},
    )


def translation_max_len(decode: dict):
    """Output length limit a * source_length + b (fairseq's max_len_a / max_len_b): degenerate
    repetitions of a weak model stop early instead of costing tens of wasted steps per sentence."""
    a, b = float(decode.get("max_len_a", 1.0)), int(decode.get("max_len_extra", 50))

    def max_len(src: torch.Tensor) -> int:
        return int(a * src.shape[1]) + b

    return max_len


def check_vocab(model, data: TaskData, path: Path) -> None:
    """A checkpoint trained with another tokenizer would decode garbage: refuse it with the fix."""
    v = model.cfg.vocab_size
    if v != data.vocab_size:
        raise CheckpointError(
            f"checkpoint {path} was trained with a vocabulary of {v} but task {data.name} has {data.vocab_size}; "
            "use the same task.vocab_size (and data) or retrain the checkpoint."
        )


def decode_targets(cfg: dict, data: TaskData, model_path: Path, out: Path, beam: int, alpha: float) -> Pairs:
    """Decode every training source with a trained model, in resumable shards; returns (src, output) pairs.

    beam=1 is greedy (self-distillation targets); beam=4, alpha=0.6 is the paper's sequence-level
    distillation. Each finished shard is written atomically, so a killed run loses at most one shard.
    """
    from bpd.decoding import beam_decode, greedy_decode
    from bpd.evaluation import pad_rows

    out.mkdir(parents=True, exist_ok=True)
    final = out / "targets.jsonl"
    if final.exists():
        return [tuple(json.loads(line)) for line in final.read_text().splitlines()]
    info = _dist(cfg)  # under torchrun, rank r decodes shards r, r + world, ... and reads the others' files
    device = info.device if info.distributed else pick_device(cfg.get("device"))
    model, _ = load_model(model_path, device)
    srcs = [s for s, _ in data.train]
    shard, bs = int(cfg.get("distill", {}).get("shard_size", 2048)), int(cfg.get("distill", {}).get("batch_size", 64))
    tmax = translation_max_len(cfg["decode"])
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
            src = pad_rows([srcs[i] for i in b], data.pad_id).to(device)
            n = tmax(src) if data.kind == "translation" else len(data.train[0][1])
            res = greedy_decode(model, src, max_len=n) if beam == 1 else beam_decode(model, src, beam, alpha, n)
            for i, toks in zip(b, res.tokens):
                if data.eos_id >= 0 and (not toks or toks[-1] != data.eos_id):
                    toks = toks + [data.eos_id]  # cut by max_len: still teach the heads to stop
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
    pairs = [(srcs[i], results[i]) for i in range(len(srcs)) if len(results[i]) > (1 if data.eos_id >= 0 else 0)]
    if info.is_main:
        tmp = final.with_suffix(".tmp")
        tmp.write_text("\n".join(json.dumps(p) for p in pairs))
        os.replace(tmp, final)
    return pairs


def distilled_pairs(cfg: dict, data: TaskData) -> Pairs:
    """The paper's sequence-level distillation: a teacher (same config, another seed) beam-decodes train."""
    d = cfg.get("distill", {})
    seed = int(d.get("teacher_seed", int(cfg.get("seed", 0)) + 1))
    teacher = ensure_base(cfg, data, "gold", seed=seed)
    beam, alpha = int(d.get("beam", 4)), float(d.get("alpha", 0.6))
    out = cache_root(cfg) / "distill" / f"{teacher.stem}_beam{beam}_a{alpha:g}"
    return decode_targets(cfg, data, teacher, out, beam, alpha)


def self_pairs(cfg: dict, data: TaskData, base_path: Path) -> Pairs:
    """Self-distillation targets: the base model's own greedy outputs on the training sources."""
    return decode_targets(cfg, data, base_path, cache_root(cfg) / "distill" / f"{base_path.stem}_greedy", 1, 0.0)


def heads_path_for(cfg: dict, data: TaskData) -> Path:
    """Where the heads model of this config is cached (the base model's path when k = 1 needs no heads),
    whether or not it has been trained yet; also validates ``heads.k`` and ``heads.targets``."""
    h = cfg["heads"]
    k = int(h["k"])
    if k < 1:
        raise ValueError(f"heads.k must be >= 1 (got {k}).")
    targets = h.get("targets", "gold")
    if targets not in ("gold", "distilled", "self"):
        raise ValueError(f"unknown heads.targets {targets!r}; use gold, distilled or self.")
    base_path = base_path_for(cfg, data, cfg.get("base_targets", "gold"))
    if k == 1 and h.get("identity_p1", True):
        return base_path  # nothing to train: k=1 with p_1 = base is the base model itself
    seed = int(cfg.get("seed", 0))
    # Options added later are left out of the key at their default, so existing caches stay valid.
    hs = {kk: v for kk, v in h.items() if kk not in ("decode_ks",) and not (kk == "p1_weight" and v == 1.0)}
    key = config_hash(base_path.stem, hs, cfg.get("heads_train", {}), seed)
    return cache_root(cfg) / "models" / f"heads_k{k}_{h['training']}_{targets}_{key}.pt"


def ensure_heads(cfg: dict, data: TaskData) -> Path:
    """Train (or reuse) k proposal heads on top of the base model (frozen or fine-tuned)."""
    h = cfg["heads"]
    path = heads_path_for(cfg, data)
    # A finished heads model is all decoding needs: neither its base nor its training targets are rebuilt.
    if finished(path):
        return path
    base_path = ensure_base(cfg, data, cfg.get("base_targets", "gold"))
    if path == base_path:
        return base_path
    k, targets = int(h["k"]), h.get("targets", "gold")
    if targets == "gold":
        pairs = data.train
    elif targets == "distilled":
        pairs = distilled_pairs(cfg, data)
    else:
        pairs = self_pairs(cfg, data, base_path)
    seed = int(cfg.get("seed", 0))
    base, _ = load_model(base_path)
    check_vocab(base, data, base_path)
    model = build_model(cfg, data, k, seed)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    if unexpected or any(not m.startswith("heads.") for m in missing):
        raise CheckpointError(f"base checkpoint {base_path} does not match the model config; delete it and retrain.")
    tcfg = heads_train_config(cfg)
    mt = int(cfg["train"]["max_tokens"])
    dev = {"dev": dev_batches(data, data.dev, mt)}
    if targets == "self" or h.get("eval_vs_self", True):
        _dist(cfg)  # under torchrun: rank 0 decodes the dev set, the others then read its file
        dev["dev_vs_base"] = dev_batches(data, dist.main_first(lambda: _base_outputs(cfg, data, base_path, "dev")), mt)
    return _train_stage(
        cfg,
        data,
        model,
        pairs,
        tcfg,
        path,
        f"heads-k{k}-{h['training']}-{targets}",
        dev,
        {"heads": h, "heads_train": cfg.get("heads_train", {}), "base": base_path.name},
    )


def _base_outputs(cfg: dict, data: TaskData, base_path: Path, split: str) -> Pairs:
    """(source, base model's greedy output) for a small split: the targets that acceptance cares about."""
    from bpd.decoding import greedy_decode
    from bpd.evaluation import pad_rows

    out = cache_root(cfg) / "distill" / f"{base_path.stem}_{split}_greedy.json"
    if out.exists():
        return [tuple(p) for p in json.loads(out.read_text())]
    model, _ = load_model(base_path, pick_device(cfg.get("device")))
    # Images decode 768+ tokens each: a small sample is enough to track per-head agreement.
    pairs = data.pairs(split)[: (None if data.kind == "translation" else 16)]
    res: Pairs = []
    for j in range(0, len(pairs), 64):
        b = pairs[j : j + 64]
        src = pad_rows([s for s, _ in b], data.pad_id).to(next(model.parameters()).device)
        n = int(cfg["task"].get("max_len", 64)) if data.kind == "translation" else len(b[0][1])
        for (s, _), toks in zip(b, greedy_decode(model, src, max_len=n).tokens):
            if toks:
                res.append((s, toks))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res))
    return res


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------


def decode_specs(cfg: dict, model_k: int) -> list[DecodeSpec]:
    d = cfg["decode"]
    specs = [DecodeSpec("greedy")]
    if d.get("naive_greedy", False):
        specs.append(DecodeSpec("naive_greedy"))
    if d.get("beam_size"):
        specs.append(DecodeSpec("beam", beam_size=int(d["beam_size"]), alpha=float(d.get("alpha", 0.6))))
    ks = [int(k) for k in d.get("ks", [model_k])]
    bad = [k for k in ks if k < 1 or k > model_k]
    if bad:
        raise ValueError(
            f"decode.ks {bad} not in 1..{model_k} (the trained heads.k); lower decode.ks or raise heads.k."
        )
    check_proposal_vocab(cfg.get("task", {}).get("kind"), d.get("proposal_vocab"))
    if d.get("split", "test") not in SPLITS:
        raise ValueError(f"unknown decode.split {d.get('split')!r}; use test, dev or train.")
    if int(d.get("batch_size", 1)) < 1:
        raise ValueError(f"decode.batch_size must be >= 1 (got {d.get('batch_size')}).")
    if d.get("n_examples") is not None and int(d["n_examples"]) < 1:
        raise ValueError(f"decode.n_examples must be >= 1, or null for the whole split (got {d['n_examples']}).")
    for crit in d.get("criteria", [{"name": "exact"}]):
        name, param = crit["name"], crit.get("param")
        for l in crit.get("min_block_sizes", [1]):
            for k in ks:
                if k == 1 and (name != "exact" or l != 1):
                    continue
                specs.append(DecodeSpec("blockwise", k=k, criterion=name, criterion_param=param, min_block_size=int(l)))
    return specs


class TranslationScorer:
    def __init__(self, tok, refs: list[str]) -> None:
        self.tok, self.refs = tok, refs

    def detok(self, tokens: list[list[int]]) -> list[str]:
        return [self.tok.decode(t) for t in tokens]

    def score(self, tokens, greedy_tokens) -> dict[str, Any]:
        from bpd.metrics import bleu

        b, sig = bleu(self.detok(tokens), self.refs)
        return {"bleu": b, "bleu_signature": sig}

    def write(self, tokens, stem: Path) -> dict[str, str]:
        stem.parent.mkdir(parents=True, exist_ok=True)
        hyp, ref = stem.with_suffix(".hyp.txt"), stem.parent / "ref.txt"
        hyp.write_text("\n".join(self.detok(tokens)) + "\n", encoding="utf-8")
        if not ref.exists():
            ref.write_text("\n".join(self.refs) + "\n", encoding="utf-8")
        return {"hyp_file": str(hyp), "ref_file": str(ref)}


class ImageScorer:
    def __init__(self, lr: np.ndarray, hr: np.ndarray) -> None:
        self.lr, self.hr = lr, hr
        self.h, self.w = hr.shape[1], hr.shape[2]
        self._greedy: np.ndarray | None = None

    def images(self, tokens) -> np.ndarray:
        from bpd.data.images import tokens_to_image

        return np.stack([tokens_to_image(np.asarray(t, dtype=np.int64), self.h, self.w) for t in tokens])

    def score(self, tokens, greedy_tokens) -> dict[str, Any]:
        from bpd.data.images import mean_psnr

        pred, greedy = self.images(tokens), self.images(greedy_tokens)
        return {
            "psnr": mean_psnr(pred, self.hr),
            "psnr_vs_greedy": mean_psnr(pred, greedy),
            "pixel_agreement_with_greedy": float((pred == greedy).mean()),
        }

    def write(self, tokens, stem: Path) -> dict[str, str]:
        stem.parent.mkdir(parents=True, exist_ok=True)
        pred, target = stem.with_suffix(".pred.npy"), stem.parent / "target.npy"
        np.save(pred, self.images(tokens))
        if not target.exists():
            np.save(target, self.hr)
            np.save(stem.parent / "input.npy", self.lr)
        return {"pred_file": str(pred), "target_file": str(target)}


def run_id(cfg: dict, model_path: Path) -> str:
    # Options added later are left out at their default, so finished runs keep their ids. skip_existing
    # says whether to redo a run, not what the run is: a redo keeps the id (and output folder) it redoes.
    d = {k: v for k, v in cfg["decode"].items() if not (k == "proposal_vocab" and v is None)}
    if "skip_existing" in d:
        d["skip_existing"] = True
    return config_hash(model_path.name, d, cfg["task"].get("name"), cfg.get("device"))


def check_proposal_vocab(kind: str | None, n: Any) -> int | None:
    """``decode.proposal_vocab`` validated: null, or a positive number of tokens for a translation task."""
    if n is None:
        return None
    if kind != "translation" or int(n) < 1:
        raise ValueError(f"decode.proposal_vocab={n}: use a positive number of tokens for a translation task, or null.")
    return int(n)


def frequent_targets(data: TaskData, n: int) -> torch.Tensor:
    """The ``n`` most frequent target tokens of the training data (EOS always included): the proposal
    vocabulary of ``decode.proposal_vocab`` (ties broken by token id, so the list is deterministic)."""
    n = check_proposal_vocab(data.kind, n)
    counts = np.zeros(data.vocab_size, dtype=np.int64)
    for _, tgt in data.train:
        np.add.at(counts, np.asarray(tgt, dtype=np.int64), 1)
    counts[data.eos_id] = np.iinfo(np.int64).max  # a row must always be able to end inside a block
    order = np.lexsort((np.arange(len(counts)), -counts))[: min(n, len(counts))]
    return torch.from_numpy(np.sort(order))


def apply_proposal_vocab(model, cfg: dict, data: TaskData) -> int | None:
    """Set ``decode.proposal_vocab`` (null = the whole vocabulary) on the model's heads; returns it."""
    n = cfg["decode"].get("proposal_vocab")
    model.heads.set_proposal_vocab(None if n is None else frequent_targets(data, int(n)))
    return None if n is None else int(n)


def same_weights(row: dict, payload: dict) -> bool:
    """Whether a result row was produced by the checkpoint in ``payload`` (same training steps and time:
    a retrained model never matches both)."""
    return row.get("train_steps") == payload.get("step") and row.get("train_minutes") == round(
        payload.get("elapsed", 0.0) / 60, 2
    )


def evaluate(cfg: dict, data: TaskData, model_path: Path, setting: dict[str, Any] | None = None) -> list[dict]:
    """Decode the configured split with greedy, beam and every blockwise config; write and return rows."""
    d = cfg["decode"]
    split = d.get("split", "test")
    results_dir = resolve_path(cfg.get("paths", {}).get("results_dir", f"results/{cfg.get('name', 'adhoc')}"))
    rows_path = results_dir / "rows.jsonl"
    rid = run_id(cfg, model_path)
    info = _dist(cfg)
    device = info.device if info.distributed else pick_device(cfg.get("device"))
    model, payload = load_model(model_path, device)
    if d.get("skip_existing", True):
        # The same run id *and* the same trained weights: a model file retrained under the same config
        # (e.g. a fresh clone, whose results/ already holds our committed rows) is evaluated anew.
        done = [r for r in read_rows(rows_path) if r.get("run_id") == rid and same_weights(r, payload)]
        if done:
            print(f"results for run {rid} already in {rows_path}; skipping (decode.skip_existing=false to redo)")
            return done
    check_vocab(model, data, model_path)
    if d.get("dtype", "float32") == "bfloat16":
        model = model.to(torch.bfloat16)
    proposal_vocab = apply_proposal_vocab(model, cfg, data)
    threads = d.get("threads")
    if threads:
        torch.set_num_threads(int(threads))
    pairs = data.pairs(split)
    n = d.get("n_examples")
    n = len(pairs) if n in (None, "all") else min(int(n), len(pairs))
    pairs = pairs[:n]
    specs = decode_specs(cfg, model.k)
    sources = [s for s, _ in pairs]
    if data.kind == "translation":
        max_len = translation_max_len(d)

        scorer: Any = TranslationScorer(data.tokenizer, data.refs(split)[:n])
        crit_kw: dict[str, Any] = {}
    else:
        seq = len(pairs[0][1])

        def max_len(src: torch.Tensor) -> int:
            return seq

        lr, hr = data.images[split]
        scorer = ImageScorer(lr[:n], hr[:n])
        crit_kw = {"offset": 0, "n_values": 256}
    bs = int(d.get("batch_size", 1))
    mine = list(range(len(sources)))
    if info.distributed:  # whole batches of decode_and_time's order: the same batches (and outputs) as one process
        order = sorted(mine, key=lambda i: len(sources[i])) if bs > 1 else mine
        mine = dist.shard_batches(order, bs, info.rank, info.world_size)
    outs = decode_and_time(
        model,
        [sources[i] for i in mine],
        specs,
        max_len,
        batch_size=bs,
        device=device,
        criterion_kwargs=crit_kw,
        progress=info.is_main,
        desc=f"decode {split} b{bs}",
    )
    if info.distributed:
        outs = merge_shards(dist.all_gather_object((mine, outs)), len(sources))
        if not info.is_main:
            return []  # rank 0 writes the rows and files
    mc = payload["model_config"]
    common = {
        "run_id": rid,
        "experiment": cfg.get("name", "adhoc"),
        "task": data.kind,
        "dataset": data.name,
        "split": split,
        "model": Path(model_path).name,
        "model_preset": cfg["model"]["preset"],
        "trained_k": mc["k"],
        "heads_arch": mc.get("heads_arch"),
        "identity_p1": mc.get("identity_p1"),
        "heads_training": (setting or {}).get("heads_training", cfg.get("heads", {}).get("training")),
        "heads_targets": (setting or {}).get("heads_targets", cfg.get("heads", {}).get("targets")),
        "distilled": (setting or {}).get("distilled", cfg.get("base_targets", "gold") == "distilled"),
        "setting": (setting or {}).get("setting", cfg.get("setting")),
        "batch_size": bs,
        "proposal_vocab": proposal_vocab,
        "dtype": d.get("dtype", "float32"),
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "seed": int(cfg.get("seed", 0)),
        "git_sha": git_sha(),
        "command": cfg.get("_command") or command_line(),
        "train_steps": payload.get("step"),
        "train_minutes": round(payload.get("elapsed", 0.0) / 60, 2),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    out_dir = results_dir / "outputs" / rid
    rows = make_rows(outs, specs, scorer, common, out_dir, REPO_ROOT)
    if data.kind == "image":
        rows += image_reference_rows(scorer, common, rid)
        grid = image_grid(scorer, outs, specs, out_dir / "grid.png")
        for r in rows:
            r["grid_file"] = str(grid.relative_to(REPO_ROOT)) if grid.is_relative_to(REPO_ROOT) else str(grid)
    append_rows(rows_path, rows)
    quality = "bleu" if data.kind == "translation" else "psnr"
    print(format_table(rows, quality))
    tracker = make_tracker(cfg, name=f"eval-{rid}", job_type="evaluate", extra={"run_id": rid, **common})
    for r in rows:
        tracker.log(
            {
                f"{r['decoder']}/{k}": r[k]
                for k in (quality, "mean_block_size", "speedup", "identical_to_greedy", "wallclock_s")
                if r.get(k) is not None
            }
        )
    tracker.table(
        "results", list(rows[0].keys())[:40], [[str(r.get(c)) for c in list(rows[0].keys())[:40]] for r in rows]
    )
    if data.kind == "translation":
        _log_samples(tracker, outs, specs, data, pairs)
    else:
        tracker.image("grid", out_dir / "grid.png", caption="LR | greedy | blockwise exact | blockwise eps | truth")
        per_image = {
            s.name: [len(t) / max(1, i) for t, i in zip(outs[s.name].tokens, outs[s.name].iterations)]
            for s in specs
            if s.method == "blockwise"
        }
        for name, vals in per_image.items():
            tracker.histogram(f"{name}/block_size_per_image", vals)
    tracker.finish()
    return rows


def merge_shards(parts: list[tuple[list[int], dict[str, Any]]], n: int) -> dict[str, Any]:
    """One process's ``decode_and_time`` outputs from the ranks' ``(example indices, outputs)`` shards.

    Per-example lists go back to example order; counts (invocations, per-position acceptance) add up, and so
    do wall-clock seconds: the total decode time, which is what the speedup ratios compare.
    """
    from dataclasses import fields, replace

    merged: dict[str, Any] = {}
    for name, first in parts[0][1].items():
        values: dict[str, Any] = {}
        for f in fields(first):
            got = [(idx, getattr(o[name], f.name)) for idx, o in parts]
            v0 = got[0][1]
            if isinstance(v0, list) and not f.name.startswith("position_") and all(len(v) == len(i) for i, v in got):
                full: list[Any] = [None] * n
                for idx, v in got:
                    for i, x in zip(idx, v):
                        full[i] = x
                values[f.name] = full
            elif isinstance(v0, list):
                width = max(len(v) for _, v in got)
                values[f.name] = [sum(v[p] for _, v in got if p < len(v)) for p in range(width)]
            elif isinstance(v0, (int, float)):
                values[f.name] = sum(v for _, v in got)
        merged[name] = replace(first, **values)
    return merged


def image_reference_rows(scorer: ImageScorer, common: dict, rid: str) -> list[dict]:
    """Nearest-neighbour and bicubic upsampling PSNR on the same test images, for context."""
    from bpd.data.images import bicubic_upsample, mean_psnr, nearest_upsample

    factor = scorer.h // scorer.lr.shape[1]
    rows = []
    for name, fn in (("nearest", nearest_upsample), ("bicubic", bicubic_upsample)):
        pred = fn(scorer.lr, factor)
        rows.append(
            {
                **common,
                "run_id": rid,
                "decoder": name,
                "method": "reference",
                "k": None,
                "n_examples": len(pred),
                "psnr": mean_psnr(pred, scorer.hr),
            }
        )
    return rows


def image_grid(scorer: ImageScorer, outs, specs: list[DecodeSpec], path: Path) -> Path:
    """LR input | greedy | best exact blockwise | best approximate blockwise | ground truth."""
    from bpd.data.images import save_grid

    cols: list[tuple[str, np.ndarray]] = [
        ("low-res input", scorer.lr),
        ("greedy", scorer.images(outs["greedy"].tokens)),
    ]
    bw = [s for s in specs if s.method == "blockwise"]
    for crit in ("exact", "distance"):
        cands = [s for s in bw if s.criterion == crit and s.min_block_size == 1]
        if cands:
            best = max(cands, key=lambda s: s.k)
            label = f"blockwise k={best.k} " + ("exact" if crit == "exact" else f"eps={best.criterion_param:g}")
            cols.append((label, scorer.images(outs[best.name].tokens)))
    cols.append(("ground truth", scorer.hr))
    return save_grid(cols, path, max_images=8)


def _log_samples(tracker: Tracker, outs, specs, data: TaskData, pairs: Pairs, n: int = 20) -> None:
    """A table of sample translations with accepted blocks marked like the paper's figure: a|b c|d."""
    if tracker.run is None:
        return
    best = max(
        (s for s in specs if s.method == "blockwise"),
        key=lambda s: (
            sum(outs[s.name].iterations) and sum(len(t) for t in outs[s.name].tokens) / sum(outs[s.name].iterations)
        ),
        default=None,
    )
    if best is None:
        return
    o, tok = outs[best.name], data.tokenizer
    rows = []
    for i in range(min(n, len(pairs))):
        pieces, pos, marked = [tok.id_to_piece(t) for t in o.tokens[i]], 0, []
        for b in o.block_sizes[i]:
            marked.append("".join(pieces[pos : pos + b]).replace("\u2581", " ").strip())
            pos += b
        rows.append([tok.decode(pairs[i][0]), tok.decode(o.tokens[i]), " | ".join(marked), len(o.block_sizes[i])])
    tracker.table(f"samples/{best.name}", ["source", "output", "accepted blocks", "iterations"], rows)


def make_tracker(cfg: dict, name: str, job_type: str, extra: dict | None = None) -> Tracker:
    lg = cfg.get("logger", {}) or {}
    return Tracker(
        enabled=bool(lg.get("enabled", False)),
        project=lg.get("project", "bpd"),
        name=name,
        group=lg.get("group") or cfg.get("name"),
        config={"experiment": cfg.get("name"), **(extra or {})},
        mode=lg.get("mode", "offline"),
        dir=resolve_path(lg.get("dir", "outputs")),
        job_type=job_type,
    )


__all__ = [
    "TaskData",
    "build_model",
    "check_train_options",
    "decode_specs",
    "distilled_pairs",
    "base_path_for",
    "ensure_base",
    "ensure_heads",
    "heads_path_for",
    "evaluate",
    "load_task",
    "self_pairs",
]
