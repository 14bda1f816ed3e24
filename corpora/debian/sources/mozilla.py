"""Firefox ESR and Thunderbird interface strings: the German language pack against the built-in en-US.

``firefox-esr-l10n-de`` / ``thunderbird-l10n-de`` ship a language pack (``langpack-de@….xpi``, a zip)
with the German Fluent (``.ftl``), ``.properties`` and ``.dtd`` files; the English originals sit at the
same relative paths inside the application's own ``omni.ja`` archives (zips too; Firefox keeps the
browser's in ``browser/omni.ja``). Files are matched by their path with the locale segments (``de`` /
``en-US``) taken out, strings by key; each German file is one document, ``<l10n package>/<path in the
language pack>``.

Mozilla keeps access keys and shortcuts in keys of their own (``.accesskey``, ``.key``), which are
skipped. Fluent references to terms and other messages (``{ -brand-short-name }``) are replaced by their
plain value in that locale, as Firefox shows them; messages with selectors (plurals, cases) are skipped.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from corpora.debian.sources.base import Document, Pair, Source, register
from corpora.debian.sources.gettext import clean_ui_pair, unique

# (language-pack package, application package, application folder in the application package)
PRODUCTS = (
    ("firefox-esr-l10n-de", "firefox-esr", "usr/lib/firefox-esr"),
    ("thunderbird-l10n-de", "thunderbird", "usr/lib/thunderbird"),
)
#: Where inside an application folder its omni.ja archives are, and the prefix their paths get in a langpack.
OMNI_ARCHIVES = (("omni.ja", ""), ("browser/omni.ja", "browser/"))
STRING_FILES = (".ftl", ".properties", ".dtd")

Entries = dict[str, str]  # key -> raw value, in file order

# ---------------------------------------------------------------------------------------------------------------------
# File formats


def parse_properties(text: str) -> Entries:
    """``key = value`` lines of a Java-style ``.properties`` file (``#``/``!`` comments, ``\\`` line
    continuations, ``\\n``/``\\t``/``\\uXXXX`` escapes)."""
    out: Entries = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        logical.append(line)
    for line in logical:
        match = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)$", line)
        if match:
            out[match.group(1)] = _unescape_properties(match.group(2))
    return out


def _unescape_properties(value: str) -> str:
    def one(match: re.Match[str]) -> str:
        c = match.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}.get(c, c)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, value)


_DTD_ENTITY = re.compile(r"""<!ENTITY\s+([\w.:-]+)\s+(?:"([^"]*)"|'([^']*)')\s*>""", re.S)


def parse_dtd(text: str) -> Entries:
    """``<!ENTITY key "value">`` declarations of a ``.dtd`` file (comments removed first)."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in _DTD_ENTITY.finditer(text)}


_FTL_ENTRY = re.compile(r"(-?[a-zA-Z][a-zA-Z0-9_-]*)\s*=\s?(.*)$")
_FTL_ATTRIBUTE = re.compile(r"\.([a-zA-Z][a-zA-Z0-9_-]*)\s*=\s?(.*)$")


def parse_ftl(text: str) -> Entries:
    """Fluent messages and their attributes as ``id`` / ``id.attr`` -> pattern text (terms as ``-id``).

    Continuation lines of a multi-line pattern are joined with newlines; a pattern holding a selector
    (``{ $n -> … }``) is kept as it is and left out later (:func:`is_simple`).
    """
    out: Entries = {}
    key: str | None = None
    entry: str | None = None
    buf: list[str] = []

    def flush() -> None:
        if key is not None:
            value = "\n".join(buf).strip()
            if value:
                out[key] = value

    for line in text.splitlines():
        if not line.strip():
            buf.append("")
            continue
        if line.startswith("#"):
            flush()
            key, entry, buf = None, None, []
            continue
        if not line[0].isspace():
            flush()
            match = _FTL_ENTRY.match(line)
            if match:
                entry = key = match.group(1)
                buf = [match.group(2)]
            else:
                key, entry, buf = None, None, []
            continue
        stripped = line.strip()
        attribute = _FTL_ATTRIBUTE.match(stripped)
        if attribute and entry is not None:
            flush()
            key, buf = f"{entry}.{attribute.group(1)}", [attribute.group(2)]
        elif key is not None:
            buf.append(stripped)
    flush()
    return out


def parse_strings(path: str, data: bytes) -> Entries:
    text = data.decode("utf-8", errors="replace")
    if path.endswith(".ftl"):
        return parse_ftl(text)
    if path.endswith(".properties"):
        return parse_properties(text)
    return parse_dtd(text)


# ---------------------------------------------------------------------------------------------------------------------
# Resolving references, choosing keys

_FTL_REF = re.compile(r"\{\s*(-?[a-zA-Z][a-zA-Z0-9_-]*)(?:\.([a-zA-Z][a-zA-Z0-9_-]*))?\s*(?:\([^{}]*\))?\s*\}")
_FTL_LITERAL = re.compile(r"""\{\s*"((?:[^"\\]|\\.)*)"\s*\}""")
_DTD_REF = re.compile(r"&([a-zA-Z][\w.-]*);")
# Keys whose value is a key to press, a style or a size, not text.
_SKIP_KEY = re.compile(
    r"(?:^|[._-])(?:accesskey|commandkey|key|key\d|keycode|keybinding|modifiers|style|width|height)$"
    r"|(?:accesskey|AccessKey|CommandKey|commandkey)$"
)


def is_simple(value: str) -> bool:
    """A pattern without selectors (``->``)."""
    return "->" not in value


def resolve(value: str, table: Mapping[str, str], depth: int = 4) -> str:
    """Replace Fluent message/term references and DTD entity references whose target ``table`` holds as
    plain text; string literals (``{ "{" }``) become their text. Variables (``{ $n }``) stay."""
    for _ in range(depth):

        def ref(match: re.Match[str]) -> str:
            key = match.group(1) + (f".{match.group(2)}" if match.group(2) else "")
            target = table.get(key)
            return target if target is not None and is_simple(target) else match.group(0)

        new = _FTL_REF.sub(ref, value)
        new = _DTD_REF.sub(lambda m: table.get(m.group(1), m.group(0)), new)
        if new == value:
            break
        value = new
    return _FTL_LITERAL.sub(lambda m: re.sub(r"\\(.)", r"\1", m.group(1)), value)


def is_plural_list(value: str) -> bool:
    """A ``.properties`` plural list (``One tab;#1 tabs``)."""
    return ";" in value and re.search(r"#\d", value) is not None


# ---------------------------------------------------------------------------------------------------------------------
# Archives


def locale_neutral(path: str, locale: str, prefix: str = "") -> str:
    """A file's path with its locale segments replaced by ``{loc}``: the same for en-US and de."""
    return prefix + "/".join("{loc}" if part == locale else part for part in PurePosixPath(path).parts)


def _inside(root: Path, rel: str) -> Path | None:
    """``root/rel`` with symbolic links resolved inside ``root`` (an unpacked package is not installed:
    an absolute link target is taken relative to the package folder)."""
    path = root
    for part in PurePosixPath(rel).parts:
        path = path / part
        for _ in range(16):
            if not path.is_symlink():
                break
            target = Path(path.readlink())
            path = root / target.relative_to("/") if target.is_absolute() else (path.parent / target)
    return path if path.exists() else None


def read_archive_files(archive: Path, locale: str, prefix: str = "") -> dict[str, tuple[str, bytes]]:
    """locale-neutral path -> (path in the archive, bytes) of the string files under a ``locale`` segment."""
    out: dict[str, tuple[str, bytes]] = {}
    try:
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.endswith(STRING_FILES) and locale in PurePosixPath(name).parts:
                    out[locale_neutral(name, locale, prefix)] = (name, zf.read(name))
    except (zipfile.BadZipFile, OSError):
        return {}
    return out


def locale_table(files: Mapping[str, tuple[str, bytes]]) -> dict[str, dict[str, str]]:
    """Parsed entries per locale-neutral path, plus the locale-wide reference table under ``""``: every
    Fluent term and message and every DTD entity, first definition wins."""
    parsed = {key: parse_strings(name, data) for key, (name, data) in files.items()}
    table: dict[str, str] = {}
    for key in sorted(parsed):
        if key.endswith((".ftl", ".dtd")):
            for k, v in parsed[key].items():
                table.setdefault(k, v)
    parsed[""] = table
    return parsed


def pair_files(path: str, english: Entries, german: Entries, en_table: Entries, de_table: Entries) -> list[Pair]:
    """(English, German) of the keys both files have, in the English file's order."""
    pairs = []
    for key, en in english.items():
        de = german.get(key)
        if de is None or _SKIP_KEY.search(key) or not is_simple(en) or not is_simple(de):
            continue
        if path.endswith(".properties"):
            if is_plural_list(en) or is_plural_list(de):
                continue
            pair = clean_ui_pair(en, de, "&")
        else:
            pair = clean_ui_pair(resolve(en, en_table), resolve(de, de_table), "")
        if pair is not None:
            pairs.append(pair)
    return pairs


class MozillaSource(Source):
    """Firefox ESR / Thunderbird language packs, one document per German string file, kind "strings".

    A file that both products ship (the toolkit's) is emitted once, for the first product that has it,
    so the two packages do not hold the same document.
    """

    name = "mozilla"
    kind = "strings"
    members = ("*/langpack-de@*.xpi", "*/omni.ja")  # omni.ja may be a link to another omni.ja of the package

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        wanted = set(self.packages())
        emitted: set[str] = set()
        for l10n, app, app_dir in PRODUCTS:
            if l10n not in wanted or app not in wanted or l10n not in roots or app not in roots:
                continue
            for doc in self.extract_product(l10n, Path(roots[l10n]), Path(roots[app]), app_dir):
                neutral = doc.doc_id.split("/", 1)[1]
                neutral = locale_neutral(neutral, "de")
                if neutral in emitted:
                    continue
                emitted.add(neutral)
                yield doc

    def extract_product(self, l10n: str, l10n_root: Path, app_root: Path, app_dir: str) -> Iterator[Document]:
        german: dict[str, tuple[str, bytes]] = {}
        for langpack in sorted((l10n_root / app_dir).rglob("langpack-de@*.xpi")):
            german.update(read_archive_files(langpack, "de"))
        english: dict[str, tuple[str, bytes]] = {}
        for rel, prefix in OMNI_ARCHIVES:
            archive = _inside(app_root, f"{app_dir}/{rel}")
            if archive is not None:
                english.update(read_archive_files(archive, "en-US", prefix))
        if not german or not english:
            return
        de_parsed, en_parsed = locale_table(german), locale_table(english)
        for key in sorted(german, key=lambda k: german[k][0]):
            if key not in english:
                continue
            pairs = unique(pair_files(key, en_parsed[key], de_parsed[key], en_parsed[""], de_parsed[""]))
            if pairs:
                yield Document(f"{l10n}/{german[key][0]}", pairs, self.kind)


MOZILLA = register(MozillaSource())
