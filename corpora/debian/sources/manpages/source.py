"""The ``manpages`` source: which German pages there are, where their English originals lie, and the pairs.

``manpages-de`` ships German pages as ``usr/share/man/de/man<sec>/<name>.<sec>.gz``; the English page of
the same name and section is shipped by the program's own package (coreutils, systemd, manpages, ...).
Which package that is was looked up once in the archive's Contents index and pinned in
``packages/manpages_owners.tsv`` (page, section, package) and ``packages/manpages.txt``; where several
packages ship a page of that name (elogind and systemd, grub-legacy and grub2-common), the pinned one is
the package whose page the German translation aligns with. A page whose owner is missing from ``roots``
is looked for in every other root.
"""

from __future__ import annotations

import csv
import gzip
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from corpora.debian.sources.base import PACKAGE_LISTS, Document, Pair, Source, register
from corpora.debian.sources.manpages.align import align_blocks, drop_german_addenda
from corpora.debian.sources.manpages.roff import parse_roff

GERMAN_PACKAGE = "manpages-de"
OWNERS_FILE = PACKAGE_LISTS / "manpages_owners.tsv"
#: Generated indexes (one directive name per line): nothing to translate, and their runs misalign.
SKIP_PAGES = {"systemd.directives.7", "systemd.index.7"}


def read_page(path: Path) -> str:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def read_owners(path: Path = OWNERS_FILE) -> dict[tuple[str, str], str]:
    """(page name, section) -> the package pinned as shipping the English page."""
    owners: dict[tuple[str, str], str] = {}
    if not path.exists():
        return owners
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) >= 3 and not row[0].startswith("#"):
                owners[(row[0], row[1])] = row[2]
    return owners


def _english_page(roots: Mapping[str, Path], owner: str | None, name: str, sec: str) -> Path | None:
    candidates = [owner] if owner in roots else []
    candidates += sorted(p for p in roots if p not in (owner, GERMAN_PACKAGE))
    for pkg in candidates:
        folder = roots[pkg] / "usr/share/man" / f"man{sec}"
        for fn in (f"{name}.{sec}.gz", f"{name}.{sec}"):
            path = folder / fn
            # A symlinked page is an alias of another page (runit's halt is runit-shutdown), not this one.
            if path.is_file() and not path.is_symlink():
                return path
    return None


def german_pages(root: Path) -> Iterator[tuple[str, str, Path]]:
    """(name, section, path) of the German pages under ``root/usr/share/man/de`` (links to other pages left out)."""
    man_de = root / "usr/share/man/de"
    if not man_de.is_dir():
        return
    for sec_dir in sorted(man_de.iterdir()):
        if not sec_dir.is_dir():
            continue
        for path in sorted(sec_dir.iterdir()):
            m = re.fullmatch(r"(.+)\.(\d\w*?)(?:\.gz)?", path.name)
            if not m or path.is_symlink() or not path.is_file() or f"{m.group(1)}.{m.group(2)}" in SKIP_PAGES:
                continue
            yield m.group(1), m.group(2), path


class ManpagesSource(Source):
    """German manual pages paired block by block with the English pages of the same name and section.

    First the pages of manpages-de (``manpages/<name>.<sec>``), then those other pinned packages ship beside
    their English ones (dpkg, apt, debhelper, devscripts: po4a inside the package), each paired with its own
    package's English page, else the one another package ships (debconf-i18n's German pages translate
    debconf's), as ``<package>/man/<name>.<sec>``, unless manpages-de already gave that page.
    """

    name = "manpages"
    kind = "sentences"
    members = ("./usr/share/man/de/*", "./usr/share/man/man*")
    shared_members = ("./usr/share/man/man*",)  # an English page without a pinned owner is looked for anywhere

    def __init__(self, owners_file: Path = OWNERS_FILE) -> None:
        self.owners_file = owners_file

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        owners = read_owners(self.owners_file)
        done: set[str] = set()
        german_root = roots.get(GERMAN_PACKAGE)
        for name, sec, path in german_pages(german_root) if german_root is not None else ():
            english_path = _english_page(roots, owners.get((name, sec)), name, sec)
            if english_path is None:
                continue
            pairs = align_page(read_page(english_path), read_page(path), name)
            if pairs:
                done.add(f"{name}.{sec}")
                yield Document(doc_id=f"manpages/{name}.{sec}", pairs=pairs, kind=self.kind)
        for package in dict.fromkeys(self.packages()):
            if package == GERMAN_PACKAGE or package not in roots:
                continue
            for name, sec, path in german_pages(roots[package]):
                english_path = _english_page(roots, package, name, sec)
                if f"{name}.{sec}" in done or english_path is None:
                    continue
                pairs = align_page(read_page(english_path), read_page(path), name)
                if pairs:
                    done.add(f"{name}.{sec}")
                    yield Document(doc_id=f"{package}/man/{name}.{sec}", pairs=pairs, kind=self.kind)


def align_page(english: str, german: str, name: str = "") -> list[Pair]:
    """The pairs of one English page and its German translation (both roff source)."""
    if english.lstrip().startswith(".so ") or german.lstrip().startswith(".so "):
        return []
    return align_blocks(parse_roff(english, name), drop_german_addenda(parse_roff(german, name)))


register(ManpagesSource())
