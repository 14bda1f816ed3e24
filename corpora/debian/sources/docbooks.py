"""DocBook HTML manuals (source ``docbooks``): the Debian books, GIMP and KiCad help, paired page by page
and block by block. The Debian Administrator's Handbook and the Debian Reference are the corpus's test and
dev books, so their document ids start with the manual's name."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from corpora.debian.sources.base import Document, Source, register
from corpora.debian.sources.blocks import HTML, align_files, read_text


@dataclass(frozen=True)
class Manual:
    """One manual: where its English and German HTML live, and the document id prefix of its pages.

    ``en``/``de`` are ``(package, folder)``; both may be in one package (debian-handbook). ``pattern``
    selects the English pages (a glob relative to the folder) and ``to_de`` rewrites an English page's
    relative path into the German one (``ch01.en.html`` -> ``ch01.de.html``).
    """

    doc: str
    en: tuple[str, str]
    de: tuple[str, str]
    pattern: str = "*.html"
    to_de: tuple[str, str] = (r"\.en\.html$", ".de.html")
    exclude: tuple[str, ...] = ()  # pages that repeat others (a single-page edition beside the chapters)


_HB = "usr/share/doc/debian-handbook/html"
_IG = "usr/share/doc/installation-guide-amd64"
_SAME = (r"$", "")

MANUALS: tuple[Manual, ...] = (
    Manual("debian-handbook", ("debian-handbook", f"{_HB}/en-US"), ("debian-handbook", f"{_HB}/de-DE"), to_de=_SAME),
    Manual(
        "debian-reference",
        ("debian-reference-en", "usr/share/debian-reference"),
        ("debian-reference-de", "usr/share/debian-reference"),
    ),
    Manual(
        "developers-reference",
        ("developers-reference", "usr/share/developers-reference"),
        ("developers-reference-de", "usr/share/developers-reference/de"),
        to_de=_SAME,
        exclude=("developers-reference.html",),
    ),
    Manual("debian-faq", ("debian-faq", "usr/share/doc/debian/FAQ"), ("debian-faq-de", "usr/share/doc/debian/FAQ/de")),
    Manual(
        "maint-guide",
        ("maint-guide", "usr/share/doc/maint-guide/html"),
        ("maint-guide-de", "usr/share/doc/maint-guide-de/html"),
    ),
    Manual(
        "debian-edu-doc",
        ("debian-edu-doc-en", "usr/share/doc/debian-edu-doc-en"),
        ("debian-edu-doc-de", "usr/share/doc/debian-edu-doc-de"),
        pattern="debian-edu-bookworm-manual.html",
        to_de=_SAME,
    ),
    Manual(
        "installation-guide",
        ("installation-guide-amd64", f"{_IG}/en"),
        ("installation-guide-amd64", f"{_IG}/de"),
        to_de=_SAME,
    ),
    Manual(
        "kicad-doc",
        ("kicad-doc-en", "usr/share/doc/kicad/help/en"),
        ("kicad-doc-de", "usr/share/doc/kicad/help/de"),
        to_de=_SAME,
    ),
    Manual(
        "gimp-help",
        ("gimp-help-en", "usr/share/gimp/2.0/help/en"),
        ("gimp-help-de", "usr/share/gimp/2.0/help/de"),
        pattern="**/*.html",
        to_de=_SAME,
    ),
    Manual(
        "ubuntu-packaging-guide",
        ("ubuntu-packaging-guide-html", "usr/share/doc/ubuntu-packaging-guide-html"),
        ("ubuntu-packaging-guide-html-de", "usr/share/doc/ubuntu-packaging-guide-html-de"),
        to_de=_SAME,
    ),
)


class DocbookManuals(Source):
    """HTML manuals with German translations made by po4a/publican/gettext: pages pair by relative path.

    Document ids are ``<manual>/<page>``: ``debian-handbook/...`` and ``debian-reference/...`` so that the
    corpus can hold whole manuals out (test and dev).
    """

    name = "docbooks"
    kind = "sentences"
    manuals: tuple[Manual, ...] = MANUALS

    def package_members(self, package: str) -> tuple[str, ...]:
        """The folders of the manuals' English or German pages that ``package`` holds."""
        return tuple(sorted({f"./{folder}/*" for m in self.manuals for pkg, folder in (m.en, m.de)
                             if pkg == package}))

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        for m in self.manuals:
            if m.en[0] not in roots or m.de[0] not in roots:
                continue
            en_dir = roots[m.en[0]] / m.en[1]
            de_dir = roots[m.de[0]] / m.de[1]
            if not en_dir.is_dir() or not de_dir.is_dir():
                continue
            for en_path in sorted(en_dir.glob(m.pattern)):
                rel = en_path.relative_to(en_dir).as_posix()
                if rel in m.exclude:
                    continue
                de_path = de_dir / re.sub(m.to_de[0], m.to_de[1], rel, count=1)
                if not en_path.is_file() or not de_path.is_file():
                    continue
                pairs = align_files(read_text(en_path), read_text(de_path), HTML)
                if pairs:
                    page = re.sub(r"(\.en)?\.html?$", "", rel)
                    yield Document(f"{m.doc}/{page}", pairs, self.kind)


DOCBOOKS = register(DocbookManuals())
