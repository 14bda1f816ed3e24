"""Translation corpora in one folder layout, their encoding, and token-budget batching.

Every corpus (the embedded ding sentences, ``bpd.data.ding``; WMT14; any folder) is prepared into
``{train,dev,test}.{src,tgt}`` with one sentence per line, so training and evaluation code never needs to
know which corpus or direction it is looking at.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch

from bpd.data.tokenizer import BOS_ID, PAD_ID, Tokenizer

DIRECTIONS = ("en-de", "de-en")
SPLITS = ("train", "dev", "test")

# ------------------------------------------------------------------------------------------------------------
# Writing the {train,dev,test}.{src,tgt} folders
# ------------------------------------------------------------------------------------------------------------


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def atomic_write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write one line per item via a temp file + rename: readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line.replace("\n", " ") + "\n")
    os.replace(tmp, path)


def split_files(folder: Path) -> list[Path]:
    return [folder / f"{split}.{side}" for split in SPLITS for side in ("src", "tgt")]


def check_direction(direction: str) -> tuple[str, str]:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'en-de' or 'de-en', got {direction!r}")
    src, tgt = direction.split("-")
    return src, tgt


def count_lines(path: Path) -> int:
    """Number of lines of a text file (counts newlines in binary chunks: fast on WMT-sized files)."""
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


WMT14_HELP = (
    "newstest2013 (dev): sacrebleu -t wmt13 -l en-de --echo src > newstest2013.en; "
    "sacrebleu -t wmt13 -l en-de --echo ref > newstest2013.de; "
    "newstest2014 (test): sacrebleu -t wmt14 -l en-de --echo src > newstest2014.en; "
    "sacrebleu -t wmt14 -l en-de --echo ref > newstest2014.de; "
    "train.en/train.de: concatenate the WMT14 En-De training corpora from https://www.statmt.org/wmt14/ "
    "(Europarl v7, Common Crawl, News Commentary v9), keeping the two sides line-aligned"
)


def prepare_wmt14(data_dir: Path, direction: str = "en-de", cache_dir: Path | None = None) -> Path:
    """Expose WMT14 files in ``data_dir`` as a ``{train,dev,test}.{src,tgt}`` folder (symlinks) and return it.

    Dev is newstest2013 and test newstest2014, as in the paper. The folder defaults to
    ``data_dir/bpd_<direction>``; symlinks avoid copying the 1+ GB training text (copies are the fallback
    where symlinks are not allowed). Dev/test line counts are checked here because a misaligned reference
    file would otherwise only show up as a mysteriously low BLEU.
    """
    src_lang, tgt_lang = check_direction(direction)
    data_dir = Path(data_dir)
    names = {
        "train": "train",
        "dev": "newstest2013",
        "test": "newstest2014",
    }
    missing = [
        f"{names[s]}.{lang}" for s in SPLITS for lang in ("en", "de") if not (data_dir / f"{names[s]}.{lang}").is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"WMT14 files missing in {data_dir}: {', '.join(missing)}. Create them in that folder: {WMT14_HELP}."
        )
    for s in ("dev", "test"):
        n_src = count_lines(data_dir / f"{names[s]}.en")
        n_tgt = count_lines(data_dir / f"{names[s]}.de")
        if n_src != n_tgt:
            raise ValueError(f"{names[s]}.en has {n_src} lines but {names[s]}.de has {n_tgt}; they must align")
    folder = Path(cache_dir) if cache_dir is not None else data_dir / f"bpd_{direction}"
    folder.mkdir(parents=True, exist_ok=True)
    for s in SPLITS:
        for side, lang in (("src", src_lang), ("tgt", tgt_lang)):
            target = (data_dir / f"{names[s]}.{lang}").resolve()
            link = folder / f"{s}.{side}"
            if link.is_file() and link.resolve() == target:
                continue
            tmp = link.with_name(f".{link.name}.tmp{os.getpid()}")
            tmp.unlink(missing_ok=True)
            try:
                tmp.symlink_to(target)
            except OSError:
                shutil.copyfile(target, tmp)
            os.replace(tmp, link)
    return folder


# ------------------------------------------------------------------------------------------------------------
# Encoding and batching
# ------------------------------------------------------------------------------------------------------------

TokPair = tuple[list[int], list[int]]


def encode_corpus(tok: Tokenizer, folder: Path, split: str, max_len: int, truncate: bool = False) -> list[TokPair]:
    """(source ids, target ids + EOS) for every usable line pair of ``folder/<split>.{src,tgt}``.

    Pairs longer than ``max_len`` (target counted with its EOS) are dropped, or cut when ``truncate``
    (keeping the EOS, so the model still learns to stop); pairs with an empty side are always dropped,
    since an all-padding source has nothing to attend to. Use ``truncate`` only for training data: for
    dev/test, dropping or cutting lines would change what BLEU is measured on.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2 (one token plus EOS), got {max_len}")
    folder = Path(folder)
    with open(folder / f"{split}.src", encoding="utf-8") as f:
        src_lines = f.read().splitlines()
    with open(folder / f"{split}.tgt", encoding="utf-8") as f:
        tgt_lines = f.read().splitlines()
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"{folder}/{split}.src has {len(src_lines)} lines but {split}.tgt has {len(tgt_lines)}")
    out: list[TokPair] = []
    for src, tgt in zip(tok.encode_batch(src_lines), tok.encode_batch(tgt_lines)):
        if not src or not tgt:
            continue
        if len(src) > max_len or len(tgt) + 1 > max_len:
            if not truncate:
                continue
            src, tgt = src[:max_len], tgt[: max_len - 1]
        out.append((src, tgt + [tok.eos_id]))
    return out


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    """Right-padded (B, max_len) LongTensor of the sequences."""
    width = max((len(s) for s in seqs), default=0)
    return torch.tensor([list(s) + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long).view(len(seqs), width)


def make_batches(
    pairs: Sequence[TokPair],
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    chunk_size: int = 8192,
) -> list[list[int]]:
    """Index lists of the batches :func:`token_batches` yields (for this rank), e.g. to count steps per epoch.

    Examples are (optionally) shuffled, cut into chunks of ``chunk_size``, and sorted by length within each
    chunk, so a batch holds similar lengths (little padding) while chunks keep batches from being identical
    every epoch. A batch grows while ``batch_size * max(longest src, longest tgt)`` stays <= ``max_tokens``
    (an example longer than that alone forms a batch). With ``shuffle`` the batch order is shuffled too.
    For DDP, the batch list is cut to a multiple of ``world_size`` and rank r takes every world_size-th
    batch from r: disjoint equal shares, so all ranks run the same number of steps and no all-reduce hangs.
    Pass ``seed + epoch`` to get a new order each epoch; the result is a pure function of the arguments.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    if shuffle:
        rng.shuffle(order)
    lengths = [max(len(s), len(t)) for s, t in pairs]
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk_size):
        chunk = sorted(order[start : start + chunk_size], key=lambda i: (lengths[i], len(pairs[i][0])))
        batch: list[int] = []
        width = 0
        for i in chunk:
            new_width = max(width, lengths[i])
            if batch and (len(batch) + 1) * new_width > max_tokens:
                batches.append(batch)
                batch, new_width = [], lengths[i]
            batch.append(i)
            width = new_width
        if batch:
            batches.append(batch)
    if shuffle:
        rng.shuffle(batches)
    usable = len(batches) // world_size * world_size
    return batches[:usable][rank::world_size]


def token_batches(
    pairs: Sequence[TokPair],
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    pad_id: int = PAD_ID,
    rank: int = 0,
    world_size: int = 1,
    bos_id: int = BOS_ID,
    chunk_size: int = 8192,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield ``(src (B,S), tgt_in (B,T), tgt_out (B,T))`` LongTensors of length-bucketed batches.

    ``tgt_out`` is the target as encoded (ending in EOS); ``tgt_in`` is it shifted right behind BOS (teacher
    forcing input), so position t of ``tgt_in`` predicts position t of ``tgt_out``. All three are
    right-padded with ``pad_id``. Batch composition and order are described in :func:`make_batches`.
    """
    for idx in make_batches(pairs, max_tokens, shuffle, seed, rank, world_size, chunk_size):
        srcs = [pairs[i][0] for i in idx]
        tgts = [pairs[i][1] for i in idx]
        yield (
            pad_batch(srcs, pad_id),
            pad_batch([[bos_id] + list(t[:-1]) for t in tgts], pad_id),
            pad_batch(tgts, pad_id),
        )


__all__ = [
    "DIRECTIONS",
    "SPLITS",
    "Tokenizer",
    "count_lines",
    "encode_corpus",
    "make_batches",
    "pad_batch",
    "prepare_wmt14",
    "token_batches",
]
