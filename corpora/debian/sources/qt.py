"""German Qt translations (``.qm``) read back into (source text, translation) pairs.

A ``.qm`` file is what ``lrelease`` compiles from a ``.ts`` file. By default it keeps each message's
English source text and context beside the translation (Qt looks messages up by them), so a German
``.qm`` alone is a parallel document: one per file, ``<package>/<file name>``. A file compiled without
its source texts (``lrelease -removeidentical``/stripped builds, or a file that only names the
catalogues it depends on, like Qt's ``qt_de.qm``) gives nothing and is skipped.

Format (Qt's ``qtranslator.cpp``): a 16-byte magic, then sections ``tag:u8 length:u32be data``; the
messages section (tag 0x69) is a run of records, each a run of ``tag:u8`` fields ending in ``End``:
the translation (UTF-16BE, one per plural form), the source text, context and comment (UTF-8 or
Latin-1), each ``length:u32be bytes``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path

from corpora.debian.sources.base import Document, Source, register
from corpora.debian.sources.gettext import clean_ui_pairs, unique

QM_MAGIC = bytes.fromhex("3CB86418CAEF9C95CD211CBF60A1BDDD")
SECTION_MESSAGES = 0x69

TAG_END = 1
TAG_SOURCE_TEXT16 = 2
TAG_TRANSLATION = 3
TAG_CONTEXT16 = 4
TAG_OBSOLETE1 = 5
TAG_SOURCE_TEXT = 6
TAG_CONTEXT = 7
TAG_COMMENT = 8
NULL_LENGTH = 0xFFFFFFFF


def _latin_or_utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def read_qm(data: bytes) -> list[tuple[str, str]]:
    """The (source text, translation) messages of one .qm file, in file order.

    Messages without a source text (a stripped file), with an empty or null translation, or with more
    than one translation (plural forms, whose English source is written ``%n file(s)``) are left out.
    Raises ValueError for a file that is not a .qm file.
    """
    if not data.startswith(QM_MAGIC):
        raise ValueError("not a .qm file: bad magic")
    pos, messages = len(QM_MAGIC), b""
    while pos + 5 <= len(data):
        tag, length = data[pos], struct.unpack_from(">I", data, pos + 1)[0]
        if tag == SECTION_MESSAGES:
            messages = data[pos + 5 : pos + 5 + length]
        pos += 5 + length
    out = []
    pos, source, translations = 0, None, []
    while pos < len(messages):
        tag = messages[pos]
        pos += 1
        if tag == TAG_END:
            if source and len(translations) == 1 and translations[0]:
                out.append((source, translations[0]))
            source, translations = None, []
            continue
        if tag == TAG_OBSOLETE1:
            pos += 4
            continue
        if tag not in (TAG_SOURCE_TEXT16, TAG_TRANSLATION, TAG_CONTEXT16, TAG_SOURCE_TEXT, TAG_CONTEXT, TAG_COMMENT):
            break  # a field this reader does not know: the rest cannot be framed
        if pos + 4 > len(messages):
            break
        length = struct.unpack_from(">I", messages, pos)[0]
        pos += 4
        if length == NULL_LENGTH:
            if tag == TAG_TRANSLATION:
                translations.append("")
            continue
        raw = messages[pos : pos + length]
        pos += length
        if tag == TAG_TRANSLATION:
            translations.append(raw.decode("utf-16-be", errors="replace") if length % 2 == 0 else "")
        elif tag == TAG_SOURCE_TEXT:
            source = _latin_or_utf8(raw)
        elif tag == TAG_SOURCE_TEXT16:
            source = raw.decode("utf-16-be", errors="replace")
    return out


# A German file of a catalogue: ``name_de.qm``, ``name.de.qm``, ``de.qm`` or ``.../de/LC_MESSAGES/name.qm``;
# ``de_DE`` only where there is no plain ``de``. Regional and old-orthography variants (de_CH, de_AT,
# de_1901) repeat ``de`` and are left out.
_GERMAN_QM = re.compile(r"^(?P<stem>.*?)(?:^|[_.])(?P<loc>de|de_DE)\.qm$")


def find_qm_files(root: Path) -> list[Path]:
    """The German ``.qm`` files under an unpacked package."""
    found: dict[tuple[str, str], tuple[str, Path]] = {}
    for path in sorted(root.rglob("*.qm")):
        if not path.is_file():
            continue
        match = _GERMAN_QM.match(path.name)
        if match:
            key, loc = (path.parent.as_posix(), match.group("stem")), match.group("loc")
        elif path.parent.name == "LC_MESSAGES" and path.parent.parent.name in ("de", "de_DE"):
            key, loc = (path.parent.parent.parent.as_posix(), path.stem), path.parent.parent.name
        else:
            continue
        if key not in found or (loc == "de" and found[key][0] != "de"):
            found[key] = (loc, path)
    return sorted((path for _, path in found.values()), key=lambda p: p.relative_to(root).as_posix())


class QtSource(Source):
    """Qt ``.qm`` translations, one document per German file, kind "strings".

    ``&`` marks accelerators in Qt (``&&`` a literal ampersand) and is read strictly in a file where
    at least 1% of the messages carry one; rich text (``<html><head>…</head><body><p>…``) is reduced
    to its text.
    """

    name = "qt"
    kind = "strings"
    members = ("*de.qm", "*de_DE.qm", "*/de/LC_MESSAGES/*.qm", "*/de_DE/LC_MESSAGES/*.qm")

    def extract_package(self, package: str, root: Path) -> Iterator[Document]:
        seen: set[str] = set()
        for path in find_qm_files(root):
            doc_id = f"{package}/{path.name}"
            if doc_id in seen:
                doc_id = f"{package}/{path.relative_to(root).as_posix()}"
            seen.add(doc_id)
            try:
                messages = read_qm(path.read_bytes())
            except (ValueError, struct.error):
                continue
            pairs = unique(clean_ui_pairs(messages, "&"))
            if pairs:
                yield Document(doc_id, pairs, self.kind)


QT = register(QtSource())
