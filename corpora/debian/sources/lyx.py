"""LyX's own manuals (``lyx-common``: the User's Guide, Tutorial, Math, Customization, ...) in English and German.

``usr/share/lyx/doc/<Name>.lyx`` is the English manual and ``usr/share/lyx/doc/de/<Name>.lyx`` its German
translation, kept by hand in the same LyX document structure: one ``\\begin_layout <Type>`` block per
paragraph, heading or list item. Both files are read into (type, text) blocks and aligned by content with the block
aligner of the help sources (its global alignment on types, lengths and shared numbers and identifiers,
confident matches between matched neighbours only), part by part: the manuals are cut at their chapter,
section and subsection headings, at the finest of those levels where both sides have as many parts.

Text that the file does not hold (menu paths of ``Info`` insets, cross-references, raw LaTeX, formulas,
tracked deletions) would leave a fragment, so a block with one is kept in the sequence but never emitted;
footnotes, index entries, labels, figures and tables are left out of the sentence around them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from corpora.debian.sources.base import Document, Pair, Source, register
from corpora.debian.sources.blocks import Block, dp_align, length_ok, letters

#: Insets whose text is part of the sentence around them.
_INLINE = ("Flex", "Quotes", "Newline", "space")
#: Insets whose text is not in the file, so the block around them cannot be emitted whole.
_HIDING = (
    "Info",
    "CommandInset ref",
    "CommandInset citation",
    "CommandInset href",
    "CommandInset nomenclature",
    "ERT",
    "Formula",
    "Preview",
)
#: Layouts that are code or markup, not prose.
_VERBATIM_LAYOUTS = {"LyX-Code", "Verbatim", "Verbatim*", "Scrap", "Chunk"}
#: What ``\SpecialChar`` names stand for.
_SPECIAL = {
    "LyX": "LyX",
    "LaTeX": "LaTeX",
    "LaTeX2e": "LaTeX2e",
    "TeX": "TeX",
    "\\ldots": "…",
    "\\@.": "",
    "ldots": "…",
    "menuseparator": " > ",
    "nobreakdash": "-",
    "softhyphen": "",
    "ligaturebreak": "",
    "endofsentence": "",
    "breakableslash": "/",
    "slash": "/",
    "allowbreak": "",
    "XeTeX": "XeTeX",
    "LuaTeX": "LuaTeX",
    "pdfTeX": "pdfTeX",
}
_SPECIAL_CHAR = re.compile(r"\\SpecialChar (\S+)")
_QUOTES = {"d": ('"', '"'), "s": ("'", "'")}
#: Headings the manuals are cut at, coarsest first.
HEADINGS = ("Chapter", "Section", "Subsection")


def parse_lyx(text: str) -> list[Block]:
    """The top-level paragraphs of a LyX document as (layout, text) blocks; text "" where it cannot be used."""
    body = text.split("\\begin_body", 1)[-1].split("\\end_body", 1)[0]
    blocks: list[Block] = []
    # a stack of what is open: ("layout", type) or ("inset", name, keep): keep says whether its text counts
    stack: list[tuple[str, str, bool]] = []
    parts: list[str] = []
    usable = True

    def keeping() -> bool:
        return all(keep for _, _, keep in stack)

    for line in body.split("\n"):
        if line.startswith("\\begin_layout "):
            kind = line[len("\\begin_layout ") :].strip()
            if not stack:
                parts, usable = [], kind not in _VERBATIM_LAYOUTS
            stack.append(("layout", kind, True))
        elif line.startswith("\\end_layout"):
            if stack and stack[-1][0] == "layout":
                kind = stack.pop()[1]
                if not stack:
                    text_ = " ".join("".join(parts).split())
                    blocks.append((kind, text_ if usable else ""))
        elif line.startswith("\\begin_inset "):
            name = line[len("\\begin_inset ") :].strip()
            inline = name.startswith(_INLINE)
            if name.startswith(_HIDING) or (
                name.startswith("CommandInset") and "label" not in name and "index" not in name and "toc" not in name
            ):
                if keeping():
                    usable = False
            if keeping():
                if name.startswith("Quotes"):
                    kind = name.split()[1] if len(name.split()) > 1 else "eld"
                    parts.append(_QUOTES.get(kind[-1:], ('"', '"'))[0 if kind[1:2] == "l" else 1])
                elif name.startswith(("Newline", "space")):
                    parts.append(" ")
            stack.append(("inset", name, inline and not name.startswith(("Quotes", "Newline", "space"))))
        elif line.startswith("\\end_inset"):
            if stack and stack[-1][0] == "inset":
                stack.pop()
        elif not stack or not keeping() or stack[-1][0] != "layout":
            continue  # outside a paragraph, inside a dropped inset, or an inset's parameters
        elif line.startswith("\\SpecialChar "):
            parts.append(_SPECIAL_CHAR.sub(lambda m: _SPECIAL.get(m.group(1), ""), line))
        elif line.startswith("\\backslash"):
            parts.append("\\" + line[len("\\backslash") :])
        elif line.startswith(("\\change_deleted", "\\change_inserted")):
            usable = False  # tracked changes: which text is meant is unclear
        elif line.startswith("\\"):
            continue  # font and paragraph settings (\emph on, \series bold, \lang, \align, ...)
        else:
            parts.append(_SPECIAL_CHAR.sub(lambda m: _SPECIAL.get(m.group(1), ""), line))
    return blocks


def _split(blocks: list[Block], levels: tuple[str, ...]) -> list[list[Block]]:
    parts: list[list[Block]] = [[]]
    for block in blocks:
        if block[0] in levels and parts[-1]:
            parts.append([])
        parts[-1].append(block)
    return parts


def align_manual(en: list[Block], de: list[Block]) -> list[Pair]:
    """Pairs of two manuals, aligned part by part at the finest heading level where the part counts agree."""
    for depth in range(len(HEADINGS), -1, -1):
        en_parts, de_parts = _split(en, HEADINGS[:depth]), _split(de, HEADINGS[:depth])
        if len(en_parts) == len(de_parts):
            pairs: list[Pair] = []
            for a, b in zip(en_parts, de_parts, strict=True):
                pairs.extend(align_part(a, b))
            return pairs
    return []


def align_part(en: list[Block], de: list[Block]) -> list[Pair]:
    """One part's pairs by content, even where the layout types agree (a hand-kept translation may have
    replaced one list item by another): the block aligner's global alignment on types, lengths and shared
    numbers and identifiers, keeping confident matches between matched neighbours only."""
    if not en or not de or len(en) * len(de) > 4_000_000:
        return []
    return [
        (a[1], b[1])
        for a, b in dp_align(en, de)
        if a[1] and b[1] and letters(a[1]) != letters(b[1]) and length_ok(a[1], b[1])
    ]


class LyxManuals(Source):
    """``lyx-common``'s manuals, one document per manual, ``lyx-common/<Name>``."""

    name = "lyx"
    kind = "sentences"
    members = ("./usr/share/lyx/doc/*.lyx",)
    folder = "usr/share/lyx/doc"

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        for package in self.packages():
            if package not in roots:
                continue
            base = Path(roots[package]) / self.folder
            for en_path in sorted(base.glob("*.lyx")):
                de_path = base / "de" / en_path.name
                if not de_path.is_file():
                    continue
                pairs = align_manual(parse_lyx(_read(en_path)), parse_lyx(_read(de_path)))
                if pairs:
                    yield Document(f"{package}/{en_path.stem}", pairs, self.kind)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


register(LyxManuals())
