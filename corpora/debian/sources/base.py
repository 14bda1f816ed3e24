"""What every extractor of English–German text from Debian packages gives back, and how it is registered.

An extractor reads the unpacked files of one or more packages and yields *documents*: a help page, a
manual page, a message catalogue, a package description. The document is the unit the corpus holds out
(dev/test are whole documents), so an extractor names each one by a stable id that starts with the
package it came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Pair = tuple[str, str]  # (English, German)


@dataclass
class Document:
    """Aligned (English, German) pairs of one document, in document order.

    ``doc_id`` is ``<package>/<path or name>`` and does not change between runs on the same packages;
    ``kind`` is ``sentences`` (running text: documentation, manual pages, descriptions, dialogue) or
    ``strings`` (interface strings and messages), so a user can build the subset a run needs.
    """

    doc_id: str
    pairs: list[Pair] = field(default_factory=list)
    kind: str = "sentences"


class Source:
    """One kind of source (gettext catalogues, HTML help by paragraph id, roff, ...).

    ``packages`` are the Debian binary packages it reads, pinned in ``corpora/debian/packages/<name>.txt``;
    ``extract`` gets the folder each of them was unpacked into (``dpkg-deb -x``; a package missing from
    the archive is simply absent from the mapping) and yields documents. Extractors only read files:
    downloading, cleaning, deduplication and splitting happen elsewhere, so each one is unit-tested on
    a few files its test writes.
    """

    name: str = ""
    kind: str = "sentences"
    #: The files of its packages the extractor reads, as ``tar`` wildcards over the member names ``dpkg-deb``
    #: lists (``./usr/share/help/C/*``; ``*`` also matches ``/``, and a folder brings everything under it).
    #: Only these are unpacked; empty means the whole package.
    members: tuple[str, ...] = ()
    #: Files it reads from every package of a build, not only its own (English manual pages: a page may
    #: lie in any package).
    shared_members: tuple[str, ...] = ()

    def packages(self) -> list[str]:
        return read_package_list(self.name)

    def package_members(self, package: str) -> tuple[str, ...]:
        """The wildcards of the files it reads from ``package`` (one of its packages)."""
        return self.members

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        """Every pinned package's documents, package by package (a source whose documents pair across
        packages overrides this)."""
        for package in dict.fromkeys(self.packages()):
            root = roots.get(package)
            if root is not None:
                yield from self.extract_package(package, Path(root))

    def extract_package(self, package: str, root: Path) -> Iterator[Document]:
        raise NotImplementedError


PACKAGE_LISTS = Path(__file__).resolve().parent.parent / "packages"


def read_package_list(name: str) -> list[str]:
    """The pinned package names of a source: one per line, ``#`` comments and blank lines ignored."""
    path = PACKAGE_LISTS / f"{name}.txt"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


#: name -> Source instance; each source module registers itself on import (``register``).
SOURCES: dict[str, Source] = {}


def register(source: Source) -> Source:
    SOURCES[source.name] = source
    return source


def members_to_unpack(packages: Iterable[str], sources: Iterable[Source]) -> dict[str, tuple[str, ...] | None]:
    """package -> the sorted wildcards of every file any of ``sources`` reads from it, or None for "all of it"
    (a source that declares no members). Independent of which sources a build chooses, so one unpacked
    folder serves every option set."""
    sources = list(sources)
    shared = {m for src in sources for m in src.shared_members}
    owners: dict[str, list[Source]] = {}
    for src in sources:
        for package in src.packages():
            owners.setdefault(package, []).append(src)
    out: dict[str, tuple[str, ...] | None] = {}
    for package in packages:
        wanted: set[str] | None = set(shared)
        for src in owners.get(package, []):
            globs = src.package_members(package)
            if not globs:
                wanted = None
                break
            wanted.update(globs)
        out[package] = tuple(sorted(wanted)) if wanted is not None else None
    return out
