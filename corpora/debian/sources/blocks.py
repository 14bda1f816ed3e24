"""Block sequences of structured documentation: HTML, Mallard and DocBook pages parsed into typed blocks,
and two sequences aligned. The ``gnome_help``, ``kde_doc`` and ``docbooks`` sources pair pages with it; ``lyx``
aligns its own blocks with ``dp_align``.

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

import difflib
import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from corpora.debian.sources.base import Pair

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


def letters(text: str) -> str:
    """The word characters of a text: an untranslated block may differ from its original only in spacing."""
    return re.sub(r"\W+", "", text)


def length_ok(en: str, de: str) -> bool:
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
    ``min_ratio`` (``difflib``) is skipped, and the rest are aligned by ``dp_align`` on types, lengths and
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
        candidates = dp_align(en, de)
    long_pairs = [(a, b) for a, b in candidates if max(len(a[1]), len(b[1])) >= 30]
    if long_pairs and sum(not length_ok(a[1], b[1]) for a, b in long_pairs) > 0.2 * len(long_pairs):
        return None
    return [
        (a[1], b[1])
        for a, b in candidates
        if letters(a[1]) != letters(b[1]) and length_ok(a[1], b[1]) and not _ENTITY_REF.search(a[1] + b[1])
    ]


#: Numbers, URLs and identifiers: they survive translation, so matching blocks share them.
_ANCHOR = re.compile(r"\d+|https?://\S+|\b\w*[_/]\w+\b")


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


def dp_align(en: list[Block], de: list[Block], gap: float = -0.2, keep: float = 0.4) -> list[tuple[Block, Block]]:
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


def align_files(en_text: str, de_text: str, grammar: Grammar) -> list[Pair] | None:
    """The pairs of two pages in ``grammar`` (``align_blocks`` of their block sequences)."""
    return align_blocks(parse_blocks(en_text, grammar), parse_blocks(de_text, grammar))


def read_text(path: Path) -> str:
    """A page's text; a stray undecodable byte must not cost the page."""
    return path.read_text(encoding="utf-8", errors="replace")
