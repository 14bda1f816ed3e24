"""KDE handbooks (source ``kde_doc``): the pages of ``index.cache.bz2`` (or ``index.docbook``) paired by
block sequence."""

from __future__ import annotations

import bz2
import re
from collections.abc import Iterator
from pathlib import Path

from corpora.debian.sources.base import Document, Pair, Source, register
from corpora.debian.sources.blocks import DOCBOOK, HTML, align_files, read_text

_KDE_FILE = re.compile(r'<FILENAME filename="([^"]+)">(.*?)</FILENAME>', re.S)


def kde_cache_pages(data: bytes) -> dict[str, str]:
    """The HTML pages packed into a KDE ``index.cache.bz2`` (``<FILENAME filename="...">`` sections)."""
    text = bz2.decompress(data).decode("utf-8", errors="replace")
    return {m.group(1): m.group(2) for m in _KDE_FILE.finditer(text)}


class KdeDoc(Source):
    """KDE handbooks: ``usr/share/doc/HTML/{en,de}/<app>/`` as ``index.cache.bz2`` (the generated HTML
    pages concatenated), or the ``index.docbook`` source when no cache exists. Pages pair by file name,
    one document per handbook, ``<package>/<app>``."""

    name = "kde_doc"
    kind = "sentences"
    members = ("./usr/share/doc/HTML/en/*", "./usr/share/doc/HTML/de/*")

    def extract_package(self, pkg: str, root: Path) -> Iterator[Document]:
        en_base = root / "usr/share/doc/HTML/en"
        de_base = root / "usr/share/doc/HTML/de"
        if not en_base.is_dir() or not de_base.is_dir():
            return
        for en_dir in sorted({p.parent for p in en_base.rglob("index.*")}):
            rel = en_dir.relative_to(en_base)
            pairs = self._handbook(en_dir, de_base / rel)
            if pairs:
                yield Document(f"{pkg}/{rel.as_posix()}", pairs, self.kind)

    @staticmethod
    def _handbook(en_dir: Path, de_dir: Path) -> list[Pair]:
        pairs: list[Pair] = []
        if (en_dir / "index.cache.bz2").is_file() and (de_dir / "index.cache.bz2").is_file():
            en_pages = kde_cache_pages((en_dir / "index.cache.bz2").read_bytes())
            de_pages = kde_cache_pages((de_dir / "index.cache.bz2").read_bytes())
            for name, en_html in en_pages.items():
                if name in de_pages:
                    pairs.extend(align_files(en_html, de_pages[name], HTML) or [])
        elif (en_dir / "index.docbook").is_file() and (de_dir / "index.docbook").is_file():
            en, de = (read_text(d / "index.docbook") for d in (en_dir, de_dir))
            pairs.extend(align_files(en, de, DOCBOOK) or [])
        return pairs


KDE_DOC = register(KdeDoc())
