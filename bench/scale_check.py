"""`make scale-check`: the WMT14- and CelebA-scale data path, measured on this machine.

In a temporary folder it generates a seeded synthetic WMT14-shaped corpus (4.5M sentence pairs of WMT-like
length, plus newstest-sized dev and test sets) and a CelebA-shaped image folder, then measures

* the first preparation (tokenizer on a fixed-seed sample, token stores of every split) and a re-open;
* the resident memory of a training process (a few `transformer_base` steps) and of each of 2 DDP ranks
  (gloo), at 4.5M pairs, at 0.5M pairs and on the 3k-line dev set alone (the baseline: torch, the model,
  its optimizer and activations), so that the excess over the baseline shows what the corpus costs;
* the padded target tokens per second one loader delivers (in-process and with a worker);
* CelebA-shaped preprocessing (seconds per image) and re-open.

Every measurement is a row in results/scale/rows.jsonl; the table is printed at the end.

    python bench/scale_check.py                      # the full check (~15 min on 2 cores)
    python bench/scale_check.py --pairs 200000 --small 50000 --images 300   # a quick one
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

# ------------------------------------------------------------------------------------------------------------
# synthetic corpora


def _words(rng: np.random.Generator, n: int, syllables: list[str]) -> list[bytes]:
    """``n`` distinct made-up words of 1-4 syllables (a language's vocabulary)."""
    out: set[bytes] = set()
    while len(out) < n:
        k = rng.integers(1, 5)
        out.add("".join(rng.choice(syllables, size=k)).encode())
    return sorted(out)


def _write(f, buf: np.ndarray, woff: np.ndarray, wlen: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> None:
    """Lines of words ``ids`` (``lengths`` words each), gathered from the vocabulary buffer in one pass."""
    tok_len = wlen[ids]
    starts = np.cumsum(tok_len) - tok_len
    gather = np.repeat(woff[ids] - starts, tok_len) + np.arange(int(tok_len.sum()))
    out = buf[gather]
    line_bytes = np.add.reduceat(tok_len, np.concatenate([[0], np.cumsum(lengths)[:-1]]))
    out[np.cumsum(line_bytes) - 1] = ord("\n")  # each line's last space becomes its newline
    f.write(out.tobytes())


def synth_corpus(folder: Path, n_pairs: int, seed: int = 0, n_eval: int = 3000, chunk: int = 100_000) -> dict:
    """train.{en,de} with ``n_pairs`` lines, newstest2013/2014.{en,de}: sentence lengths lognormal around
    25 words (WMT14's mean), words drawn Zipf-like from 60k made-up words per language."""
    rng = np.random.default_rng(seed)
    vocab = {}
    for lang, syl in (("en", "ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri "
                              "ro ru sa se si so su ta te ti to tu th sh ch st".split()),
                      ("de", "ab eb ib ob ub ak ek ik ok uk al el il ol ul an en in on un ar er ir or ur sch ei "
                             "au ie ge be ver zu ung keit".split())):
        words = _words(rng, 60_000, syl)
        buf = np.frombuffer(b"".join(w + b" " for w in words), dtype=np.uint8)
        wlen = np.array([len(w) + 1 for w in words], dtype=np.int64)
        vocab[lang] = (buf, np.cumsum(wlen) - wlen, wlen)
    ranks = np.arange(1, 60_001, dtype=np.float64)
    p = ranks**-1.07
    p /= p.sum()
    folder.mkdir(parents=True, exist_ok=True)
    stats = {"pairs": n_pairs, "words": 0}
    splits = (("train", n_pairs, seed), ("newstest2013", n_eval, seed + 1), ("newstest2014", n_eval + 3, seed + 2))
    for name, n, s in splits:
        g = np.random.default_rng(s)
        with open(folder / f"{name}.en", "wb") as fe, open(folder / f"{name}.de", "wb") as fd:
            for start in range(0, n, chunk):
                m = min(chunk, n - start)
                en_len = np.clip(np.rint(g.lognormal(np.log(22.5), 0.5, m)), 1, 150).astype(np.int64)
                de_len = np.clip(en_len + g.integers(-3, 4, m), 1, 160)
                for f, lang, lengths in ((fe, "en", en_len), (fd, "de", de_len)):
                    buf, woff, wlen = vocab[lang]
                    _write(f, buf, woff, wlen, lengths, g.choice(60_000, size=int(lengths.sum()), p=p))
                stats["words"] += int(en_len.sum())
    stats["mean_words"] = stats["words"] / max(1, n_pairs)
    stats["train_bytes"] = (folder / "train.en").stat().st_size + (folder / "train.de").stat().st_size
    return stats


def head_corpus(src: Path, dst: Path, n_pairs: int) -> None:
    """The first ``n_pairs`` training lines of ``src`` (and the same dev/test files) in ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        with open(src / f"train.{lang}", "rb") as fi, open(dst / f"train.{lang}", "wb") as fo:
            for _, line in zip(range(n_pairs), fi):
                fo.write(line)
        for name in ("newstest2013", "newstest2014"):
            (dst / f"{name}.{lang}").write_bytes((src / f"{name}.{lang}").read_bytes())


def synth_celeba(folder: Path, n: int, seed: int = 0) -> None:
    """``n`` aligned-CelebA-shaped JPEGs (178x218, smooth random colour fields) and a partition file."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    img_dir = folder / "img_align_celeba"
    img_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        small = rng.integers(0, 256, (7, 6, 3), dtype=np.uint8)
        Image.fromarray(small).resize((178, 218), Image.Resampling.BICUBIC).save(img_dir / f"{i + 1:06d}.jpg",
                                                                                 quality=90)
        lines.append(f"{i + 1:06d}.jpg {0 if i < 0.8 * n else (1 if i < 0.9 * n else 2)}")
    (folder / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------------------
# measurements in child processes (each reports its own peak resident memory)

CHILD = r"""
import json, resource, sys, threading, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {root!r} + "/experiments")
t0 = time.perf_counter()
peak = {{"RssAnon": 0, "RssFile": 0}}
def sample():  # anonymous memory (what a process holds) vs file-backed pages (mapped stores, reclaimable)
    while True:
        for line in open("/proc/self/status"):
            k = line.split(":")[0]
            if k in peak:
                peak[k] = max(peak[k], int(line.split()[1]))
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()
from _common import register, to_configs
from hydra import compose, initialize_config_dir
register()
with initialize_config_dir(config_dir={root!r} + "/conf", version_base="1.3"):
    cfg, entry = to_configs(compose({entry!r}, overrides={overrides!r}))
{body}
rank = __import__("os").environ.get("RANK", "0")
time.sleep(0.1)
print("SCALE " + json.dumps({{"rank": int(rank), "seconds": time.perf_counter() - t0,
      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      "peak_anon_mb": peak["RssAnon"] / 1024, "peak_file_mb": peak["RssFile"] / 1024, **extra}}), flush=True)
"""

PREPARE = """
from bpd.runtime import Runtime
from bpd.tasks import load_task
task = load_task(Runtime.build(cfg), cfg.task, cfg.shipped)
extra = {"lines": {s: len(task.pairs(s)) for s in ("train", "dev", "test")},
         "train_tokens": int(task.pairs("train").tgt_lengths.sum()) + int(task.pairs("train").src_lengths.sum()),
         "truncated": task.pairs("train").manifest["truncated"]}
"""

TRAIN = """
import train as entry_point
entry_point.run(cfg, entry)
import torch
from bpd.stages import BASE
from bpd.runtime import Runtime
from bpd.tasks import load_task
with torch.device("meta"):  # the parameter count only, no memory
    model = load_task(Runtime.build(cfg), cfg.task, cfg.shipped).build_model(cfg.model, BASE, 1, cfg.seed)
extra = {"params": sum(p.numel() for p in model.parameters())}
"""

LOADER = """
import time
from bpd.data.batches import batch_iterator, make_batches
from bpd.runtime import Runtime
from bpd.tasks import load_task
def anon():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon")) / 1024
before = anon()
task = load_task(Runtime.build(cfg), cfg.task, cfg.shipped)
train = task.pairs("train")
t = time.perf_counter()
order = make_batches(train.src_lengths, train.tgt_lengths, 4096, shuffle=True, seed=0)
extra = {"make_batches_s": time.perf_counter() - t, "batches": len(order)}
for workers in (0, 1):
    it = batch_iterator(train, order, task.pad_id, task.bos_id, workers=workers)
    tokens, t = 0, time.perf_counter()
    for src, tgt_in, tgt_out in it:
        tokens += tgt_out.numel()
        if time.perf_counter() - t > 10:
            break
    extra[f"tokens_per_s_workers{workers}"] = tokens / (time.perf_counter() - t)
    if workers == 0:  # what the data path holds: the task, an epoch's batch list, collating batches
        extra["data_anon_mb"] = anon() - before
"""


def child(entry: str, overrides: list[str], body: str, torchrun: int = 0, threads: int = 2) -> list[dict]:
    code = CHILD.format(root=str(ROOT), entry=entry, overrides=overrides, body=body)
    script = Path(tempfile.mkstemp(suffix=".py")[1])
    script.write_text(code)
    # One malloc arena: peaks then vary less between identical runs (glibc's per-thread arenas add noise).
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT),
           "MALLOC_ARENA_MAX": "1"}
    cmd = [sys.executable, str(script)]
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={torchrun}", "--master_port=29533",
               str(script)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"scale-check: a step failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    reports = [json.loads(line.split("SCALE ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("SCALE ")]
    for r in reports:
        r["wall_s"] = time.perf_counter() - t0
    return sorted(reports, key=lambda r: r["rank"])


def mem(report: dict) -> dict:
    return {k: report[k] for k in ("seconds", "peak_rss_mb", "peak_anon_mb", "peak_file_mb")}


def model_memory(report: dict) -> dict:
    """fp32 weights, gradients and Adam's two moments: 16 bytes per parameter; "beyond" is the rest of the
    process's anonymous memory (interpreter, torch, activations of the step, the data path)."""
    mb = 16 * report["params"] / 2**20
    return {"params": report["params"], "model_optimizer_mb": mb,
            "beyond_model_optimizer_mb": report["peak_anon_mb"] - mb}


def task_overrides(data_dir: Path, cache: Path) -> list[str]:
    return ["experiment=table1", f"task.data_dir={data_dir}", f"paths.cache_dir={cache}", "logger=none",
            "device=cpu"]


def train_overrides(data_dir: Path, cache: Path, threads: int) -> list[str]:
    # A dozen transformer_base steps at the paper's schedule but 1,024 tokens per batch (CPU), no dev
    # evaluation or intermediate checkpoint: what is measured is the data path next to a real model. The peak
    # follows the largest batch shape met (activations are host memory on a CPU), so a dozen steps rather
    # than three make it depend less on which batches come first.
    return task_overrides(data_dir, cache) + [
        "stage=base", "train.max_steps=12", "train.max_tokens=1024", "train.bf16=false", "train.eval_every=1000",
        "train.ckpt_every=1000", "train.warmup_steps=10", f"threads={threads}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=4_500_000)
    ap.add_argument("--small", type=int, default=500_000)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "scale")
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temp one)")
    args = ap.parse_args(argv)

    from bpd.tracking import append_rows, command_line, device_name, git_sha

    work = args.keep or Path(tempfile.mkdtemp(prefix="bpd-scale-"))
    common = {"experiment": "scale", "git_sha": git_sha(), "device": device_name("cpu"), "command": command_line(),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    rows: list[dict] = []

    def row(**kw) -> None:
        rows.append({**common, **kw})
        print(json.dumps(kw), flush=True)

    big = work / f"wmt_{args.pairs}"
    t = time.perf_counter()
    gen = synth_corpus(big, args.pairs)
    row(measure="generate corpus", seconds=time.perf_counter() - t, **gen)
    sizes = [(args.small, work / f"wmt_{args.small}"), (args.pairs, big)]
    head_corpus(big, sizes[0][1], args.small)
    dev_only = work / "wmt_dev_only"  # the baseline: the dev set as the training set (3k pairs)
    head_corpus(big, dev_only, 0)
    for lang in ("en", "de"):
        (dev_only / f"train.{lang}").write_bytes((dev_only / f"newstest2013.{lang}").read_bytes())

    for n, folder in sizes:
        cache = work / f"cache_{n}"
        first = child("train_stage", task_overrides(folder, cache), PREPARE)[0]
        row(measure="first preparation", pairs=n, **mem(first), lines=first["lines"],
            train_tokens=first["train_tokens"], truncated=first["truncated"],
            store_mb=sum(f.stat().st_size for f in (cache / "data" / "stores").rglob("*") if f.is_file()) / 2**20)
        again = child("train_stage", task_overrides(folder, cache), PREPARE)[0]
        row(measure="re-open", pairs=n, **mem(again))
    # The baseline uses the big corpus's tokenizer, so its model (vocabulary) is the same size.
    (work / "cache_3000" / "data").mkdir(parents=True, exist_ok=True)
    for f in (work / f"cache_{args.pairs}" / "data").glob("spm*"):
        (work / "cache_3000" / "data" / f.name).write_bytes(f.read_bytes())
    child("train_stage", task_overrides(dev_only, work / "cache_3000"), PREPARE)  # its stores, outside the measure
    for n, folder in [(3000, dev_only), *sizes]:
        cache = work / f"cache_{n}"
        one = child("train_stage", train_overrides(folder, cache, 2), TRAIN)[0]
        row(measure="training process", pairs=n, world_size=1, **mem(one), **model_memory(one))
        # seed=1: another model (the one-process run's is cached), the same stores.
        for r in child("train_stage", train_overrides(folder, cache, 1) + ["seed=1"], TRAIN, torchrun=2, threads=1):
            row(measure="training process", pairs=n, world_size=2, rank=r["rank"], **mem(r), **model_memory(r))
    for n, folder in sizes:
        loader = child("train_stage", task_overrides(folder, work / f"cache_{n}"), LOADER)[0]
        row(measure="loader", pairs=n, max_tokens=4096, **{k: v for k, v in loader.items() if k != "rank"})

    from bpd.data.celeba import prepare_celeba

    faces = work / "celeba"
    t = time.perf_counter()
    synth_celeba(faces, args.images)
    row(measure="generate images", images=args.images, seconds=time.perf_counter() - t)
    t = time.perf_counter()
    lr, hr = prepare_celeba(faces, work / "cache_celeba", "train", 8, 32)
    prep = time.perf_counter() - t
    row(measure="celeba preparation", images=len(lr), seconds=prep, ms_per_image=1000 * prep / len(lr))
    t = time.perf_counter()
    lr, hr = prepare_celeba(faces, work / "cache_celeba", "train", 8, 32)
    row(measure="celeba re-open", images=len(lr), seconds=time.perf_counter() - t)

    append_rows(args.out / "rows.jsonl", rows)
    print(format_table(rows))
    print(f"rows: {args.out / 'rows.jsonl'}; work folder: {work}" + ("" if args.keep else " (delete it when done)"))
    return 0


def format_table(rows: list[dict]) -> str:
    """RSS is the peak resident set; anon the peak anonymous part (what a process holds), file the mapped
    file pages (stores, libraries: shared and reclaimable); "anon over 3k" compares each training process
    with the same process on the 3k-pair baseline; "beyond m+o" is anon less the model and its optimizer."""
    base = {(r["world_size"], r.get("rank", 0)): r["peak_anon_mb"] for r in rows
            if r["measure"] == "training process" and r.get("pairs") == 3000}
    lines = [f"{'measure':<20} {'size':>9} {'seconds':>8} {'RSS MB':>7} {'anon MB':>8} {'file MB':>8} "
             f"{'anon over 3k':>12} {'beyond m+o':>10}  other"]
    for r in rows:
        size = r.get("pairs") or r.get("images") or ""
        f = lambda k, w, r=r: "" if r.get(k) is None else format(r[k], f"{w}.0f")  # noqa: E731
        over = ""
        if r["measure"] == "training process":
            over = format(r["peak_anon_mb"] - base.get((r["world_size"], r.get("rank", 0)), r["peak_anon_mb"]), "12.0f")
        other = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items() if k in
                 ("world_size", "rank", "ms_per_image", "make_batches_s", "tokens_per_s_workers0",
                  "tokens_per_s_workers1", "mean_words", "train_tokens", "store_mb", "data_anon_mb")}
        lines.append(f"{r['measure']:<20} {size:>9} {r.get('seconds', 0):8.1f} {f('peak_rss_mb', 7):>7} "
                     f"{f('peak_anon_mb', 8):>8} {f('peak_file_mb', 8):>8} {over:>12} "
                     f"{f('beyond_model_optimizer_mb', 10):>10}  {other if other else ''}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
