"""Token stores: a corpus split encoded once into flat memory-mapped arrays, opened in seconds by every run,
stage and rank, with resident memory that does not grow with the corpus.

A store is a folder ``<name>.store/``::

    src.bin, tgt.bin        every line's token ids, concatenated (uint16 when the vocabulary fits, else int32)
    src.idx, tgt.idx        int64 offsets: line i is tokens[idx[i]:idx[i + 1]]
    src.len, tgt.len        int32 lengths (what batching reads: 4 bytes per line, mapped too)
    manifest.json           format version, dtype, line count, the tokenizer's hash, what encoding did
                            (lines kept, cut to max_len, dropped for an empty side, empty sources padded), and
                            each file's size and the sha256 of the index files (``files``, ``index_sha256``)

``build_store`` encodes a pair of text files in chunks (each chunk's arrays written atomically to a partial
folder, so a killed build resumes at the first missing chunk), concatenates them and renames the folder into
place: a half-built store is never seen as a store. ``PairStore`` opens one with ``np.memmap``, after checking
it against its manifest (``check_store``: file sizes, the index's ends and the digest of the index files, never
the token files: opening a large store costs milliseconds); a damaged store is rebuilt where the harness builds
it (``build_store``, decoded targets) and refused in one sentence naming it elsewhere.

``ArrayPairs`` gives fixed-length arrays (image tokens) the same interface, so batching and collation do not
care where pairs come from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bpd.integrity import DamagedArtifact, file_digest
from corpora.layout import count_lines

FORMAT = 2
CHUNK_LINES = 200_000
#: The files of a store beside its manifest; the index files are small (12 bytes a line) and digested whole.
SIDES = ("src", "tgt")
INDEX_FILES = tuple(f"{side}.{ext}" for side in SIDES for ext in ("idx", "len"))


class DamagedStore(DamagedArtifact):
    """A token store whose files disagree with its manifest (cut, damaged, or another store's)."""


class PairStore:
    """(source ids, target ids) pairs of a store folder, memory-mapped (nothing is read until it is used)."""

    def __init__(self, path: str | os.PathLike, check: bool = True) -> None:
        """Open the store at ``path``, refused in one sentence if its files disagree with its manifest (``check``
        false: already checked, ``open_intact``)."""
        self.path = Path(path)
        manifest = self.path / "manifest.json"
        if not manifest.is_file():
            raise FileNotFoundError(f"{self.path} is not a token store (no manifest.json); build it with build_store.")
        self.manifest: dict[str, Any] = json.loads(manifest.read_text())
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{self.path} has store format {self.manifest.get('format')}, this code reads {FORMAT}; "
                             "delete it and it is rebuilt.")
        if check:
            try:
                check_store(self.path, self.manifest)
            except DamagedStore as e:
                raise DamagedStore(f"{e}; delete it and run the command that built it again to rebuild it.") from None
        self._arrays: dict[str, np.ndarray] | None = None

    # A store travels to DataLoader workers as its path; each process maps the files itself.
    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "manifest": self.manifest, "_arrays": None}

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            dtype = np.dtype(self.manifest["dtype"])
            a = {}
            for side in ("src", "tgt"):
                a[side] = np.memmap(self.path / f"{side}.bin", dtype=dtype, mode="r") \
                    if (self.path / f"{side}.bin").stat().st_size else np.zeros(0, dtype)
                a[f"{side}_idx"] = np.memmap(self.path / f"{side}.idx", dtype=np.int64, mode="r")
                a[f"{side}_len"] = np.memmap(self.path / f"{side}.len", dtype=np.int32, mode="r") \
                    if len(self) else np.zeros(0, np.int32)
            self._arrays = a
        return self._arrays

    def __len__(self) -> int:
        return int(self.manifest["lines"])

    @property
    def src_lengths(self) -> np.ndarray:
        """Tokens per source (int32, mapped from disk)."""
        return self.arrays["src_len"]

    @property
    def tgt_lengths(self) -> np.ndarray:
        return self.arrays["tgt_len"]

    def src(self, i: int) -> np.ndarray:
        a = self.arrays
        return a["src"][a["src_idx"][i] : a["src_idx"][i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        a = self.arrays
        return a["tgt"][a["tgt_idx"][i] : a["tgt_idx"][i + 1]]

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        return self.src(i).tolist(), self.tgt(i).tolist()

    def sources(self, indices: Sequence[int] | None = None) -> list[list[int]]:
        return [self.src(int(i)).tolist() for i in (range(len(self)) if indices is None else indices)]

    def target_counts(self, vocab_size: int) -> np.ndarray:
        """How often each token id occurs among the targets (one pass over the mapped array)."""
        return token_counts(self.arrays["tgt"], vocab_size)


def check_store(path: Path, manifest: dict[str, Any]) -> None:
    """Raise ``DamagedStore`` unless the store at ``path`` matches ``manifest``: every file's size (a store from
    before sizes were recorded: what its line count implies), the index files' sha256 where recorded, and each
    side's index running from 0 to the end of its token file. The token files are not read (a large corpus is
    not re-hashed at every run): a cut one is caught by its size."""
    lines, width = int(manifest["lines"]), np.dtype(manifest["dtype"]).itemsize
    sizes = manifest.get("files") or {f"{side}.idx": 8 * (lines + 1) for side in SIDES} | \
        {f"{side}.len": 4 * lines for side in SIDES}
    for name, size in sizes.items():
        f = path / name
        if not f.is_file() or f.stat().st_size != size:
            got = f"{f.stat().st_size} bytes" if f.is_file() else "missing"
            raise DamagedStore(f"the token store {path} is damaged: {name} is {got}, its manifest says {size} bytes")
    for name, digest in (manifest.get("index_sha256") or {}).items():
        if file_digest(path / name) != digest:
            raise DamagedStore(f"the token store {path} is damaged: {name} does not match its manifest's sha256")
    for side in SIDES:
        idx, tokens = path / f"{side}.idx", path / f"{side}.bin"
        ends = np.fromfile(idx, dtype=np.int64, count=1), np.fromfile(idx, dtype=np.int64, offset=8 * lines)
        size = tokens.stat().st_size if tokens.is_file() else -1
        if ends[0].tolist() != [0] or ends[1].tolist() != [size // width] or size % width:
            raise DamagedStore(f"the token store {path} is damaged: {side}.idx ends at token {ends[1].tolist()}, "
                               f"{side}.bin holds {size / width:g}")


def open_intact(path: Path, log: Callable[[str], None] = print) -> PairStore | None:
    """The store at ``path``, or None after removing it (with a one-line note) if it is damaged: for stores the
    harness builds, which are then built again."""
    try:
        check_store(path, json.loads((path / "manifest.json").read_text()))
    except DamagedStore as e:
        log(f"note: {e}; rebuilding it.")
        shutil.rmtree(path, ignore_errors=True)  # ranks that find it damaged together all remove it
        return None
    return PairStore(path, check=False)


class ArrayPairs:
    """Fixed-length pairs held in two (N, L) integer arrays (image tokens), with the store's interface."""

    def __init__(self, src: np.ndarray, tgt: np.ndarray) -> None:
        if len(src) != len(tgt):
            raise ValueError(f"sources and targets differ in number: {len(src)} vs {len(tgt)}")
        self._src, self._tgt = src, tgt

    def __len__(self) -> int:
        return len(self._src)

    @property
    def src_lengths(self) -> np.ndarray:
        return np.full(len(self), self._src.shape[1], dtype=np.int64)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.full(len(self), self._tgt.shape[1], dtype=np.int64)

    def src(self, i: int) -> np.ndarray:
        return np.asarray(self._src[i], dtype=np.int64)

    def tgt(self, i: int) -> np.ndarray:
        return np.asarray(self._tgt[i], dtype=np.int64)

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        return self.src(i).tolist(), self.tgt(i).tolist()

    def sources(self, indices: Sequence[int] | None = None) -> list[list[int]]:
        return [self.src(int(i)).tolist() for i in (range(len(self)) if indices is None else indices)]

    def target_counts(self, vocab_size: int) -> np.ndarray:
        return token_counts(self._tgt.reshape(-1), vocab_size)


def token_counts(tokens: np.ndarray, vocab_size: int, chunk: int = 1 << 24) -> np.ndarray:
    """np.bincount in chunks: no int64 copy of the whole array (1 GB for WMT14's targets)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), chunk):
        counts += np.bincount(tokens[start:start + chunk], minlength=vocab_size)
    return counts


class ListPairs(ArrayPairs):
    """Pairs of token lists (tests, small in-memory sets), with the store's interface."""

    def __init__(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        self._pairs = [(list(s), list(t)) for s, t in pairs]

    def __len__(self) -> int:
        return len(self._pairs)

    @property
    def src_lengths(self) -> np.ndarray:
        return np.array([len(s) for s, _ in self._pairs], dtype=np.int64)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.array([len(t) for _, t in self._pairs], dtype=np.int64)

    def src(self, i: int) -> np.ndarray:
        return np.asarray(self._pairs[i][0], dtype=np.int64)

    def tgt(self, i: int) -> np.ndarray:
        return np.asarray(self._pairs[i][1], dtype=np.int64)

    def target_counts(self, vocab_size: int) -> np.ndarray:
        return token_counts(np.asarray([t for _, tgt in self._pairs for t in tgt], dtype=np.int64), vocab_size)


# ---------------------------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------------------------

Encoder = Callable[[list[str]], list[list[int]]]


@dataclass(frozen=True)
class StoreEncoding:
    """What ``build_store`` encodes with: the tokenizer's batch encoder, its EOS id (which ends every target), its
    vocabulary size (which sets the tokens' width on disk) and a hash of the tokenizer, kept in the manifest so that
    a store is never read with another tokenizer."""

    encode: Encoder
    eos_id: int
    vocab_size: int
    tokenizer_hash: str


def file_hash(path: str | os.PathLike) -> str:
    """A content hash of a (tokenizer model) file, recorded so a store is never read with another tokenizer."""
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()[:16]


def starts_with_bom(path: str | os.PathLike) -> bool:
    """Whether a text file opens with the UTF-8 byte-order mark (``_chunks`` drops it); a missing file does not
    (a built store is opened without its text)."""
    try:
        with open(path, "rb") as f:
            return f.read(3) == b"\xef\xbb\xbf"
    except OSError:
        return False


def _chunks(path: Path, size: int) -> Iterator[list[str]]:
    """Lines of a UTF-8 text file, ``size`` at a time; a line that is not UTF-8 is named with the fix. A
    byte-order mark opening the file (Windows editors write one) is dropped: kept, it would be part of the
    first sentence, and of the reference its translation is scored against."""
    chunk: list[str] = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                chunk.append(raw.decode("utf-8-sig" if lineno == 1 else "utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise ValueError(f"{path} line {lineno} is not UTF-8 ({e.reason} at byte {e.start}); "
                                 "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8).") from None
            if len(chunk) == size:
                yield chunk
                chunk = []
    yield chunk


def _flat(seqs: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    flat = np.fromiter((t for s in seqs for t in s), dtype=dtype, count=int(lengths.sum()))
    return flat, lengths


def encode_pairs(src_lines: list[str], tgt_lines: list[str], encode: Encoder, eos_id: int, max_len: int | None,
                 keep_all: bool) -> tuple[list[list[int]], list[list[int]], dict[str, int]]:
    """Encode aligned lines into (source ids, target ids + EOS).

    Training (``keep_all`` false): pairs with an empty side are dropped (nothing to learn from) and longer
    pairs are cut to ``max_len`` (target counted with its EOS, which is kept). Evaluation (``keep_all``):
    every line is kept whole, since dropping or cutting one would change what BLEU is measured on; an empty
    source becomes the single token EOS so the encoder has something to attend to.
    """
    stats = {"dropped_empty": 0, "truncated": 0, "empty_sources": 0}
    srcs, tgts = encode(src_lines), encode(tgt_lines)
    out_s, out_t = [], []
    for s, t in zip(srcs, tgts):
        if keep_all:
            if not s:
                s = [eos_id]
                stats["empty_sources"] += 1
        else:
            if not s or not t:
                stats["dropped_empty"] += 1
                continue
            if max_len is not None and (len(s) > max_len or len(t) + 1 > max_len):
                s, t = s[:max_len], t[: max_len - 1]
                stats["truncated"] += 1
        out_s.append(s)
        out_t.append(list(t) + [eos_id])
    return out_s, out_t, stats


def build_store(
    path: str | os.PathLike, src_file: str | os.PathLike, tgt_file: str | os.PathLike, encoding: StoreEncoding,
    max_len: int | None = None, keep_all: bool = False, chunk_lines: int = CHUNK_LINES,
    log: Callable[[str], None] = print,
) -> PairStore:
    """Encode ``src_file`` / ``tgt_file`` (aligned, one line each) into the store at ``path`` with ``encoding``
    and open it.

    An existing store built with the same tokenizer and options is opened as it is. Chunks are encoded one
    after another (sentencepiece spreads each over every core) and written to ``<path>.partial/`` as they
    finish, so a killed build resumes at the first missing chunk; the store appears only when complete.
    """
    encode, eos_id, vocab_size = encoding.encode, encoding.eos_id, encoding.vocab_size
    path = Path(path)
    options = {"tokenizer": encoding.tokenizer_hash, "max_len": max_len, "keep_all": keep_all, "format": FORMAT}
    if starts_with_bom(src_file) or starts_with_bom(tgt_file):
        # Only here: a store built before the mark was dropped is rebuilt, every other store stays valid.
        options["bom_dropped"] = True
    if (path / "manifest.json").is_file():
        old = json.loads((path / "manifest.json").read_text())
        if all(old.get(k) == v for k, v in options.items()):
            store = open_intact(path, log)
            if store is not None:
                return store
        else:
            shutil.rmtree(path)  # another tokenizer, options or format: rebuilt, never read as this one
    src_file, tgt_file = Path(src_file), Path(tgt_file)
    n_src, n_tgt = count_lines(src_file), count_lines(tgt_file)
    if n_src != n_tgt:
        raise ValueError(f"{src_file} has {n_src} lines but {tgt_file} has {n_tgt}; they must align line by line.")
    partial = _partial_folder(path, options)
    dtype = _token_dtype(vocab_size)
    n_chunks = 0
    for src_chunk, tgt_chunk in zip(_chunks(src_file, chunk_lines), _chunks(tgt_file, chunk_lines)):
        done = partial / f"chunk{n_chunks:05d}.npz"
        if src_chunk and not done.is_file():
            _write_chunk(done, *encode_pairs(src_chunk, tgt_chunk, encode, eos_id, max_len, keep_all), dtype)
        n_chunks += bool(src_chunk)
    staging = _staging(path)
    kept, stats = _join_chunks(partial, n_chunks, staging)
    manifest = {**options, "dtype": np.dtype(dtype).name, "lines": kept, "source_lines": n_src,
                "src_file": str(src_file), "tgt_file": str(tgt_file), **stats}
    if not _publish(staging, path, manifest):
        return PairStore(path)
    shutil.rmtree(partial, ignore_errors=True)
    notes = [f"{stats[k]} {k.replace('_', ' ')}" for k in ("truncated", "dropped_empty", "empty_sources") if stats[k]]
    log(f"token store {path.name}: {kept} of {n_src} lines" + (f" ({', '.join(notes)})" if notes else ""))
    return PairStore(path)


def _partial_folder(path: Path, options: dict[str, Any]) -> Path:
    """``<path>.partial/``, where a build's finished chunks wait: kept when a killed build of the same options
    left it, emptied when other options did."""
    partial = path.with_name(path.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    meta = partial / "options.json"
    if meta.is_file() and json.loads(meta.read_text()) != options:
        shutil.rmtree(partial)
        partial.mkdir(parents=True)
    meta.write_text(json.dumps(options))
    return partial


def _write_chunk(done: Path, s: list[list[int]], t: list[list[int]], st: dict[str, int], dtype) -> None:
    """One encoded chunk (its pairs and their statistics) as ``done``, written atomically."""
    (s_flat, s_len), (t_flat, t_len) = _flat(s, dtype), _flat(t, dtype)
    tmp = done.with_name(f"{done.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        np.savez(f, src=s_flat, src_len=s_len, tgt=t_flat, tgt_len=t_len,
                 stats=np.array([st["dropped_empty"], st["truncated"], st["empty_sources"]]))
    os.replace(tmp, done)


def _join_chunks(partial: Path, n_chunks: int, staging: Path) -> tuple[int, dict[str, int]]:
    """Concatenate the chunks into the token files and their offset indexes in ``staging``; returns the number
    of pairs kept and the summed statistics."""
    stats = {"dropped_empty": 0, "truncated": 0, "empty_sources": 0}
    offsets = {"src": [np.zeros(1, np.int64)], "tgt": [np.zeros(1, np.int64)]}
    ends = {"src": 0, "tgt": 0}
    with open(staging / "src.bin", "wb") as fs, open(staging / "tgt.bin", "wb") as ft:
        files = {"src": fs, "tgt": ft}
        for c in range(n_chunks):
            with np.load(partial / f"chunk{c:05d}.npz") as z:
                for side in ("src", "tgt"):
                    files[side].write(z[side].tobytes())
                    offsets[side].append(ends[side] + np.cumsum(z[f"{side}_len"]))
                    ends[side] += int(z[f"{side}_len"].sum())
                for k, v in zip(("dropped_empty", "truncated", "empty_sources"), z["stats"].tolist()):
                    stats[k] += v
    for side in ("src", "tgt"):
        _write_index(staging, side, np.concatenate(offsets[side]))
    return sum(len(o) for o in offsets["src"]) - 1, stats  # the offsets start with one 0


def write_store(path: str | os.PathLike, pairs: Iterator[tuple[np.ndarray, np.ndarray]], vocab_size: int,
                info: dict[str, Any]) -> PairStore:
    """A store at ``path`` from (source ids, target ids) pairs streamed in order (decoded training targets),
    written to a staging folder and renamed into place whole; ``info`` goes into the manifest."""
    path = Path(path)
    dtype = _token_dtype(vocab_size)
    staging = _staging(path)
    ends, n = {"src": [0], "tgt": [0]}, 0
    with open(staging / "src.bin", "wb") as fs, open(staging / "tgt.bin", "wb") as ft:
        for s, t in pairs:
            fs.write(np.asarray(s, dtype=dtype).tobytes())
            ft.write(np.asarray(t, dtype=dtype).tobytes())
            ends["src"].append(ends["src"][-1] + len(s))
            ends["tgt"].append(ends["tgt"][-1] + len(t))
            n += 1
    for side in ("src", "tgt"):
        _write_index(staging, side, np.asarray(ends[side]))
    _publish(staging, path, {"format": FORMAT, "dtype": np.dtype(dtype).name, "lines": n, **info})
    return PairStore(path)


def _token_dtype(vocab_size: int) -> type:
    """Two bytes per token when the vocabulary fits, else four."""
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32


def _staging(path: Path) -> Path:
    """An empty folder of this process beside ``path``, where a store is written before it is published."""
    staging = path.with_name(f"{path.name}.staging{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _write_index(staging: Path, side: str, offsets: np.ndarray) -> None:
    """A side's int64 offsets (line i is tokens[idx[i]:idx[i + 1]]) and the int32 lengths batching reads."""
    idx = offsets.astype(np.int64)
    idx.tofile(staging / f"{side}.idx")
    np.diff(idx).astype(np.int32).tofile(staging / f"{side}.len")


def _publish(staging: Path, path: Path, manifest: dict[str, Any]) -> bool:
    """Write the manifest (with the files' sizes and the index files' digests that ``check_store`` checks) and
    rename the staging folder to ``path``: the store appears whole, or not at all. False if another process (a
    rank, a parallel job) published the same store first: theirs is used."""
    manifest = {**manifest, "files": {f.name: f.stat().st_size for f in sorted(staging.iterdir())},
                "index_sha256": {name: file_digest(staging / name) for name in INDEX_FILES}}
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
    try:
        os.replace(staging, path)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False
    return True
