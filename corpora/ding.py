"""The embedded corpus: example sentences of the ding German-English dictionary.

The dictionary is Debian's ``trans-de-en`` package (GPL-2+): small (~15k sentence pairs) but real, freely
installable without registration, and good enough for the relative measurements of blockwise parallel
decoding (mean accepted block size, speed-up vs. BLEU) on a CPU. This module finds (or fetches) the
dictionary, extracts clean sentence pairs (and optionally phrase pairs), splits them leak-free and writes
the ``{train,dev,test}.{src,tgt}`` folder every translation corpus is prepared into.
"""

from __future__ import annotations

import gzip
import os
import random
import re
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corpora.layout import (
    SPLITS,
    atomic_write_bytes,
    atomic_write_lines,
    check_direction,
    count_lines,
    split_files,
)

Pair = tuple[str, str]

DING_SYSTEM_PATH = Path("/usr/share/trans/de-en")
DING_URL = "https://ftp.tu-chemnitz.de/pub/Local/urz/ding/de-en/de-en.txt.gz"
DING_DEB_PACKAGE = "trans-de-en"

# Where earlier runs of the fetchers leave the dictionary inside cache_dir.
_CACHED_EXTRACT = Path("pkg") / "usr" / "share" / "trans" / "de-en"
_CACHED_DOWNLOAD = Path("de-en.txt")

# ------------------------------------------------------------------------------------------------------------
# Finding the ding dictionary
# ------------------------------------------------------------------------------------------------------------

Fetcher = Callable[[Path], Path | None]


def _run(cmd: list[str], cwd: Path, timeout: float) -> bool:
    """Run a command quietly; False (never an exception) when it is missing, fails or hangs."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def fetch_ding_with_apt(cache_dir: Path) -> Path | None:
    """Download and unpack Debian's ``trans-de-en`` into ``cache_dir/pkg`` without installing it.

    ``apt-get download`` and ``dpkg-deb -x`` need no root, so this works on clusters where the package
    cannot be installed. Only when the download fails *and* we are root is the package index refreshed
    (fresh containers ship without one), because ``apt-get update`` needs root and is slow.
    """
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return None
    cache_dir.mkdir(parents=True, exist_ok=True)
    ok = _run(["apt-get", "download", DING_DEB_PACKAGE], cache_dir, timeout=600)
    if not ok and hasattr(os, "geteuid") and os.geteuid() == 0:
        if _run(["apt-get", "update"], cache_dir, timeout=600):
            _run(["apt-get", "download", DING_DEB_PACKAGE], cache_dir, timeout=600)
    debs = sorted(cache_dir.glob(f"{DING_DEB_PACKAGE}_*.deb"))
    if not debs:  # a .deb only appears once complete: apt downloads into partial/ first
        return None
    # Unpack next to the final place and rename, so a crash never leaves a partial extract that a later
    # run would take for a complete one.
    tmp = Path(tempfile.mkdtemp(prefix="pkg.tmp", dir=cache_dir))
    if not _run(["dpkg-deb", "-x", str(debs[-1]), str(tmp)], cache_dir, timeout=600):
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    target = cache_dir / "pkg"
    if (target / _CACHED_EXTRACT.relative_to("pkg")).is_file():  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    for deb in debs:
        deb.unlink(missing_ok=True)
    path = cache_dir / _CACHED_EXTRACT
    return path if path.is_file() else None


def fetch_ding_from_mirror(cache_dir: Path) -> Path | None:
    """Debian bookworm's ``trans-de-en`` over HTTP from deb.debian.org, unpacked without dpkg where it is
    missing (``corpora.debian.mirror``): the same file as the apt path on a machine without apt, where the
    upstream site may serve a newer dictionary than the one the shipped ding models were trained on."""
    from corpora.debian import ArchiveError
    from corpora.debian.mirror import MirrorArchive

    member = "./" + DING_SYSTEM_PATH.as_posix().lstrip("/")
    try:
        archive = MirrorArchive(Path(cache_dir) / "mirror", progress=False)
        archive.update()
        wanted = archive.candidates([DING_DEB_PACKAGE])
        if not wanted:
            return None
        _, roots = archive.download_and_extract(wanted, {DING_DEB_PACKAGE: (member,)})
    except ArchiveError:
        return None
    got = roots[DING_DEB_PACKAGE] / DING_SYSTEM_PATH.relative_to("/")
    if not got.is_file():
        return None
    target = Path(cache_dir) / _CACHED_EXTRACT
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, got.read_bytes())
    shutil.rmtree(Path(cache_dir) / "mirror", ignore_errors=True)  # 16 MB of indexes and the package
    return target


def fetch_ding_from_upstream(cache_dir: Path) -> Path | None:
    """Download the dictionary from its upstream site (TU Chemnitz); same format as the Debian file."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / _CACHED_DOWNLOAD
    try:
        with urllib.request.urlopen(DING_URL, timeout=60) as resp:
            data = gzip.decompress(resp.read())
    except Exception:  # offline, proxy, TLS, HTTP error, corrupt gzip: all mean "not available here"
        return None
    atomic_write_bytes(target, data)
    return target


def default_fetchers() -> tuple[Fetcher, ...]:
    """apt first on Debian bookworm, the release the shipped ding models were trained on; on any other machine
    bookworm's package over HTTP first, since another release's apt may serve another dictionary (which the
    shipped models' fingerprint would refuse). The upstream site last: it serves its newest dictionary."""
    from corpora.debian.mirror import system_is_reference_release

    if system_is_reference_release():
        return fetch_ding_with_apt, fetch_ding_from_mirror, fetch_ding_from_upstream
    return fetch_ding_from_mirror, fetch_ding_with_apt, fetch_ding_from_upstream


def find_ding_file(
    path: str | Path | None,
    cache_dir: Path,
    system_paths: Sequence[Path] = (DING_SYSTEM_PATH,),
    fetchers: Sequence[Fetcher] | None = None,
) -> Path:
    """Locate the ding ``de-en`` dictionary, fetching it into ``cache_dir`` if needed.

    Order: ``path`` (an explicit path that does not exist is an error, not something to paper over with a
    download); the installed Debian package; an earlier extract/download in ``cache_dir``; each fetcher
    (default, ``default_fetchers``: ``apt-get download trans-de-en`` and Debian's package over HTTP, in the order
    that gets bookworm's, then the upstream URL).
    ``system_paths`` and ``fetchers`` exist so tests can run this without touching apt or the network.
    """
    if path is not None:
        p = Path(path).expanduser()
        if p.is_file():
            return p
        raise FileNotFoundError(
            f"task.corpora.ding.path={p} does not exist: point it at the ding de-en dictionary file "
            f"(Debian's {DING_DEB_PACKAGE} installs it as {DING_SYSTEM_PATH})"
        )
    cache_dir = Path(cache_dir)
    candidates = [*system_paths, cache_dir / _CACHED_EXTRACT, cache_dir / _CACHED_DOWNLOAD]
    for cand in candidates:
        if cand.is_file():
            return cand
    for fetch in default_fetchers() if fetchers is None else fetchers:
        got = fetch(cache_dir)
        if got is not None and got.is_file():
            return got
    raise FileNotFoundError(
        f"The ding German-English dictionary was not found (tried {', '.join(str(c) for c in candidates)}, "
        f"apt-get download {DING_DEB_PACKAGE}, deb.debian.org and {DING_URL}): install Debian's {DING_DEB_PACKAGE} "
        f"(apt-get install {DING_DEB_PACKAGE}) or pass task.corpora.ding.path=/path/to/de-en."
    )


# ------------------------------------------------------------------------------------------------------------
# Extracting sentence pairs
# ------------------------------------------------------------------------------------------------------------

_WS = re.compile(r"\s+")
# Dictionary markup: annotations ({f}, [coll.], (sth.)), slash or semicolon alternatives, swung-dash
# placeholders. A "sentence" carrying any of it is not a translation pair a model should learn to emit.
_MARKUP = re.compile(r"[()\[\]{}~/;]")
_ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\)")
_SENTENCE_END = (".", "!", "?")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _is_sentence(text: str) -> bool:
    """Example sentences start upper-case, end in . ! or ? and have >= 3 words; headwords don't."""
    return len(text.split()) >= 3 and text[0].isupper() and text.endswith(_SENTENCE_END)


def _strip_markup(text: str) -> str:
    """A phrase without annotations, keeping only its first ``;`` synonym (the main translation)."""
    prev = None
    while prev != text:  # repeat for nested annotations such as "(zu etw. (sth.))"
        prev, text = text, _ANNOTATION.sub(" ", text)
    return _norm(text.split(";")[0])


@dataclass
class DingCorpus:
    """Everything extracted from one dictionary file, with counts for the one-line summaries."""

    sentences: list[Pair] = field(default_factory=list)
    phrases: list[Pair] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)


def parse_ding(path: str | Path, include_phrases: bool = False) -> DingCorpus:
    """Parse a ding file into clean (en, de) sentence pairs and, optionally, (en, de) phrase pairs.

    A line is ``German alternatives :: English alternatives`` with alternatives separated by `` | `` and
    aligned by position; lines whose two sides have different alternative counts can't be aligned and are
    skipped whole. Sentence pairs are both-sides sentence-like and markup-free; every other aligned pair is
    a phrase (after stripping annotations), useful extra training signal but never evaluation data.
    Deduplication keeps the first occurrence so the result follows file order.
    """
    corpus = DingCorpus()
    stats = {
        "lines": 0,
        "comment_lines": 0,
        "aligned_pairs": 0,
        "mismatched_lines": 0,
        "sentence_like": 0,
        "markup_dropped": 0,
        "duplicates": 0,
    }
    seen: set[Pair] = set()
    phrase_seen: set[Pair] = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stats["lines"] += 1
            line = line.rstrip("\n")
            if line.startswith("#") or " :: " not in line:
                stats["comment_lines"] += 1
                continue
            de_side, en_side = line.split(" :: ", 1)
            de_alts, en_alts = de_side.split(" | "), en_side.split(" | ")
            if len(de_alts) != len(en_alts):
                stats["mismatched_lines"] += 1
                continue
            for en_raw, de_raw in zip(en_alts, de_alts):
                en, de = _norm(en_raw), _norm(de_raw)
                if not en or not de:
                    continue
                stats["aligned_pairs"] += 1
                if _is_sentence(en) and _is_sentence(de):
                    stats["sentence_like"] += 1
                    if _MARKUP.search(en) or _MARKUP.search(de):
                        stats["markup_dropped"] += 1
                    elif (en, de) in seen:
                        stats["duplicates"] += 1
                        continue
                    else:
                        seen.add((en, de))
                        corpus.sentences.append((en, de))
                        continue
                if include_phrases:
                    pen, pde = _strip_markup(en), _strip_markup(de)
                    if pen and pde and not _MARKUP.search(pen + pde) and (pen, pde) not in phrase_seen:
                        phrase_seen.add((pen, pde))
                        corpus.phrases.append((pen, pde))
    corpus.phrases = [p for p in corpus.phrases if p not in seen]
    stats["sentences"] = len(corpus.sentences)
    stats["phrases"] = len(corpus.phrases)
    corpus.stats = stats
    return corpus


def extract_ding_pairs(path: str | Path, include_phrases: bool = False) -> list[Pair]:
    """Clean (en, de) example-sentence pairs of a ding file; with ``include_phrases`` the phrase pairs follow.

    Use :func:`parse_ding` to keep the two kinds apart (phrases must stay out of dev/test).
    """
    corpus = parse_ding(path, include_phrases=include_phrases)
    return corpus.sentences + corpus.phrases


def split_pairs(
    pairs: Sequence[Pair], n_dev: int = 500, n_test: int = 1000, seed: int = 0
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Deterministic (train, dev, test) split with no dev/test sentence leaking into train (or dev into test).

    Pairs are sorted before the seeded shuffle, so the split depends on the set of pairs, not on file order
    or on how the caller collected them. The dictionary repeats a sentence with different translations;
    train and test drop any pair sharing an English *or* German side with an earlier split, which makes the
    split leak-free in both directions (en-de and de-en share it) at the cost of a few dozen train pairs.
    """
    order = sorted(set(pairs))
    random.Random(seed).shuffle(order)
    dev: list[Pair] = []
    test: list[Pair] = []
    train: list[Pair] = []
    dev_sides: set[str] = set()
    for en, de in order:
        if len(dev) < n_dev:
            dev.append((en, de))
            dev_sides.update((en, de))
        elif len(test) < n_test:
            if en in dev_sides or de in dev_sides:
                continue
            test.append((en, de))
        else:
            train.append((en, de))
    held = dev_sides | {s for pair in test for s in pair}
    train = [(en, de) for en, de in train if en not in held and de not in held]
    return train, dev, test


#: Marks the source of a phrase pair (``tag_phrases``): the model learns that an untagged input is a sentence,
#: so the phrases' short outputs do not shorten its translations.
PHRASE_TAG = "<phrase>"


def ding_folder(cache_dir: Path, direction: str = "en-de", include_phrases: bool = False,
                tag_phrases: bool = False, sentence_repeat: int = 1) -> Path:
    """Where ``prepare_ding`` keeps the split corpus of these options."""
    name = f"ding_{direction}{'_phrases' if include_phrases else ''}{'_tagged' if tag_phrases else ''}"
    return Path(cache_dir) / (name + (f"_x{sentence_repeat}" if sentence_repeat > 1 else ""))


def prepare_ding(
    cache_dir: Path,
    ding_path: str | Path | None = None,
    direction: str = "en-de",
    include_phrases: bool = False,
    tag_phrases: bool = False,
    sentence_repeat: int = 1,
    n_dev: int = 500,
    n_test: int = 1000,
    seed: int = 0,
    fetchers: Sequence[Fetcher] | None = None,
    system_paths: Sequence[Path] = (DING_SYSTEM_PATH,),
) -> Path:
    """Build ``cache_dir/ding_<direction>[_phrases]/{train,dev,test}.{src,tgt}`` and return the folder.

    Existing complete folders are reused without reading the dictionary again. In multi-process (DDP)
    runs call this on rank 0 first and barrier: concurrent calls are safe (atomic writes) but wasteful.
    Phrase pairs only ever go to train, and never ones that share a side with a dev/test sentence; with
    ``tag_phrases`` their sources start with ``PHRASE_TAG``, and ``sentence_repeat`` repeats the training
    sentences so that they are not drowned by the 355k phrases.
    """
    src_lang, _ = check_direction(direction)
    cache_dir = Path(cache_dir)
    folder = ding_folder(cache_dir, direction, include_phrases, tag_phrases, sentence_repeat)
    files = split_files(folder)
    if all(f.is_file() for f in files):
        counts = {s: count_lines(folder / f"{s}.src") for s in SPLITS}
        print(
            f"ding {direction}: reusing {folder} (train {counts['train']}, dev {counts['dev']}, test {counts['test']})"
        )
        return folder
    path = find_ding_file(ding_path, cache_dir, system_paths=system_paths, fetchers=fetchers)
    corpus = parse_ding(path, include_phrases=include_phrases)
    train, dev, test = split_pairs(corpus.sentences, n_dev=n_dev, n_test=n_test, seed=seed)
    n_sent_train = len(train)
    if include_phrases:
        held = {s for pair in dev + test for s in pair}
        phrases = [(en, de) for en, de in corpus.phrases if en not in held and de not in held]
        if tag_phrases:  # on the source side, whichever language it is
            phrases = [(f"{PHRASE_TAG} {en}", de) if src_lang == "en" else (en, f"{PHRASE_TAG} {de}")
                       for en, de in phrases]
        train = train * sentence_repeat + phrases
    for split, split_pairs_ in zip(SPLITS, (train, dev, test)):
        en_de = src_lang == "en"
        atomic_write_lines(folder / f"{split}.src", (en if en_de else de for en, de in split_pairs_))
        atomic_write_lines(folder / f"{split}.tgt", (de if en_de else en for en, de in split_pairs_))
    st = corpus.stats
    phrases = (f" (x{sentence_repeat}) + {len(train) - n_sent_train * sentence_repeat} phrase pairs"
               f"{' (tagged)' if tag_phrases else ''}") if include_phrases else ""
    print(
        f"ding {direction}: {path} ({st['lines']} lines, {st['sentence_like']} sentence-like pairs, "
        f"{st['sentences']} clean) -> train {n_sent_train}{phrases}, dev {len(dev)}, test {len(test)} "
        f"in {folder}"
    )
    return folder


__all__ = [
    "DING_SYSTEM_PATH",
    "DING_URL",
    "DingCorpus",
    "PHRASE_TAG",
    "extract_ding_pairs",
    "fetch_ding_from_mirror",
    "fetch_ding_from_upstream",
    "fetch_ding_with_apt",
    "find_ding_file",
    "ding_folder",
    "parse_ding",
    "prepare_ding",
    "split_pairs",
]
