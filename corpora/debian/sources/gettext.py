"""German gettext catalogues (``.mo``) read back into (msgid, msgstr) pairs.

Nearly every program with a German interface ships ``<prefix>/locale/de/LC_MESSAGES/<domain>.mo``: the
English message and its German translation side by side, so one catalogue is one document
(``<package>/<domain>``). The binary format is parsed here (a few lines of ``struct``) rather than with
:mod:`gettext`, which hides the msgids and merges plural forms.

The interface-string helpers (:func:`clean_ui_pair`) are shared with the Qt and Mozilla sources: they
take keyboard accelerators out (GTK ``_Open``, Qt/KDE ``&File``, LibreOffice ``~Save``), strip simple
markup and decode entities, so both sides read as plain text.
"""

from __future__ import annotations

import html.entities
import re
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from corpora.debian.sources.base import Document, Pair, Source, register

MO_MAGIC = 0x950412DE

# ---------------------------------------------------------------------------------------------------------------------
# .mo parsing


def read_mo(data: bytes) -> list[tuple[str, str]]:
    """The (msgid, msgstr) entries of one .mo file, in the file's (sorted) order.

    Either byte order is accepted. A context (``msgctxt``, stored as ``ctx\\x04msgid``) is removed from the
    msgid; of a plural entry only the singular msgid and ``msgstr[0]`` are kept. The header entry (empty
    msgid) and untranslated entries (empty msgstr) are left out. Strings are decoded with the catalogue's
    declared charset (UTF-8 when it names none); an entry that does not decode is skipped.
    """
    if len(data) < 28:
        raise ValueError("not a .mo file: too short")
    for order in "<>":
        if struct.unpack(order + "I", data[:4])[0] == MO_MAGIC:
            break
    else:
        raise ValueError("not a .mo file: bad magic")
    _magic, _rev, n, orig_off, trans_off = struct.unpack(order + "5I", data[:20])

    def raw(table: int, i: int) -> bytes:
        length, off = struct.unpack_from(order + "2I", data, table + 8 * i)
        if off + length > len(data):
            raise ValueError("not a .mo file: string past the end")
        return data[off : off + length]

    charset = "utf-8"
    entries: list[tuple[bytes, bytes]] = []
    for i in range(n):
        msgid, msgstr = raw(orig_off, i), raw(trans_off, i)
        if not msgid:
            match = re.search(rb"charset=([A-Za-z0-9_.:-]+)", msgstr)
            if match and match.group(1).upper() != b"CHARSET":
                charset = match.group(1).decode("ascii")
            continue
        entries.append((msgid, msgstr))
    try:
        "".encode(charset)
    except LookupError:
        charset = "utf-8"

    out = []
    for msgid, msgstr in entries:
        msgid = msgid.split(b"\x00", 1)[0].rsplit(b"\x04", 1)[-1]
        msgstr = msgstr.split(b"\x00", 1)[0]
        if not msgid or not msgstr:
            continue
        try:
            out.append((msgid.decode(charset), msgstr.decode(charset)))
        except UnicodeDecodeError:
            continue
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Interface-string cleaning (shared with the Qt and Mozilla sources)

# Tags of the rich text that Gtk (Pango markup), Qt and KDE strings carry; anything else in angle brackets
# (``<file>``, ``<n>``) is a placeholder of the message and stays.
MARKUP_TAGS = (
    "a abbr b big blockquote body br center cite code dd div dl dt em font h1 h2 h3 h4 h5 h6 head hr html i img "
    "kbd li meta nobr ol p pre qt s samp small span strike strong sub sup table tbody td th thead tr tt u ul var"
).split()
_TAG = re.compile(r"</?(?:" + "|".join(MARKUP_TAGS) + r")\b[^<>]*?/?>", re.IGNORECASE)
_BREAK_TAG = re.compile(r"<(?:br|/?p|/?div|/?li|/?tr|hr)\b[^<>]*?/?>", re.IGNORECASE)
# Whole elements whose content is no text (Qt Designer's rich text starts with a <head> holding a <style>).
_DROP_ELEMENT = re.compile(
    r"<!DOCTYPE[^<>]*>|<!--.*?-->|<(head|style|script)\b[^<>]*>.*?</\1\s*>", re.IGNORECASE | re.S
)
_ENTITY = re.compile(r"&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_WS = re.compile(r"\s+")
# A keyboard-accelerator candidate: the marker, not doubled, right before a letter or digit (``&`` never
# where it starts an entity such as ``&amp;``).
_ACCEL = {
    "_": re.compile(r"(?<!_)_(?=[^\W_])"),
    "&": re.compile(r"(?<!&)&(?=[^\W_])(?![A-Za-z][A-Za-z0-9]*;|#[0-9]+;|#[xX][0-9a-fA-F]+;)"),
    "~": re.compile(r"(?<!~)~(?=[^\W_])"),
    "^": re.compile(r"(?<!\^)\^(?=[^\W_])"),
}
# What may stand right before an accelerator at the start of a word (``Video-&Zuschnitt``, ``/Datei/_Neu``).
_WORD_OPENERS = "([{\"'„“‚‘«»-/"
#: msgids whose translation is a list of translators, not a translation.
CREDIT_MSGIDS = frozenset(
    {
        "translator-credits",
        "translator_credits",
        "translators-credits",
        "Your names",
        "Your emails",
        "Your name",
        "Translator credits",
        "NAME OF TRANSLATORS",
        "EMAIL OF TRANSLATORS",
        "ROLES OF TRANSLATORS",
        "CREDIT FOR TRANSLATORS",
    }
)


# A desktop entry's search keywords ("Power;Sleep;Suspend;"): translators add and drop words freely.
_KEYWORD_LIST = re.compile(r"[^;]+;[^;]+(?:;[^;]+)*;")


def decode_entities(text: str) -> str:
    """Decode ``&name;`` / ``&#n;`` / ``&#xh;`` references, and only those.

    :func:`html.unescape` would also read ``&notify`` as ``¬ify`` (HTML's legacy names without ``;``),
    which in an interface string is an accelerator before ``notify``.
    """

    def one(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref.startswith("#"):
            try:
                code = int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:])
                return chr(code) if 0 < code < 0x110000 else match.group(0)
            except ValueError:
                return match.group(0)
        return html.entities.html5.get(ref + ";", match.group(0))

    return _ENTITY.sub(one, text)


def strip_markup(text: str) -> str:
    """Remove known rich-text tags (line-breaking ones become a space), then decode entities."""
    text = _DROP_ELEMENT.sub(" ", text)
    text = _BREAK_TAG.sub(" ", text)
    text = _TAG.sub("", text)
    return decode_entities(text)


def normalise_space(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _token_at(text: str, pos: int) -> str:
    start = pos
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    end = pos
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[start:end]


def find_accelerator(text: str, other: str, char: str) -> int | None:
    """Where ``text`` has a keyboard accelerator marked with ``char``, or None (the careful reading, for
    catalogues where the marker may as well be literal text).

    An interface label has one accelerator, so a side with two or more candidates has none (that is
    ``ON_ERROR_STOP``, ``_vimrc, _gvimrc``). The one candidate must start a word (``_Open``, ``(&Datei)``)
    or sit inside one (``Ö_ffnen``, ``Ba&ss``); after anything else (``%<_Atomic%>``, ``.~lock``) it is
    code. A candidate whose whole token appears unchanged on the other side is an identifier
    (``make_builtin``, ``_vimrc``, ``R&D``) unless it starts the word and an upper-case letter or digit
    follows (``_Server`` / ``Mit _Server verbinden``): labels do that, identifiers rarely.
    """
    found = list(_ACCEL[char].finditer(text))
    if len(found) != 1:
        return None
    pos = found[0].start()
    before = text[pos - 1] if pos else " "
    at_word_start = before.isspace() or before in _WORD_OPENERS
    if not at_word_start and not before.isalpha():
        return None
    if _token_at(text, pos) in other.split():
        after = text[pos + 1]
        if not (at_word_start and (after.isupper() or after.isdigit())):
            return None
    return pos


def _strip_marker(text: str, other: str, char: str, strict: bool) -> str:
    if strict:
        # every single marker is one; a doubled one is the escaped literal character
        return _ACCEL[char].sub("", text).replace(char + char, char)
    pos = find_accelerator(text, other, char)
    return text if pos is None else text[:pos] + text[pos + 1 :]


def strip_accelerators(english: str, german: str, chars: str = "_&", strict: str = "") -> Pair:
    """Remove the keyboard-accelerator markers ``chars`` from both sides of a pair.

    For a marker in ``strict`` (a catalogue known to mark every label with it, where a literal one is
    written doubled: ``&`` in Qt and KDE, ``~`` in LibreOffice) each single marker before a letter or digit
    goes and ``&&`` becomes ``&``; for the others only what :func:`find_accelerator` finds goes.
    """
    for char in chars:
        if char in english or char in german:
            english, german = (
                _strip_marker(english, german, char, char in strict),
                _strip_marker(german, english, char, char in strict),
            )
    return english, german


def uses_accelerators(entries: Sequence[Pair], char: str = "&", share: float = 0.01) -> bool:
    """Whether at least ``share`` of a catalogue's English strings carry a ``char`` accelerator (read the
    careful way): then the catalogue marks its labels with it and can be read strictly."""
    if not entries:
        return False
    hits = sum(1 for en, de in entries if char in en and find_accelerator(en, de, char) is not None)
    return hits >= max(2, share * len(entries))


def clean_ui_pair(english: str, german: str, accelerators: str = "_&", strict: str = "") -> Pair | None:
    """One interface-string pair as plain text: accelerators out, markup out, entities decoded, spaces
    normalised; None when a side is left empty, or for the translator credits and keyword lists."""
    if english.strip() in CREDIT_MSGIDS or _KEYWORD_LIST.fullmatch(english.strip()):
        return None
    english, german = strip_accelerators(english, german, accelerators, strict)
    english, german = normalise_space(strip_markup(english)), normalise_space(strip_markup(german))
    if not english or not german:
        return None
    return english, german


def unique(pairs: list[Pair]) -> list[Pair]:
    """Pairs in order with exact repeats dropped (one message in several contexts is one pair)."""
    return list(dict.fromkeys(pairs))


def clean_ui_pairs(entries: Sequence[Pair], accelerators: str = "_&", strict: str = "") -> list[Pair]:
    """:func:`clean_ui_pair` over one catalogue; ``&`` is read strictly when the catalogue uses ``&``
    accelerators (:func:`uses_accelerators`), as Qt, KDE and wxWidgets catalogues do."""
    if "&" in accelerators and "&" not in strict and uses_accelerators(entries, "&"):
        strict += "&"
    out = []
    for en, de in entries:
        pair = clean_ui_pair(en, de, accelerators, strict)
        if pair is not None:
            out.append(pair)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The source

# Where a package keeps its German catalogues: the system locale tree, Ubuntu-style language packs, and any
# program's private tree (``usr/share/games/wesnoth/1.16/locale/de/...``,
# ``usr/lib/libreoffice/program/resource/de/...``).
LOCALE_DIRS = ("de", "de_DE")

#: Packages whose catalogues are game dialogue and story text rather than interface strings.
NARRATIVE_PACKAGES = ("wesnoth-", "widelands")
#: A narrative package's catalogue is kind "sentences" when its pairs average at least this many English words.
NARRATIVE_MIN_WORDS = 8.0


#: Catalogues whose labels mark their accelerator with a character of their own, always (read strictly).
DOMAIN_ACCELERATORS = {"aptitude": "^"}

# Wesnoth's help markup: ``<bold>text='…'</bold>``, ``<ref>dst='…' text='…'</ref>`` keep their text,
# ``<img>src=…</img>`` goes; a msgid may start with a disambiguating context, ``teamname^Enemies``.
_WML_ELEMENT = re.compile(r"<(bold|italic|header|ref|format|jump)>(.*?)</\1>", re.S)
_WML_TEXT = re.compile(r"""text=(?:'([^']*)'|"([^"]*)"|(\S+))""")
_WML_IMG = re.compile(r"<img>.*?</img>", re.S)
_WML_CONTEXT = re.compile(r"^[A-Za-z][\w ]*\^(?=\S)")


def wesnoth_text(text: str) -> str:
    """A Wesnoth string with its help markup resolved to the text it shows and its context prefix removed."""

    def element(match: re.Match[str]) -> str:
        text = _WML_TEXT.search(match.group(2))
        return next((g for g in text.groups() if g is not None), "") if text else ""

    text = _WML_CONTEXT.sub("", text)
    text = _WML_IMG.sub(" ", text)
    return _WML_ELEMENT.sub(element, text)


# A qualified msgid (freeciv's ``Q_("?tech:None")``): the program shows only the text after the colon, and
# translators write only that.
_QUALIFIER = re.compile(r"^\?[\w.-]+:(?=\S)")


def strip_qualifier(english: str, german: str) -> Pair:
    """A pair with a ``?qualifier:`` prefix taken off the msgid (and off the msgstr, where it was copied)."""
    return _QUALIFIER.sub("", english, count=1), _QUALIFIER.sub("", german, count=1)


def find_catalogues(root: Path) -> list[Path]:
    """The German ``.mo`` files under an unpacked package, ``de`` preferred over ``de_DE`` per domain.

    Regional variants (``de_AT``, ``de_CH``) are left out: they repeat ``de`` with a few spellings changed.
    """
    found: dict[tuple[str, str], Path] = {}
    for path in sorted(root.rglob("*.mo")):
        if path.parent.name != "LC_MESSAGES" or path.parent.parent.name not in LOCALE_DIRS:
            continue
        if not path.is_file():
            continue
        prefix = path.parent.parent.parent.relative_to(root).as_posix()
        key = (prefix, path.stem)
        if key in found and found[key].parent.parent.name == "de":
            continue
        found[key] = path
    return sorted(found.values(), key=lambda p: p.relative_to(root).as_posix())


def _kind(package: str, pairs: list[Pair]) -> str:
    if not package.startswith(NARRATIVE_PACKAGES) or not pairs:
        return "strings"
    words = sum(len(en.split()) for en, _ in pairs) / len(pairs)
    return "sentences" if words >= NARRATIVE_MIN_WORDS else "strings"


class GettextSource(Source):
    """``.mo`` catalogues: one document per catalogue, ``<package>/<domain>``.

    Kind is "strings", except a catalogue of a game's story (Wesnoth campaigns, Widelands scenarios:
    packages starting with ``wesnoth-`` or ``widelands``) whose pairs average at least
    ``NARRATIVE_MIN_WORDS`` English words: that is dialogue and narration, kind "sentences". When one
    package has two catalogues of the same domain in different trees, the later ones are named by their
    path instead.
    """

    name = "gettext"
    kind = "strings"
    members = tuple(f"*/{loc}/LC_MESSAGES/*.mo" for loc in LOCALE_DIRS)

    def extract_package(self, package: str, root: Path) -> Iterator[Document]:
        seen: set[str] = set()
        for path in find_catalogues(root):
            doc_id = f"{package}/{path.stem}"
            if doc_id in seen:
                doc_id = f"{package}/{path.relative_to(root).as_posix()}"
            seen.add(doc_id)
            try:
                entries = read_mo(path.read_bytes())
            except (ValueError, struct.error):
                continue
            if package.startswith("wesnoth-"):
                entries = [(wesnoth_text(en), wesnoth_text(de)) for en, de in entries]
            entries = [strip_qualifier(en, de) for en, de in entries]
            # "~" marks accelerators only in LibreOffice's catalogues; elsewhere it is a Lisp format (~a) or "about"
            strict = (
                "~" if "libreoffice/program/resource/" in path.as_posix() else DOMAIN_ACCELERATORS.get(path.stem, "")
            )
            pairs = unique(clean_ui_pairs(entries, "_&" + strict, strict))
            if pairs:
                yield Document(doc_id, pairs, _kind(package, pairs))


GETTEXT = register(GettextSource())
