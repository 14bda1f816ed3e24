"""The Debian English–German corpus: packages → aligned documents → clean pairs → splits held out by document.

``prepare_debian`` is what the ``debian`` task source calls. It downloads and unpacks the pinned packages of
the chosen sources (``archive``), lets each source's extractor align its documents (cached per source and
package versions, so a killed build resumes), cleans and deduplicates the pairs (``clean``), and writes
``{train,dev,test}.{src,tgt}`` plus the ding test set (``test_ding.*``, the out-of-domain test every model of
this corpus is also scored on) and a ``manifest.json`` with every package's version and sha256 and the hash
of each output file.

Held out by document, not by line: interface strings repeat almost verbatim across catalogues, so a random
split would leak. Test is drawn from the Debian Administrator's Handbook and dev from the Debian Reference;
neither book's other pairs are used at all, and no pair whose English side is a test, dev or ding-test
sentence stays in training wherever else it occurs.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from corpora.debian import ArchiveError, DebianOptions
from corpora.debian import sources as _sources  # noqa: F401  (registers every source)
from corpora.debian.archive import DISK_NEEDED_GB, Archive, DebInfo, check_disk, sha256_file
from corpora.debian.clean import Pair, clean_pairs
from corpora.debian.mirror import RELEASE, MirrorArchive, open_archive
from corpora.debian.sources.base import SOURCES, Document, members_to_unpack
from corpora.ding import prepare_ding
from corpora.layout import SPLITS, atomic_write_lines, check_direction, count_lines

TEST_DOCS = "debian-handbook/"
DEV_DOCS = "debian-reference/"
#: The committed manifest of the reference build: a build of the same options is compared against it.
REFERENCE_MANIFEST = Path(__file__).resolve().parents[2] / "results" / "data" / "debian_manifest.json"
#: Bumped when extraction or cleaning changes the corpus made from the same packages (2: the sentence splitter
#: knows abbreviations and German ordinals; more packages).
FORMAT_VERSION = 2
#: Bumped when an extractor changes what it yields from the same packages (keys the per-source cache; 2: gettext
#: takes freeciv's "?qualifier:" prefixes off).
EXTRACT_VERSION = 2
#: The order sources are aligned in when several run at once: the slowest first.
_ALIGN_COST_ORDER = ("docbooks", "gnome_help", "kde_doc", "libreoffice_help", "manpages", "lyx", "gettext", "ddtp",
                     "mozilla", "qt")


@dataclass(frozen=True)
class HeldOut:
    """What the task asks of the corpus beside its options (``DebianOptions``): the direction its files are
    written in, the sizes of the held-out sets and the seed that samples them (``task.direction``, ``task.n_dev``,
    ``task.n_test``)."""

    direction: str = "en-de"
    n_dev: int = 500
    n_test: int = 1000
    seed: int = 0

    def validate(self) -> None:
        check_direction(self.direction)
        if self.n_dev < 1 or self.n_test < 1:
            raise ValueError(f"task.n_dev and task.n_test must be >= 1 (got {self.n_dev} and {self.n_test}).")


def determining(opts: DebianOptions, held: HeldOut) -> dict:
    """What determines the corpus: the folder's name hashes it (``corpus_key``), its manifest records it."""
    return {"direction": held.direction, "sources": list(opts.chosen), "kinds": list(opts.kinds),
            "min_words": opts.min_words, "n_dev": held.n_dev, "n_test": held.n_test, "seed": held.seed}


def corpus_key(opts: DebianOptions, held: HeldOut) -> str:
    """The corpus folder's key: what determines it but the direction (one build serves both), and the format."""
    blob = json.dumps({**determining(opts, held), "direction": None, "format": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


@dataclass
class BuildReport:
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    clean: Counter[str] = field(default_factory=Counter)
    held_out_dropped: int = 0
    duplicates: int = 0


def corpus_folder(cache_dir: Path, opts: DebianOptions, held: HeldOut) -> Path:
    return Path(cache_dir) / f"debian_{held.direction.replace('-', '_')}_{corpus_key(opts, held)}"


# ---- aligning each source (cached per source and package versions) ---------------------------------------


def _aligned_path(archive: Archive, name: str, infos: dict[str, DebInfo], extra: dict[str, str]) -> Path:
    """Where a source's aligned documents are cached: keyed by the extractor version and the exact .deb files."""
    src = SOURCES[name]
    key_blob = json.dumps({"format": EXTRACT_VERSION, "source": name, "extra": extra,
                           "debs": sorted(infos[p].filename for p in src.packages() if p in infos)})
    return archive.root / "aligned" / f"{name}_{hashlib.sha1(key_blob.encode()).hexdigest()[:12]}.jsonl"


def _align_source(name: str, roots: dict[str, Path], path: Path) -> float:
    """Run one source's extractor and write its documents to ``path`` (renamed into place when complete);
    the seconds it took."""
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_lines(path, (json.dumps({"id": d.doc_id, "kind": d.kind, "pairs": d.pairs}, ensure_ascii=False)
                              for d in SOURCES[name].extract(roots)))
    return time.perf_counter() - t0


def _read_aligned(path: Path) -> Iterator[Document]:
    with open(path, encoding="utf-8") as f:
        for d in map(json.loads, f):
            yield Document(d["id"], [tuple(p) for p in d["pairs"]], d["kind"])


class _Aligner:
    """Aligns the sources ``todo`` into their cache files, ``workers`` at a time in forked processes (the
    slowest first), while the caller reads and cleans the sources that are done, in corpus order."""

    def __init__(self, todo: Sequence[str], roots: dict[str, Path], paths: dict[str, Path], workers: int,
                 progress: bool) -> None:
        self.todo, self.roots, self.paths = set(todo), roots, paths
        self.seconds: dict[str, float] = {}
        self.bar = tqdm(total=len(self.todo), desc="align", unit="source", disable=not progress or not self.todo)
        self.futures: dict[str, Future[float]] = {}
        self.pool: ProcessPoolExecutor | None = None
        if len(self.todo) > 1 and workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            order = sorted(self.todo, key=lambda n: _ALIGN_COST_ORDER.index(n) if n in _ALIGN_COST_ORDER else -1)
            ctx = multiprocessing.get_context("fork")  # the workers inherit the registered sources as they are
            self.pool = ProcessPoolExecutor(max_workers=min(workers, len(self.todo)), mp_context=ctx)
            self.futures = {n: self.pool.submit(_align_source, n, roots, paths[n]) for n in order}

    def wait(self, name: str) -> Path:
        """The source's cache file, once it is complete (aligned here when no worker does it)."""
        if name in self.todo and name not in self.seconds:
            self.bar.set_postfix_str(name)
            future = self.futures.get(name)
            self.seconds[name] = round(future.result() if future else _align_source(name, self.roots,
                                                                                     self.paths[name]), 1)
            self.bar.update(1)
        return self.paths[name]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.bar.close()


def worker_count() -> int:
    """Processes to unpack and align with: the cores this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def _package_of(doc_id: str) -> str:
    return doc_id.split("/", 1)[0]


def _sample(pairs: list[Pair], n: int, seed: int) -> list[Pair]:
    order = sorted(set(pairs))
    random.Random(seed).shuffle(order)
    return order[:n]


def _split(docs: Iterator[tuple[str, Document]], opts: DebianOptions, sizes: HeldOut, ding_test_en: set[str],
           report: BuildReport) -> tuple[list[Pair], list[Pair], list[Pair], dict[str, list]]:
    """(train, dev, test) pairs and per-package [pairs, hash] of training (for drift reports)."""
    held: dict[str, list[Pair]] = {"test": [], "dev": []}
    train_docs: list[tuple[str, list[Pair]]] = []
    for name, doc in docs:
        stats = report.sources.setdefault(name, Counter())
        stats["documents"] += 1
        stats["raw_pairs"] += len(doc.pairs)
        pairs = [p for p in clean_pairs(doc.pairs, report.clean) if len(p[0].split()) >= opts.min_words]
        stats["clean_pairs"] += len(pairs)
        if doc.doc_id.startswith(TEST_DOCS):
            held["test"] += pairs
        elif doc.doc_id.startswith(DEV_DOCS):
            held["dev"] += pairs
        elif doc.kind in opts.kinds:
            train_docs.append((doc.doc_id, pairs))
    test = _sample(held["test"], sizes.n_test, sizes.seed)
    test_en = {e for e, _ in test}
    dev_pool = [p for p in held["dev"] if p[0] not in test_en]
    dev = _sample(dev_pool, sizes.n_dev, sizes.seed)
    blocked = {e for e, _ in held["test"]} | {e for e, _ in held["dev"]} | ding_test_en
    seen: set[Pair] = set()
    train: list[Pair] = []
    per_pkg: dict[str, hashlib._Hash] = {}
    per_pkg_n: Counter[str] = Counter()
    for doc_id, pairs in train_docs:
        for pair in pairs:
            if pair[0] in blocked:
                report.held_out_dropped += 1
            elif pair in seen:
                report.duplicates += 1
            else:
                seen.add(pair)
                train.append(pair)
                pkg = _package_of(doc_id)
                per_pkg.setdefault(pkg, hashlib.sha1()).update(f"{pair[0]}\t{pair[1]}\n".encode())
                per_pkg_n[pkg] += 1
    return train, dev, test, {p: [per_pkg_n[p], h.hexdigest()[:12]] for p, h in sorted(per_pkg.items())}


# ---- the build -------------------------------------------------------------------------------------------


def _ding_test(cache_dir: Path) -> tuple[list[str], list[str]] | None:
    """The ding test set (English, German) if the ding corpus can be prepared here, else None."""
    try:
        folder = prepare_ding(Path(cache_dir))
    except FileNotFoundError:
        return None
    read = (folder / "test.src").read_text(encoding="utf-8").splitlines()
    return read, (folder / "test.tgt").read_text(encoding="utf-8").splitlines()


def _write_splits(folder: Path, direction: str, splits: dict[str, Sequence[Pair]]) -> dict[str, str]:
    en_first = check_direction(direction)[0] == "en"
    hashes = {}
    for split, pairs in splits.items():
        for side in ("src", "tgt"):
            path = folder / f"{split}.{side}"
            idx = 0 if (side == "src") == en_first else 1
            atomic_write_lines(path, (p[idx] for p in pairs))
            hashes[path.name] = sha256_file(path)
    return hashes


def _corpus_hash(file_hashes: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}={v}\n" for k, v in sorted(file_hashes.items())).encode()).hexdigest()[:16]


def corpus_hash(folder: Path) -> str:
    """The hash of a built corpus folder's split files, as its manifest records it."""
    return json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))["corpus_hash"]


def prepare_debian(cache_dir: Path, opts: DebianOptions, held: HeldOut = HeldOut(), progress: bool = True) -> Path:
    """Build (or reuse) the corpus folder for ``opts`` and ``held`` under ``cache_dir`` and return it (the packages
    from ``opts.deb_dir``, or fetched as ``opts.fetch`` says: ``corpora.debian.mirror.open_archive``)."""
    opts.validate()
    held.validate()
    folder = corpus_folder(cache_dir, opts, held)
    if _reuse(folder, held):
        return folder
    t0 = time.perf_counter()
    fetched = _fetch(cache_dir, opts, progress)
    t_extract = time.perf_counter()
    splits, per_pkg, report, align_seconds = _align_and_split(cache_dir, opts, held, fetched, progress)
    t_align = time.perf_counter()
    hashes = _write_splits(folder, held.direction, splits)
    seconds = {"download": round(fetched.fetched_at - t0, 1),
               "extract_after_download": round(t_extract - fetched.fetched_at, 1),
               "align_clean": round(t_align - t_extract, 1), "write": round(time.perf_counter() - t_align, 1),
               "workers": fetched.workers, "align_per_source": align_seconds}
    manifest = _manifest(determining(opts, held), splits, hashes, report, per_pkg, fetched, seconds)
    _write_manifest(folder, manifest)
    words = manifest["english_words"]
    print(f"debian {held.direction}: {len(splits['train'])} train / {len(splits['dev'])} dev / "
          f"{len(splits['test'])} test pairs ({words['train']:,} English words in train) in {folder} "
          f"[{time.perf_counter() - t0:.0f} s]")
    print(drift_report(manifest))
    return folder


def _reuse(folder: Path, held: HeldOut) -> bool:
    """Whether ``folder`` holds a complete build (the manifest is written last), which is then reused."""
    if not ((folder / "manifest.json").is_file() and all((folder / f"{s}.{x}").is_file()
                                                          for s in SPLITS for x in ("src", "tgt"))):
        return False
    # Every split file against the digest the build recorded: a damaged corpus is built again, never read.
    recorded = json.loads((folder / "manifest.json").read_text(encoding="utf-8")).get("files", {})
    damaged = [name for name, digest in recorded.items() if sha256_file(folder / name) != digest]
    if damaged:
        print(f"note: the corpus in {folder} is damaged ({', '.join(damaged)} differ from its manifest): "
              "building it again.")
        return False
    counts = {s: count_lines(folder / f"{s}.src") for s in SPLITS}
    print(f"debian {held.direction}: reusing {folder} (train {counts['train']}, dev {counts['dev']}, "
          f"test {counts['test']})")
    return True


@dataclass
class _Fetched:
    """The packages of a build, downloaded and unpacked."""

    archive: Archive
    infos: dict[str, DebInfo]
    roots: dict[str, Path]  # package (and "ddtp": the Translation indexes) -> its unpacked folder
    extra: dict[str, str]  # what identifies the Translation indexes (ddtp's cache key)
    missing: list[str]  # pinned packages this release does not have
    workers: int
    fetched_at: float  # perf_counter when the index and the downloads were done (unpacking ran alongside)


def _fetch(cache_dir: Path, opts: DebianOptions, progress: bool) -> _Fetched:
    """Download the pinned packages of the chosen sources (or take them from ``opts.deb_dir``) and unpack what the
    extractors read, after checking the disk; the Translation indexes too when ddtp is chosen. ``opts.fetch``: how
    (``corpora.debian.mirror.open_archive``)."""
    deb_dir = Path(opts.deb_dir).expanduser() if opts.deb_dir else None
    archive = open_archive(Path(cache_dir) / "debian", deb_dir=deb_dir, fetch=opts.fetch, progress=progress)
    if isinstance(archive, MirrorArchive):
        print(f"debian: fetching Debian {RELEASE}'s packages over HTTP from {archive.suites[0][0]} (no apt)")
    archive.update()
    wanted_names = sorted({p for s in opts.chosen for p in SOURCES[s].packages()})
    available = archive.candidates(wanted_names)
    missing = [p for p in wanted_names if p not in available]
    if missing:
        print(f"debian: {len(missing)} pinned package(s) are not in this release and are skipped: "
              f"{', '.join(missing[:12])}{' ...' if len(missing) > 12 else ''}")
    todo_bytes = sum(size for p, (_, size) in available.items() if archive._complete_deb(p) is None)
    check_disk(archive.root, min(DISK_NEEDED_GB, 1.3 * todo_bytes / 1e9 + 0.3))
    workers = worker_count()
    # each package is unpacked (only the files its extractors read) as soon as it is downloaded
    t_fetch = time.perf_counter()
    infos, roots = archive.download_and_extract(available, members_to_unpack(available, SOURCES.values()), workers)
    fetched_at = t_fetch + archive.download_seconds
    extra: dict[str, str] = {}
    if "ddtp" in opts.chosen:
        i18n, extra = archive.translations()
        roots = {**roots, "ddtp": i18n}
    return _Fetched(archive, infos, roots, extra, missing, workers, fetched_at)


def _align_and_split(
    cache_dir: Path, opts: DebianOptions, held: HeldOut, fetched: _Fetched, progress: bool
) -> tuple[dict[str, Sequence[Pair]], dict[str, list], BuildReport, dict[str, float]]:
    """The splits (with the ding test set when it can be prepared), the per-package training hashes, the
    build report and each aligned source's seconds: sources not cached yet are aligned while the ones that
    are done are cleaned and split, in corpus order."""
    paths = {name: _aligned_path(fetched.archive, name, fetched.infos, fetched.extra if name == "ddtp" else {})
             for name in opts.chosen}
    report = BuildReport()
    ding = _ding_test(cache_dir)
    aligner = _Aligner([n for n in opts.chosen if not paths[n].is_file()], fetched.roots, paths, fetched.workers,
                       progress)
    try:

        def documents() -> Iterator[tuple[str, Document]]:
            for name in opts.chosen:  # cleaned in corpus order while later sources still align
                for doc in _read_aligned(aligner.wait(name)):
                    yield name, doc

        train, dev, test, per_pkg = _split(documents(), opts, held, set(ding[0]) if ding else set(), report)
    finally:
        aligner.close()
    if len(test) < held.n_test:
        raise ArchiveError(f"the held-out test book gave {len(test)} pairs, fewer than task.n_test={held.n_test}: "
                           "lower task.n_test, or check that debian-handbook was downloaded.")
    splits: dict[str, Sequence[Pair]] = {"train": train, "dev": dev, "test": test}
    if ding:
        splits["test_ding"] = list(zip(*ding))
    return splits, per_pkg, report, aligner.seconds


def _manifest(options: dict, splits: dict[str, Sequence[Pair]], hashes: dict[str, str], report: BuildReport,
              per_pkg: dict[str, list], fetched: _Fetched, seconds: dict) -> dict:
    """What ``manifest.json`` records: options, hashes (the corpus's without the ding test set, and the held-out
    sets' on their own), counts, what cleaning dropped, every package's version and sha256, and timings."""
    return {
        "options": options,
        "format": FORMAT_VERSION,
        "corpus_hash": _corpus_hash({k: v for k, v in hashes.items() if not k.startswith("test_ding")}),
        "held_out_hash": _corpus_hash({k: v for k, v in hashes.items() if k.startswith(("dev.", "test."))}),
        "files": hashes,
        "counts": {s: len(p) for s, p in splits.items()},
        "english_words": {s: sum(len(p[0].split()) for p in ps) for s, ps in splits.items()},
        "sources": {k: dict(v) for k, v in report.sources.items()},
        "clean": dict(report.clean),
        "held_out_dropped_from_train": report.held_out_dropped,
        "duplicates": report.duplicates,
        "packages": {p: {"version": i.version, "deb": i.filename, "sha256": i.sha256}
                     for p, i in fetched.infos.items()},
        "missing_packages": fetched.missing,
        "indexes": fetched.extra,
        "train_by_package": per_pkg,
        "seconds": seconds,
    }


def _write_manifest(folder: Path, manifest: dict) -> None:
    """Written last and renamed into place: a folder with a manifest is a complete build."""
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, folder / "manifest.json")


def drift_report(manifest: dict, reference: Path = REFERENCE_MANIFEST) -> str:
    """One line comparing a build with the committed reference build of the same options."""
    if not reference.is_file():
        return f"debian: no reference manifest at {reference}; corpus hash {manifest['corpus_hash']}"
    ref = json.loads(reference.read_text(encoding="utf-8"))
    if ref.get("options") != json.loads(json.dumps(manifest["options"])):  # as JSON: tuples read back as lists
        return f"debian: other options than the reference build; corpus hash {manifest['corpus_hash']}"
    if ref["corpus_hash"] == manifest["corpus_hash"]:
        return f"debian: corpus hash {manifest['corpus_hash']}, identical to the reference build"
    changed = [p for p in manifest["packages"] if ref["packages"].get(p, {}).get("sha256")
               != manifest["packages"][p]["sha256"]]
    a, b = ref.get("train_by_package", {}), manifest["train_by_package"]
    differ = sum(max(a.get(p, [0])[0], b.get(p, [0])[0]) for p in set(a) | set(b) if a.get(p) != b.get(p))
    held = "the same" if ref.get("held_out_hash") == manifest["held_out_hash"] else "CHANGED"
    return (f"debian: corpus hash {manifest['corpus_hash']} differs from the reference build "
            f"{ref['corpus_hash']}: {len(changed)} package(s) changed ({', '.join(changed[:6])}), about {differ} "
            f"training pairs in packages whose pairs differ; dev/test {held} (a shipped model is scored on the "
            "dev/test it records, see docs/data.md)")
