"""GNOME and MATE help (source ``gnome_help``): Mallard and DocBook pages paired by block sequence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from corpora.debian.sources.base import Document, Source, register
from corpora.debian.sources.blocks import DOCBOOK, MALLARD, align_files, read_text


class GnomeHelp(Source):
    """Mallard ``.page`` and DocBook ``.xml``/``.docbook`` files under ``usr/share/help/{C,de}/<doc>/``.

    itstool writes each German page from its English one, so the block sequences agree; one document
    per page, ``<package>/<doc>/<page>``.
    """

    name = "gnome_help"
    kind = "sentences"
    members = ("./usr/share/help/C/*", "./usr/share/help/de/*")

    def extract_package(self, pkg: str, root: Path) -> Iterator[Document]:
        c_dir = root / "usr/share/help/C"
        de_dir = root / "usr/share/help/de"
        if not c_dir.is_dir() or not de_dir.is_dir():
            return
        for en_path in sorted(c_dir.rglob("*")):
            if en_path.suffix not in (".page", ".xml", ".docbook") or not en_path.is_file():
                continue
            rel = en_path.relative_to(c_dir)
            de_path = de_dir / rel
            if not de_path.is_file():
                continue
            grammar = MALLARD if en_path.suffix == ".page" else DOCBOOK
            pairs = align_files(read_text(en_path), read_text(de_path), grammar)
            if pairs:
                yield Document(f"{pkg}/{rel.with_suffix('').as_posix()}", pairs, self.kind)


GNOME_HELP = register(GnomeHelp())
