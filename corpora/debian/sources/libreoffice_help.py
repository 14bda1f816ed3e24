"""LibreOffice help: German and English pages whose paragraphs carry the same ids.

The help is generated from ``.xhp`` sources in which every paragraph and heading has an id
(``par_id3149549``, ``hd_id3109850``) that the translation keeps, so ``help/en-US/text/<module>/...html``
and ``help/de/text/<module>/...html`` pair exactly by id, without any positional alignment. An id can
occur more than once in a page (sections embedded from other pages), so the key is (id, occurrence).
Code paragraphs (Basic, Python, formula listings) are dropped; inline markup keeps its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from html.parser import HTMLParser
from pathlib import Path

from corpora.debian.sources.base import Document, Pair, Source, register
from corpora.debian.sources.blocks import normalize

_ID = re.compile(r"^[a-z]+_id\d+$")
_CODE_CLASSES = frozenset({"code", "codeintable", "bascode", "pycode", "sqlcode", "smathcode"})
_VOID = frozenset("br img meta input hr link area base col embed source track wbr".split())


class _IdParser(HTMLParser):
    """Collects the text of each element whose id looks like ``par_id123``, keyed by (id, occurrence)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: dict[tuple[str, int], str] = {}
        self.seen: dict[str, int] = {}
        self.open: list[tuple[str, str, int, list[str]]] = []  # (tag, id, depth of same tag, text)
        self.skip_depth = 0  # >0 inside a code element or <pre>
        self.skip_stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag == "br" and self.open:
                self.open[-1][3].append(" ")
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if self.skip_stack:
            if tag == self.skip_stack[0]:
                self.skip_stack.append(tag)
            return
        if tag in ("pre", "script", "style") or classes & _CODE_CLASSES:
            self.skip_stack = [tag]
            return
        ident = a.get("id") or ""
        if _ID.match(ident):
            n = self.seen.get(ident, 0)
            self.seen[ident] = n + 1
            self.open.append((tag, ident, n, []))
        elif self.open and tag == self.open[-1][0]:
            # same tag nested inside an id'd element: count it so its end tag is not taken for ours
            self.open.append((tag, "", -1, self.open[-1][3]))

    def handle_endtag(self, tag: str) -> None:
        if self.skip_stack:
            if tag == self.skip_stack[0]:
                self.skip_stack.pop()
            return
        if self.open and tag == self.open[-1][0]:
            _, ident, n, buf = self.open.pop()
            if ident:
                text = normalize("".join(buf))
                if text:
                    self.texts[(ident, n)] = text
                if self.open:  # an id'd element inside another keeps its text in the outer one too
                    self.open[-1][3].append(" " + text + " ")

    def handle_data(self, data: str) -> None:
        if self.open and not self.skip_stack:
            self.open[-1][3].append(data)


def paragraphs(text: str) -> dict[tuple[str, int], str]:
    """(id, occurrence) -> text of the id'd paragraphs and headings of one help page."""
    p = _IdParser()
    p.feed(text)
    p.close()
    return p.texts


def pair_pages(en_html: str, de_html: str) -> list[Pair]:
    """Pairs of the paragraphs with the same key on both pages, in English page order; untranslated
    paragraphs (same text on both sides) are left out."""
    de = paragraphs(de_html)
    return [(t, de[k]) for k, t in paragraphs(en_html).items() if k in de and de[k] != t]


class LibreOfficeHelp(Source):
    """``libreoffice-help-en-us`` against ``libreoffice-help-de``; one document per help page,
    ``libreoffice-help/<module>/<page>`` (module = swriter, scalc, shared, ...)."""

    name = "libreoffice_help"
    kind = "sentences"
    members = ("./usr/share/libreoffice/help/en-US/text/*", "./usr/share/libreoffice/help/de/text/*")
    english = "libreoffice-help-en-us"
    german = "libreoffice-help-de"

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        if self.english not in roots or self.german not in roots:
            return
        en_dir = roots[self.english] / "usr/share/libreoffice/help/en-US/text"
        de_dir = roots[self.german] / "usr/share/libreoffice/help/de/text"
        if not en_dir.is_dir() or not de_dir.is_dir():
            return
        for en_path in sorted(en_dir.rglob("*.html")):
            rel = en_path.relative_to(en_dir)
            de_path = de_dir / rel
            if not de_path.is_file():
                continue
            pairs = pair_pages(
                en_path.read_text(encoding="utf-8", errors="replace"),
                de_path.read_text(encoding="utf-8", errors="replace"),
            )
            if pairs:
                yield Document(f"libreoffice-help/{rel.with_suffix('').as_posix()}", pairs, self.kind)


LIBREOFFICE_HELP = register(LibreOfficeHelp())
