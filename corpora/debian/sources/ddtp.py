"""Package descriptions translated by the Debian Description Translation Project (source ``ddtp``).

The archive ships every package's English description in ``i18n/Translation-en`` and the German ones
the DDTP volunteers wrote in ``i18n/Translation-de``; both are keyed by ``Description-md5`` (the md5 of
the English text), so a German entry is a translation of exactly the English entry with that md5.

These files come from the archive's indexes, not from a package: the source's ``roots`` mapping holds a
pseudo-entry ``roots["ddtp"]``, a folder with the two files decompressed as ``Translation-en`` and
``Translation-de``. The corpus builder fills it (``Archive.translations``) from apt's lists folder
(``Acquire::Languages { "en"; "de"; };`` makes ``apt-get update`` fetch them). The pinned package list
``packages/ddtp.txt`` is therefore empty.

A description is one document ``ddtp/<package>``: its short description (first line) is one pair, and
the long description's paragraphs (separated by `` .`` lines) pair up one to one when both sides have
as many paragraphs. A paragraph that is a bullet list pairs item by item, and is skipped when the two
lists have different item counts (the translator merged or split items).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from corpora.debian.sources.base import Document, Pair, Source, register

#: The key of the pseudo-root in ``roots`` (a folder holding Translation-en and Translation-de).
ROOT_KEY = "ddtp"
LANGS = ("en", "de")

_BULLET = re.compile(r"^\s*(?:[*+\-o•·]|\d{1,2}[.)])\s+(?=\S)")


def parse_translation(text: str) -> Iterator[tuple[str, str, str]]:
    """(package, description md5, description) for every stanza of a Translation-<lang> file.

    The description is the ``Description-<lang>`` field: the short description on its first line,
    then the long description's lines as the file has them (each starting with a space).
    """
    for stanza in re.split(r"\n\s*\n", text):
        package = md5 = None
        desc: list[str] | None = None
        for line in stanza.split("\n"):
            if desc is not None and line.startswith((" ", "\t")):
                desc.append(line)
                continue
            if desc is not None and package and md5:
                break
            key, sep, value = line.partition(":")
            if not sep:
                continue
            if key == "Package":
                package = value.strip()
            elif key == "Description-md5":
                md5 = value.strip()
            elif key.startswith("Description-"):
                desc = [value.strip()]
        if package and md5 and desc is not None:
            yield package, md5, "\n".join(desc)


def _norm(text: str) -> str:
    return " ".join(text.split())


def description_units(desc: str) -> tuple[str, list[list[str]]]:
    """The short description and the long description as paragraphs, each a list of units.

    A plain paragraph is one unit (its lines joined); a bullet list is its lead text (if any) and
    then one unit per item. A paragraph is a list when its first line, or at least two of its lines,
    start with a bullet: a single ``-`` at the start of a wrapped line is usually a dash, not a list.
    """
    lines = desc.split("\n")
    short = _norm(lines[0])
    paragraphs: list[list[str]] = []
    current: list[str] = []
    for line in lines[1:] + [" ."]:
        if line.strip() == ".":
            if current:
                paragraphs.append(_paragraph_units(current))
            current = []
        else:
            current.append(line[1:] if line.startswith(" ") else line)
    return short, paragraphs


def _paragraph_units(lines: list[str]) -> list[str]:
    bullets = [bool(_BULLET.match(line)) for line in lines]
    if not (bullets[0] or sum(bullets) >= 2):
        return [_norm(" ".join(lines))]
    units: list[list[str]] = []
    lead: list[str] = []
    for line, is_bullet in zip(lines, bullets, strict=True):
        if is_bullet:
            units.append([_BULLET.sub("", line, count=1)])
        elif units:
            units[-1].append(line)
        else:
            lead.append(line)
    out = [_norm(" ".join(lead))] if lead else []
    out.extend(_norm(" ".join(u)) for u in units)
    return out


def align_descriptions(english: str, german: str) -> list[Pair]:
    """The pairs of one description: the short descriptions, then paragraph i with paragraph i.

    Long descriptions with different paragraph counts contribute nothing (the translation was
    restructured); list paragraphs with different unit counts are skipped, the rest still pair.
    """
    en_short, en_paras = description_units(english)
    de_short, de_paras = description_units(german)
    pairs: list[Pair] = []
    if en_short and de_short:
        pairs.append((en_short, de_short))
    if len(en_paras) != len(de_paras):
        return pairs
    for en_units, de_units in zip(en_paras, de_paras, strict=True):
        if len(en_units) != len(de_units):
            continue
        pairs.extend((e, d) for e, d in zip(en_units, de_units, strict=True) if e and d)
    return pairs


class DdtpSource(Source):
    """German package descriptions joined with the English ones on ``Description-md5``."""

    name = "ddtp"
    kind = "sentences"

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        folder = roots.get(ROOT_KEY)
        if folder is None:
            return
        english: dict[str, str] = {}
        for _pkg, md5, desc in parse_translation((folder / "Translation-en").read_text(encoding="utf-8")):
            english.setdefault(md5, desc)
        seen: set[str] = set()
        for package, md5, desc in parse_translation((folder / "Translation-de").read_text(encoding="utf-8")):
            if package in seen or md5 not in english:
                continue
            seen.add(package)
            pairs = align_descriptions(english[md5], desc)
            if pairs:
                yield Document(doc_id=f"ddtp/{package}", pairs=pairs, kind=self.kind)


register(DdtpSource())
