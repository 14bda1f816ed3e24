"""Schema 1 -> 2 (``bpd.config.common.SCHEMA``): cache keys and run ids hash the options a config sets, not each
field that existed when models were first cached. This migration holds the one frozen copy of the old rule
(``v1_*``); the config classes keep none of it.

    python experiments/migrate.py rows [results] [--data-cache DIR] [--dry-run]
    python experiments/migrate.py cache outputs/cache [--config "pretrain.py experiment=..."]... [--dry-run]
    python experiments/migrate.py manifests [checkpoints] [--data-cache DIR] [--dry-run]

A name maps exactly when a configuration reproduces it under the old rule: a row's own command (each of a multirun's
combinations), a shipped manifest's command, or a ``--config`` command line; the new name is then what the library
computes for that configuration now. A row whose run id no configuration reproduces (written by code whose defaults
have since changed: no config reached that id any more) gets ``cache_key("schema 1", old id)``. Rows keep their old
id as ``run_id_v1``, carry ``schema: 2`` and the columns older code did not write; their output folders follow their
ids. A second run changes nothing; a rename onto an existing name is refused. ``--data-cache`` (read only) gives
the built Debian and photo corpora whose content hashes their tasks' keys include.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _common import CONF_DIR, ROOT
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bpd.config import ExperimentConfig, cache_key
from bpd.config.common import SCHEMA, config_hash, plain
from bpd.evaluate import run_id
from bpd.stages import Recipe, base_path_for, heads_path_for
from bpd.tasks.base import task_key
from corpora.debian.build import corpus_folder as debian_folder
from corpora.debian.build import corpus_hash as debian_hash
from corpora.photos.build import PhotoOptions
from corpora.photos.build import corpus_folder as photos_folder
from corpora.photos.build import corpus_hash as photos_hash

#: Each entry point's primary config (a command's script names it).
PRIMARY = {"run.py": "config", "train.py": "train_stage", "evaluate.py": "evaluate", "bench.py": "bench",
           "pretrain.py": "pretrain", "distill.py": "distill", "export.py": "export", "bench_peers.py": "bench_peers",
           "data.py": "config"}
#: Columns older code did not write, with the value it decoded with (analysis/load.py no longer fills them in).
DECODE_DEFAULTS = {"engine": "eager", "proposal_precision": "float32", "compile": False, "timing_busy": False,
                   "heads_tied": False}
LOCK_STALE_S = 120.0  # a lock whose heartbeat is older is stale (bpd.locks.FileLock's default)
PATH_COLUMNS = ("hyp_file", "ref_file", "pred_file", "target_file", "grid_file")

# -- schema 1, frozen ------------------------------------------------------------------------------------------
#: Schema 1's fields added after models were cached, hashed only when they differ from these values.
V1_WHEN_SET = {
    "model": {"aligned_input": False, "aligned_upsample": "nearest", "aligned_tied": False},
    "heads": {"proposal_vocab": None, "tie_slots": False, "soft_targets": False},
    "train": {"score_every": 0, "score_examples": 200, "best_on": "loss", "input_noise": 0.0},
    "task": {"tag_phrases": False, "sentence_repeat": 1, "debian_sources": None,
             "debian_kinds": ["sentences", "strings"], "debian_min_words": 1, "debian_deb_dir": None},
    "decode": {"proposal_precision": "float32", "engine": "eager"},
}
#: Schema 1 hashed these methods' options under the keys they had before ``decode.methods``.
V1_METHOD_KEYS = {"naive_greedy": {"naive_greedy": None}, "beam": {"beam_size": "size", "alpha": "alpha"},
                  "tree": {"trees": None}, "rescored": {"rescore": None}}


def v1_keyed(fields: dict[str, Any], section: str, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    unset = {k for k, d in V1_WHEN_SET[section].items() if fields.get(k) == d}
    return {k: v for k, v in fields.items() if k not in drop and k not in unset}


def v1_task_key(task: Any, content: str | None) -> str:
    """Schema 1's task key: the flat task fields (each corpus's options as ``task.<corpus>_<option>``)."""
    flat = {k: v for k, v in dataclasses.asdict(task).items() if k != "corpora"}
    if task.kind == "image":
        return config_hash(flat, *([content] if content else []))
    ding, debian = task.corpora.ding, task.corpora.debian
    flat |= {"ding_path": ding.path, "include_phrases": ding.include_phrases, "tag_phrases": ding.tag_phrases,
             "sentence_repeat": ding.sentence_repeat,
             **{f"debian_{k}": v for k, v in dataclasses.asdict(debian).items()}}
    return config_hash(v1_keyed(flat, "task", ("ding_path", "debian_deb_dir", "debian_fetch")),
                       *([content] if content else []))


def v1_train(train: Any) -> dict[str, Any]:
    return v1_keyed(dataclasses.asdict(train), "train", ("loader_workers", "continue_from"))


def v1_sampled(n: int | None, targets: str) -> tuple:
    return ({"max_sources": n},) if n is not None and targets != "gold" else ()


def v1_base(cfg: ExperimentConfig, task_v1: str, targets: str, seed: int, base_sources: int | None) -> str:
    key = config_hash(task_v1, v1_keyed(dataclasses.asdict(cfg.model), "model"), v1_train(cfg.train), targets, seed,
                      "base", *v1_sampled(base_sources, targets))
    return f"base_{targets}_s{seed}_{key}.pt"


def v1_heads(cfg: ExperimentConfig, base: str) -> str:
    h = cfg.heads
    if h.k == 1 and h.identity_p1:
        return base
    heads = {k: v for k, v in v1_keyed(dataclasses.asdict(h), "heads").items() if k != "eval_vs_self"}
    key = config_hash(Path(base).stem, heads, v1_train(cfg.heads_train_config), cfg.seed,
                      *v1_sampled(cfg.distill.max_sources, h.targets))
    return f"heads_k{h.k}_{h.training}_{h.targets}_{key}.pt"


def v1_run_id(decode: Any, task_name: str, device: str, model: str, draft: str | None = None) -> str:
    fields = {k: v for k, v in dataclasses.asdict(decode).items() if k not in ("timing_repeats", "methods")}
    out = v1_keyed(fields, "decode")
    for f in dataclasses.fields(decode.methods):
        value = plain(getattr(decode.methods, f.name))
        if f.name in V1_METHOD_KEYS:
            out |= {old: value if sub is None else value[sub] for old, sub in V1_METHOD_KEYS[f.name].items()}
        elif value != plain(f.default_factory()):
            out[f.name] = value
    out["skip_existing"] = True
    return config_hash(model, out, task_name, device, *([draft] if draft else []))


# -- both schemas for one configuration -------------------------------------------------------------------
def content_key(task: Any, data_cache: Path | None) -> str | None:
    """The content hash a task's key adds (the Debian and photo corpora), read from the built corpus."""
    if task.source not in ("debian", "photos"):
        return None
    if data_cache is None:
        raise LookupError(f"the {task.source} corpus's content hash: pass --data-cache with the built corpus")
    if task.source == "photos":
        folder = photos_folder(data_cache, PhotoOptions(lr_size=task.lr_size, hr_size=task.hr_size))
        return photos_hash(folder)
    from bpd.tasks.translation import debian_options
    return debian_hash(debian_folder(data_cache, debian_options(task, task.corpora.debian)))


def renames(cfg: ExperimentConfig, data_cache: Path | None) -> dict[str, str]:
    """Every cached name ``cfg`` keys, old -> new (stems: a model's files and products share its stem)."""
    content = content_key(cfg.task, data_cache)
    old_task, new_task = v1_task_key(cfg.task, content), task_key(cfg.task, content)
    runtime, task, recipe = SimpleNamespace(cache_root=Path("")), SimpleNamespace(key=new_task), Recipe.of(cfg)
    out = {f"{cfg.task.name}_{old_task}": f"{cfg.task.name}_{new_task}"}  # the task's stores
    for targets, seed, sources in (("gold", cfg.seed, None), ("gold", cfg.teacher_seed, None),
                                   ("distilled", cfg.seed, cfg.distill.base_sources)):
        out[Path(v1_base(cfg, old_task, targets, seed, sources)).stem] = base_path_for(
            runtime, recipe, task, targets, seed).stem
    base = v1_base(cfg, old_task, cfg.base_targets, cfg.seed, cfg.distill.base_sources)
    out[Path(v1_heads(cfg, base)).stem] = heads_path_for(runtime, recipe, task).stem
    if cfg.draft.model is not None:
        draft = dataclasses.replace(cfg, model=cfg.draft.model)
        out[Path(v1_base(draft, old_task, "gold", cfg.seed, None)).stem] = base_path_for(
            runtime, dataclasses.replace(recipe, model=cfg.draft.model), task).stem
    return out


def configs(command: str) -> list[ExperimentConfig]:
    """The configurations a recorded command line composes to at this commit (each combination of a multirun's
    comma lists); none when it names no entry point or no longer composes."""
    args = shlex.split(command)
    script = next((Path(a).name for a in args if a.endswith(".py")), None)
    if script not in PRIMARY:
        return []
    overrides = [a for a in args[args.index(next(a for a in args if a.endswith(".py"))) + 1:] if "=" in a
                 and not a.startswith("-")]
    choices = [[f"{o.split('=', 1)[0]}={v}" for v in o.split("=", 1)[1].split(",")]
               if "," in o and not re.search(r"[\[{]", o) else [o] for o in overrides]
    out = []
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        for combo in itertools.product(*choices):
            try:
                entry = OmegaConf.to_object(compose(PRIMARY[script], overrides=list(combo)))
                out.append(ExperimentConfig(**{f.name: getattr(entry, f.name)
                                               for f in dataclasses.fields(ExperimentConfig)}).validate())
            except Exception:  # an option since renamed or removed: this command maps nothing
                continue
    return out


# -- rows -------------------------------------------------------------------------------------------------
def migrate_rows(results: Path, data_cache: Path | None, dry_run: bool) -> None:
    files = sorted(results.rglob("*.jsonl"))
    rows = {f: [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines() if x.strip()] for f in files}
    composed: dict[str, list[ExperimentConfig]] = {}
    ids: dict[str, str] = {}  # old run id -> new, where a configuration reproduces it
    models: dict[str, str] = {}  # old model file -> new
    for r in (r for rs in rows.values() for r in rs if r.get("schema", 1) < SCHEMA and r.get("command")):
        for cfg in composed.setdefault(r["command"], configs(r["command"])):
            try:
                names = renames(cfg, data_cache)
            except LookupError:
                continue
            models |= {f"{o}.pt": f"{n}.pt" for o, n in names.items()}
            if "run_id" in r and "model" in r and r["run_id"] not in ids:
                draft = r.get("draft_model")
                if v1_run_id(cfg.decode, cfg.task.name, cfg.device, r["model"], draft) == r["run_id"]:
                    new_model = models.get(r["model"], r["model"])
                    ids[r["run_id"]] = run_id(cfg.decode, cfg.task.name, cfg.device, Path(new_model),
                                              Path(models.get(draft, draft)) if draft else None)
    for f, rs in rows.items():
        changed = [migrated_row(r, ids, models) for r in rs]
        if changed == rs:
            continue
        new_ids = {a["run_id"]: b["run_id"] for a, b in zip(rs, changed) if a.get("run_id") != b.get("run_id")}
        outputs = f.parent / "outputs"
        # A run's folder is outputs/<run id>, a redo's outputs/<run id>-2 (and so on): each follows its id.
        moves = {d: d.with_name(new_ids[d.name.split("-")[0]] + d.name[len(d.name.split("-")[0]):])
                 for d in (sorted(outputs.iterdir()) if outputs.is_dir() else [])
                 if d.is_dir() and d.name.split("-")[0] in new_ids}
        for target in moves.values():
            refuse_existing(target)
        exact = sum(r.get("run_id") in ids for r in rs)
        print(f"{f.relative_to(results.parent)}: {len(rs)} rows, {len(moves)} output folders "
              f"({exact} rows' ids reproduced by their command)")
        if not dry_run:
            for a, b in moves.items():
                a.rename(b)
            f.write_text("".join(json.dumps(r) + "\n" for r in changed), encoding="utf-8")


def migrated_row(r: dict[str, Any], ids: dict[str, str], models: dict[str, str]) -> dict[str, Any]:
    if r.get("schema", 1) >= SCHEMA:
        return r
    out = dict(r)
    if "run_id" in r:
        old = r["run_id"]
        new = ids.get(old) or cache_key("schema 1", old)
        out = {"run_id": new, "run_id_v1": old, **{k: v for k, v in out.items() if k != "run_id"}}
        for c in PATH_COLUMNS:
            if isinstance(out.get(c), str):
                out[c] = re.sub(f"/outputs/{old}(?=[-/])", f"/outputs/{new}", out[c])
    for c in ("model", "draft_model"):
        if isinstance(out.get(c), str):
            out[c] = models.get(out[c], out[c])
    if "decoder" in r:  # a decoding row
        out |= {k: v for k, v in DECODE_DEFAULTS.items() if out.get(k) is None}
    out["schema"] = SCHEMA
    return out


def refuse_existing(target: Path) -> None:
    if target.exists():
        sys.exit(f"error: {target} already exists; move it aside (this migration never overwrites a file) and rerun.")


# -- cache and manifests ------------------------------------------------------------------------------------
def migrate_cache(cache: Path, commands: list[str], dry_run: bool) -> None:
    held = [p for p in sorted((cache / "models").glob("*.lock")) if time.time() - p.stat().st_mtime < LOCK_STALE_S]
    if held and not dry_run:
        sys.exit(f"error: a job holds {held[0].name} (and {len(held) - 1} more); rerun when no job uses {cache}.")
    stems = name_map(commands + [m["command"] for m in shipped()], cache / "data")
    pattern = re.compile("^(" + "|".join(map(re.escape, stems)) + r")(?=[._])") if stems else None
    for folder in (cache / "models", cache / "distill", cache / "data" / "stores"):
        for p in sorted(folder.iterdir()) if folder.is_dir() and pattern else []:
            m = pattern.match(p.name)
            if m is None:
                continue
            target = p.with_name(stems[m.group(1)] + p.name[m.end():])
            refuse_existing(target)
            print(f"{p.relative_to(cache)} -> {target.name}")
            if not dry_run:
                p.rename(target)


def migrate_manifests(folder: Path, data_cache: Path | None, dry_run: bool) -> None:
    for m in shipped(folder):
        stems = name_map([m["command"]], data_cache)
        old = Path(m["cache_name"]).stem
        if old not in stems:
            print(f"{m['manifest'].name}: {m['cache_name']} (no configuration reproduces it; left as it is)")
            continue
        new = f"{stems[old]}.pt"
        print(f"{m['manifest'].name}: cache_name {m['cache_name']} -> {new}")
        if not dry_run:
            text = m["manifest"].read_text(encoding="utf-8")
            m["manifest"].write_text(text.replace(f'"{m["cache_name"]}"', f'"{new}"', 1), encoding="utf-8")


def shipped(folder: Path = ROOT / "checkpoints") -> list[dict[str, Any]]:
    out = []
    for f in sorted(folder.glob("*.json")):
        m = json.loads(f.read_text(encoding="utf-8"))
        command = m.get("trained_by", {}).get("command")
        if "cache_name" in m and command:
            out.append({**m, "manifest": f, "command": "python " + command})
    return out


def name_map(commands: list[str], data_cache: Path | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for command in commands:
        for cfg in configs(command):
            try:
                out |= {o: n for o, n in renames(cfg, data_cache).items() if o != n}
            except (LookupError, FileNotFoundError):
                continue
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("rows", "cache", "manifests"))
    p.add_argument("path", nargs="?", type=Path, help="results/, a cache folder, or checkpoints/")
    p.add_argument("--data-cache", type=Path, help="a cache's data/ folder holding the built corpora (read only)")
    p.add_argument("--config", action="append", default=[], help="a command line whose products to rename (cache)")
    p.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    a = p.parse_args()
    if a.what == "rows":
        migrate_rows((a.path or ROOT / "results").resolve(), a.data_cache, a.dry_run)
    elif a.what == "cache":
        if a.path is None:
            sys.exit("error: name the cache folder to migrate, e.g. python experiments/migrate.py cache outputs/cache.")
        migrate_cache(a.path, a.config, a.dry_run)
    else:
        migrate_manifests(a.path or ROOT / "checkpoints", a.data_cache, a.dry_run)


if __name__ == "__main__":
    main()
