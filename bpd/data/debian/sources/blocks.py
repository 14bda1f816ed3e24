"""Documentation whose German files mirror the English ones block for block: GNOME/MATE help, KDE, DocBook HTML.

These translations are made by tools (itstool, po4a, po2xml, publican) that rewrite each paragraph of the
English source in place, so a translated page has the same sequence of blocks (paragraphs, titles, list
items, table cells) as its original. Pairing the n-th block of one side with the n-th of the other is then
exact, and when the two sequences differ (the German page was made from another version of the original)
a conservative alignment keeps only the stretches where block types and lengths agree, or the page is
skipped: a misaligned pair is worse than a missing one.

One parser serves HTML, Mallard and DocBook XML: each is a stream of tags where some tags open a block,
some are verbatim (code, screens) and are dropped, and the rest are inline markup whose text is kept.
"""

from __future__ import annotations

import bz2
import difflib
import html
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from bpd.data.debian.sources.base import Document, Pair, Source, register

Block = tuple[str, str]  # (block type, text)


def normalize(text: str) -> str:
    """Whitespace collapsed to single spaces (entities are decoded by the parser)."""
    return " ".join(text.split())


@dataclass(frozen=True)
class Grammar:
    """Which tags of a markup language open a block, which are dropped with their content, which rename.

    ``verbatim`` tags (program listings, screens) are always dropped; ``block_level_only`` tags are dropped
    only where they stand as a block of their own (Mallard and HTML ``code`` is inline inside a paragraph
    and a code listing outside one); ``skip_classes`` drops HTML elements by class or id (navigation bars, credits,
    listings rendered as ``div``).
    """

    blocks: frozenset[str]
    verbatim: frozenset[str] = frozenset()
    block_level_only: frozenset[str] = frozenset()
    skip_classes: frozenset[str] = frozenset()
    rename: Mapping[str, str] = field(default_factory=dict)
    # tags that implicitly close an open block of the same family (HTML's optional end tags)
    implicit_close: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # elements that bound implicit closing (a nested list's <li> does not close the outer <li>)
    containers: frozenset[str] = frozenset()


_P_CLOSERS = frozenset(
    "p div ul ol dl table pre blockquote h1 h2 h3 h4 h5 h6 hr section article aside nav header footer form".split()
)
_HTML_IMPLIED = {
    "li": frozenset({"li", "p"}),
    "td": frozenset({"td", "th", "p"}),
    "th": frozenset({"td", "th", "p"}),
    "tr": frozenset({"td", "th", "p", "tr"}),
    "dt": frozenset({"dt", "dd", "p"}),
    "dd": frozenset({"dt", "dd", "p"}),
    **{tag: frozenset({"p"}) for tag in _P_CLOSERS},
}

HTML = Grammar(
    blocks=frozenset("p h1 h2 h3 h4 h5 h6 li dt dd td th caption figcaption blockquote div title".split()),
    verbatim=frozenset("script style pre noscript svg math textarea select head nav header footer".split()),
    block_level_only=frozenset({"code", "tt", "kbd"}),
    skip_classes=frozenset(
        "navheader navfooter programlisting screen synopsis cmdsynopsis literallayout bascode pycode "
        "sqlcode code codeintable smathcode toc list-of-tables list-of-figures list-of-examples "
        "navigation navCenter header footer breadcrumbs authorgroup othercredit author editor copyright "
        "legalnotice-link revhistory docnav".split()
    ),
    rename={f"h{i}": "h" for i in range(1, 7)},
    implicit_close=_HTML_IMPLIED,
    containers=frozenset("ul ol dl table tr".split()),
)

MALLARD = Grammar(
    blocks=frozenset("p title subtitle desc cite caption".split()),
    verbatim=frozenset("screen synopsis comment license revision credit mal:credit its:rules".split()),
    block_level_only=frozenset({"code"}),
)

DOCBOOK = Grammar(
    blocks=frozenset(
        "para simpara formalpara title subtitle term entry member glossterm glossdef attribution "
        "refpurpose refname titleabbrev".split()
    ),
    verbatim=frozenset(
        "screen programlisting synopsis cmdsynopsis funcsynopsis literallayout address revhistory "
        "indexterm remark authorgroup author othercredit copyright publisher releaseinfo date "
        "keywordset".split()
    ),
)


_SEQUENCES = {"guiseq": " ▸ ", "menuchoice": " ▸ ", "keyseq": "+", "keycombo": "+"}
_SEQUENCE_ITEMS = frozenset("gui guimenu guisubmenu guimenuitem guibutton guilabel key keycap mousebutton".split())


class _BlockParser(HTMLParser):
    def __init__(self, grammar: Grammar) -> None:
        super().__init__(convert_charrefs=True)
        self.g = grammar
        self.blocks: list[Block] = []
        self.stack: list[str] = []  # open block and container tags
        self.buf: list[str] = []
        self.skip: list[str] = []  # tags of the dropped element being skipped (depth counting)
        self.joiners: list[list] = []  # [tag, separator, items seen] of open menu/key sequences

    # a block's text is cut where a nested block starts or ends: the outer text before and after
    # becomes a block of its own, so a list item holding paragraphs gives the same sequence either side
    def _flush(self) -> None:
        if self.stack and self.stack[-1] not in self.g.containers:
            text = normalize("".join(self.buf))
            if text:
                tag = self.stack[-1]
                self.blocks.append((self.g.rename.get(tag, tag), text))
        self.buf = []

    def _skipped(self, tag: str, attrs: list[tuple[str, str | None]]) -> bool:
        if tag in self.g.verbatim:
            return True
        if tag in self.g.block_level_only and (not self.stack or self.stack[-1] in self.g.containers):
            return True
        if self.g.skip_classes:
            a = dict(attrs)
            names = (a.get("class") or "").split() + [a.get("id") or ""]
            if any(c in self.g.skip_classes for c in names):
                return True
        return False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip:
            if tag == self.skip[0]:
                self.skip.append(tag)
            return
        if self._skipped(tag, attrs):
            self.skip = [tag]
            return
        closes = self.g.implicit_close.get(tag)
        if closes:
            while self.stack and self.stack[-1] in closes:
                self._flush()
                self.stack.pop()
        if tag in self.g.blocks or tag in self.g.containers:
            self._flush()
            self.stack.append(tag)
        elif tag == "br":
            self.buf.append(" ")
        elif tag in _SEQUENCES:
            self.joiners.append([tag, _SEQUENCES[tag], 0])
        elif tag in _SEQUENCE_ITEMS and self.joiners:
            # Edit ▸ Preferences, Ctrl+C: the renderer draws these separators, the source only nests tags
            if self.joiners[-1][2]:
                self.buf.append(self.joiners[-1][1])
            self.joiners[-1][2] += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.skip and tag == "br":
            self.buf.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if self.skip:
            if tag == self.skip[0]:
                self.skip.pop()
            return
        if self.joiners and tag == self.joiners[-1][0]:
            self.joiners.pop()
        if (tag in self.g.blocks or tag in self.g.containers) and tag in self.stack:
            while self.stack:
                self._flush()
                if self.stack.pop() == tag:
                    break

    def handle_data(self, data: str) -> None:
        if not self.skip and self.stack and self.stack[-1] not in self.g.containers:
            self.buf.append(data)

    def close(self) -> None:
        super().close()
        while self.stack:
            self._flush()
            self.stack.pop()


_ENTITY_DECL = re.compile(r"""<!ENTITY\s+([\w.-]+)\s+(?:"([^"]*)"|'([^']*)')\s*>""")
_ENTITY_REF = re.compile(r"&([A-Za-z][\w.-]*);")


def _expand_entities(text: str) -> str:
    """Replace the entities a DocBook file declares in its internal subset (``&app;``) by their text."""
    decls = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in _ENTITY_DECL.finditer(text)}
    if not decls:
        return text
    for _ in range(3):  # entities may refer to each other
        text = _ENTITY_REF.sub(lambda m: decls.get(m.group(1), m.group(0)), text)
    return text


def parse_blocks(text: str, grammar: Grammar) -> list[Block]:
    """The block sequence of one page in ``grammar`` (``HTML``, ``MALLARD``, ``DOCBOOK``)."""
    if grammar is not HTML:
        text = _expand_entities(text)
    text = re.sub(r"<!\[CDATA\[.*?\]\]>", " ", text, flags=re.S)
    p = _BlockParser(grammar)
    p.feed(text)
    p.close()
    return [(t, html.unescape(s) if "&" in s else s) for t, s in p.blocks]


def _letters(text: str) -> str:
    """The word characters of a text: an untranslated block may differ from its original only in spacing."""
    return re.sub(r"\W+", "", text)


def _length_ok(en: str, de: str) -> bool:
    """German runs ~0.8-1.6x the English length; far outside that a pair of longer blocks is suspect."""
    a, b = len(en), len(de)
    if max(a, b) < 30:
        return True
    return 0.4 <= b / max(a, 1) <= 2.8


def align_blocks(en: list[Block], de: list[Block], min_ratio: float = 0.9) -> list[Pair] | None:
    """The (English, German) texts of two block sequences, or None when they cannot be trusted to align.

    Blocks that read the same on both sides (untranslated) and blocks with an unresolved entity reference
    (``&mc.ed.pref;``, text the build would have filled in from another file) are left out.
    Equal type sequences pair position by position. Otherwise a page whose type sequences match below
    ``min_ratio`` (``difflib``) is skipped, and the rest are aligned by ``_dp_align`` on types, lengths and
    non-translatable tokens (numbers, identifiers), keeping only confident matches. A page where many
    pairs have implausible length ratios is skipped too: that is the sign of a shifted alignment.
    """
    if not en or not de:
        return None
    ten = [t for t, _ in en]
    tde = [t for t, _ in de]
    if ten == tde:
        candidates = list(zip(en, de, strict=True))
    else:
        if difflib.SequenceMatcher(None, ten, tde, autojunk=False).ratio() < min_ratio:
            return None
        if len(en) * len(de) > 4_000_000:
            return None
        candidates = _dp_align(en, de)
    long_pairs = [(a, b) for a, b in candidates if max(len(a[1]), len(b[1])) >= 30]
    if long_pairs and sum(not _length_ok(a[1], b[1]) for a, b in long_pairs) > 0.2 * len(long_pairs):
        return None
    return [
        (a[1], b[1])
        for a, b in candidates
        if _letters(a[1]) != _letters(b[1]) and _length_ok(a[1], b[1]) and not _ENTITY_REF.search(a[1] + b[1])
    ]


def _match_score(a: Block, b: Block, x: frozenset[str] | None = None, y: frozenset[str] | None = None) -> float:
    """How much a German block looks like the translation of an English one: same type, a length ratio
    near German's usual 1.15, the same numbers and identifiers (``x``, ``y``: the blocks' anchors, when the
    caller has them already). Negative for a mere type match."""
    if a[0] != b[0]:
        return -math.inf
    score = 1.0 - 1.5 * abs(math.log((len(b[1]) + 10) / (len(a[1]) + 10) / 1.15))
    x = frozenset(_ANCHOR.findall(a[1])) if x is None else x
    y = frozenset(_ANCHOR.findall(b[1])) if y is None else y
    if x and y:
        score += 0.5 if x & y else -1.0
    elif x or y:
        score -= 0.3
    return score


def _dp_align(en: list[Block], de: list[Block], gap: float = -0.2, keep: float = 0.4) -> list[tuple[Block, Block]]:
    """Global alignment (insertions and deletions, no reordering) maximizing the summed match scores,
    so a paragraph missing on one side is placed where the lengths of its neighbours fit, rather than
    where ``difflib`` happens to put it; matches scoring below ``keep`` are dropped."""
    n, m = len(en), len(de)
    en_anchors = [frozenset(_ANCHOR.findall(t)) for _, t in en]  # once per block, not once per cell
    de_anchors = [frozenset(_ANCHOR.findall(t)) for _, t in de]
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    move = [[0] * (m + 1) for _ in range(n + 1)]  # 0 match, 1 skip English, 2 skip German
    for i in range(1, n + 1):
        score[i][0], move[i][0] = i * gap, 1
    for j in range(1, m + 1):
        score[0][j], move[0][j] = j * gap, 2
    for i in range(1, n + 1):
        row, prev = score[i], score[i - 1]
        for j in range(1, m + 1):
            best, mv = prev[j - 1] + _match_score(en[i - 1], de[j - 1], en_anchors[i - 1], de_anchors[j - 1]), 0
            if prev[j] + gap > best:
                best, mv = prev[j] + gap, 1
            if row[j - 1] + gap > best:
                best, mv = row[j - 1] + gap, 2
            row[j], move[i][j] = best, mv
    path: list[tuple[int, int] | None] = []  # matched (i, j), None for a gap
    i, j = n, m
    while i or j:
        mv = move[i][j] if i and j else (1 if i else 2)
        if mv == 0:
            path.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        else:
            path.append(None)
            i, j = (i - 1, j) if mv == 1 else (i, j - 1)
    path.reverse()
    # next to a gap the aligner cannot tell which of two similar neighbours went missing: only matches
    # whose neighbours on both sides are matches too are trusted
    out = []
    for k, step in enumerate(path):
        if step is None:
            continue
        if (k > 0 and path[k - 1] is None) or (k + 1 < len(path) and path[k + 1] is None):
            continue
        a, b = en[step[0]], de[step[1]]
        if _match_score(a, b) >= keep:
            out.append((a, b))
    return out


_ANCHOR = re.compile(r"\d+|https?://\S+|\b\w*[_/]\w+\b")


def _anchors_agree(en: str, de: str) -> bool:
    """Numbers, URLs and identifiers survive translation; if both sides have some they must overlap."""
    a, b = set(_ANCHOR.findall(en)), set(_ANCHOR.findall(de))
    return not (a or b) or bool(a & b)


def align_files(en_text: str, de_text: str, grammar: Grammar) -> list[Pair] | None:
    return align_blocks(parse_blocks(en_text, grammar), parse_blocks(de_text, grammar))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


# ---------------------------------------------------------------- GNOME / MATE help


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
            pairs = align_files(_read(en_path), _read(de_path), grammar)
            if pairs:
                yield Document(f"{pkg}/{rel.with_suffix('').as_posix()}", pairs, self.kind)


# ---------------------------------------------------------------- KDE handbooks

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
            pairs.extend(align_files(_read(en_dir / "index.docbook"), _read(de_dir / "index.docbook"), DOCBOOK) or [])
        return pairs


# ---------------------------------------------------------------- DocBook HTML manuals


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
                pairs = align_files(_read(en_path), _read(de_path), HTML)
                if pairs:
                    page = re.sub(r"(\.en)?\.html?$", "", rel)
                    yield Document(f"{m.doc}/{page}", pairs, self.kind)


GNOME_HELP = register(GnomeHelp())
KDE_DOC = register(KdeDoc())
DOCBOOKS = register(DocbookManuals())
