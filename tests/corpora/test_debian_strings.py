"""Interface-string sources of the Debian corpus: gettext .mo, Qt .qm, Mozilla language packs.

Every input is written here in its binary or archive format by a small writer, so the readers are
tested against the formats as documented rather than against real packages.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from corpora.debian.sources.base import SOURCES, read_package_list
from corpora.debian.sources.gettext import (
    GETTEXT,
    clean_ui_pair,
    clean_ui_pairs,
    decode_entities,
    read_mo,
    strip_accelerators,
    strip_qualifier,
    wesnoth_text,
)
from corpora.debian.sources.mozilla import MOZILLA, parse_dtd, parse_ftl, parse_properties, resolve
from corpora.debian.sources.qt import QM_MAGIC, QT, find_qm_files, read_qm

# ---------------------------------------------------------------------------------------------------------------------
# writers


def write_mo(entries: list[tuple[str, str]], big_endian: bool = False, charset: str = "UTF-8") -> bytes:
    """A GNU .mo file: header entry first, then the entries sorted by msgid (as msgfmt writes them)."""
    header = ("", f"Content-Type: text/plain; charset={charset}\nPlural-Forms: nplurals=2; plural=(n != 1);\n")
    items = sorted([header, *entries], key=lambda e: e[0].encode(charset))
    order = ">" if big_endian else "<"
    n = len(items)
    orig_off, trans_off = 28, 28 + 8 * n
    pos = trans_off + 8 * n
    ids, strs, blob = [], [], b""
    for table, index in ((ids, 0), (strs, 1)):
        for item in items:
            raw = item[index].encode(charset)
            table.append((len(raw), pos + len(blob)))
            blob += raw + b"\0"
    out = struct.pack(order + "7I", 0x950412DE, 0, n, orig_off, trans_off, 0, 0)
    out += b"".join(struct.pack(order + "2I", *e) for e in ids)
    out += b"".join(struct.pack(order + "2I", *e) for e in strs)
    return out + blob


def write_qm(messages: list[dict], with_sources: bool = True) -> bytes:
    """A Qt .qm file: magic, a (dummy) hash section and the messages section."""
    body = b""
    for msg in messages:
        for tr in msg["translations"]:
            raw = tr.encode("utf-16-be")
            body += bytes([3]) + struct.pack(">I", len(raw)) + raw
        if with_sources:
            src = msg["source"].encode("utf-8")
            body += bytes([6]) + struct.pack(">I", len(src)) + src
        ctx = msg.get("context", "Ctx").encode("utf-8")
        body += bytes([7]) + struct.pack(">I", len(ctx)) + ctx
        body += bytes([8]) + struct.pack(">I", 0)
        body += bytes([1])
    hashes = struct.pack(">II", 0x1234, 0)
    return (
        QM_MAGIC
        + bytes([0x42])
        + struct.pack(">I", len(hashes))
        + hashes
        + bytes([0x69])
        + struct.pack(">I", len(body))
        + body
    )


def write_zip(path: Path, files: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)


def put(root: Path, rel: str, data: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# gettext


MO_ENTRIES = [
    ("Open a file", "Eine Datei öffnen"),
    ("menu\x04Quit", "Beenden"),  # msgctxt is removed
    ("%d file\x00%d files", "%d Datei\x00%d Dateien"),  # plural: singular msgid, msgstr[0]
    ("Untranslated", ""),  # skipped
]


@pytest.mark.parametrize("big_endian", [False, True])
def test_read_mo_context_plural_header_and_empty(big_endian: bool) -> None:
    entries = read_mo(write_mo(MO_ENTRIES, big_endian=big_endian))
    assert sorted(entries) == sorted(
        [("Open a file", "Eine Datei öffnen"), ("Quit", "Beenden"), ("%d file", "%d Datei")]
    )


def test_read_mo_declared_charset_and_bad_files() -> None:
    assert read_mo(write_mo([("Size", "Größe")], charset="ISO-8859-1")) == [("Size", "Größe")]
    with pytest.raises(ValueError):
        read_mo(b"\0" * 40)


def test_accelerators_are_stripped_but_identifiers_and_code_stay() -> None:
    assert strip_accelerators("_Open", "Ö_ffnen") == ("Open", "Öffnen")
    assert strip_accelerators("Connect to _Server", "Mit _Server verbinden") == (
        "Connect to Server",
        "Mit Server verbinden",
    )
    assert strip_accelerators("&File", "&Datei") == ("File", "Datei")
    assert strip_accelerators("Automatic Video Clipping", "Video-&Zuschnitt") == (
        "Automatic Video Clipping",
        "Video-Zuschnitt",
    )
    # identifiers, code and a literal ampersand between words are not accelerators
    assert strip_accelerators("set make_builtin now", "make_builtin setzen") == (
        "set make_builtin now",
        "make_builtin setzen",
    )
    assert strip_accelerators("see %<_Atomic%>", "siehe %<_Atomic%>") == ("see %<_Atomic%>", "siehe %<_Atomic%>")
    assert strip_accelerators("ON_ERROR_STOP is set", "ON_ERROR_STOP ist gesetzt")[0] == "ON_ERROR_STOP is set"
    assert strip_accelerators("R&D", "R&D") == ("R&D", "R&D")
    assert strip_accelerators("Tom &amp; Jerry", "Tom &amp; Jerry") == ("Tom &amp; Jerry", "Tom &amp; Jerry")
    # strict reading: every single marker goes, a doubled one is the literal character
    assert strip_accelerators("Drag && &Drop", "Ziehen && &Ablegen", "&", strict="&") == (
        "Drag & Drop",
        "Ziehen & Ablegen",
    )
    assert strip_accelerators("~Save", "~Speichern", "~", strict="~") == ("Save", "Speichern")


def test_clean_ui_pair_markup_entities_space_credits() -> None:
    assert clean_ui_pair("<b>Bold</b>  text&#33;\n", "<span weight='bold'>Fetter</span> Text&excl;") == (
        "Bold text!",
        "Fetter Text!",
    )
    assert clean_ui_pair("Usage: cp <file>", "Aufruf: cp <Datei>") == ("Usage: cp <file>", "Aufruf: cp <Datei>")
    assert clean_ui_pair("translator-credits", "Max Mustermann") is None
    assert clean_ui_pair("Color;ICC;Profile;", "Farbe;ICC;Profil;Kalibrierung;") is None
    assert clean_ui_pair("<b></b>", "<i></i>") is None
    qt_rich = "<html><head><style>p { margin: 0 }</style></head><body><p>Hello</p><p>world</p></body></html>"
    assert clean_ui_pair(qt_rich, "<html><body><p>Hallo Welt</p></body></html>") == ("Hello world", "Hallo Welt")
    # legacy HTML names without ';' are not entities: "&notify" is an accelerator before "notify"
    assert decode_entities("&notify &lt; &amp;") == "&notify < &"


def test_clean_ui_pairs_detects_ampersand_catalogues() -> None:
    qt_like = [(f"&Item {i}", f"&Eintrag {i}") for i in range(5)] + [("Black && White", "Schwarz && Weiß")]
    assert clean_ui_pairs(qt_like)[-1] == ("Black & White", "Schwarz & Weiß")
    shell = [("run a && b", "a && b ausführen")]
    assert clean_ui_pairs(shell) == [("run a && b", "a && b ausführen")]


def test_wesnoth_markup_and_context() -> None:
    text = "editor^<bold>text='Castle'</bold> <img>src='a.png' align=here</img> see <ref>dst='x' text='traits'</ref>"
    assert " ".join(wesnoth_text(text).split()) == "Castle see traits"


def test_freeciv_qualifiers_are_taken_off() -> None:
    assert strip_qualifier("?tech:None", "Keine") == ("None", "Keine")
    assert strip_qualifier("?diplomaticrank:secretary", "?diplomaticrank:Sekretär") == ("secretary", "Sekretär")
    assert strip_qualifier("?Why not", "Warum nicht?") == ("?Why not", "Warum nicht?")
    assert strip_qualifier("Time: 5 s", "Zeit: 5 s") == ("Time: 5 s", "Zeit: 5 s")


def test_gettext_source_documents(tmp_path: Path) -> None:
    roots = {}
    core = tmp_path / "coreutils"
    put(core, "usr/share/locale/de/LC_MESSAGES/coreutils.mo", write_mo(MO_ENTRIES + [("_Save", "_Speichern")]))
    put(core, "usr/share/locale/de_DE/LC_MESSAGES/coreutils.mo", write_mo([("Other", "Anders")]))  # de wins
    put(core, "usr/share/locale/de_CH/LC_MESSAGES/coreutils.mo", write_mo([("Street", "Strasse")]))  # variant
    put(core, "usr/share/locale/fr/LC_MESSAGES/coreutils.mo", write_mo([("Open", "Ouvrir")]))
    roots["coreutils"] = core
    lo = tmp_path / "lo"
    put(lo, "usr/lib/libreoffice/program/resource/de/LC_MESSAGES/sw.mo", write_mo([("~Save As", "Speichern ~unter")]))
    roots["libreoffice-l10n-de"] = lo
    game = tmp_path / "game"
    story = [
        (f"The old king rode north to the frozen hills number {i}.", f"Der alte König ritt {i}.") for i in range(3)
    ]
    put(game, "usr/share/games/wesnoth/1.16/locale/de/LC_MESSAGES/wesnoth-httt.mo", write_mo(story))
    roots["wesnoth-1.16-httt"] = game
    roots["not-in-the-list"] = core

    docs = {d.doc_id: d for d in GETTEXT.extract(roots)}
    assert set(docs) == {"coreutils/coreutils", "libreoffice-l10n-de/sw", "wesnoth-1.16-httt/wesnoth-httt"}
    assert docs["coreutils/coreutils"].kind == "strings"
    assert ("Save", "Speichern") in docs["coreutils/coreutils"].pairs
    assert ("Quit", "Beenden") in docs["coreutils/coreutils"].pairs
    assert ("Other", "Anders") not in docs["coreutils/coreutils"].pairs
    assert docs["libreoffice-l10n-de/sw"].pairs == [("Save As", "Speichern unter")]
    assert docs["wesnoth-1.16-httt/wesnoth-httt"].kind == "sentences"


# ---------------------------------------------------------------------------------------------------------------------
# Qt


def test_read_qm_and_qt_source(tmp_path: Path) -> None:
    messages = [
        {"source": "&Open", "translations": ["Ö&ffnen"]},
        {"source": "<html><body><p>A <b>bold</b> move</p></body></html>", "translations": ["Ein <b>kühner</b> Zug"]},
        {"source": "%n file(s)", "translations": ["%n Datei", "%n Dateien"]},  # plural: skipped
        {"source": "Empty", "translations": [""]},  # untranslated: skipped
        {"source": "&Open", "translations": ["Ö&ffnen"], "context": "Other"},  # same pair, other context
    ] + [{"source": f"&Item {i}", "translations": [f"&Eintrag {i}"]} for i in range(3)]
    data = write_qm(messages)
    assert read_qm(data)[:2] == [
        ("&Open", "Ö&ffnen"),
        ("<html><body><p>A <b>bold</b> move</p></body></html>", "Ein <b>kühner</b> Zug"),
    ]
    assert len(read_qm(data)) == 6
    assert read_qm(write_qm(messages, with_sources=False)) == []

    root = tmp_path / "keepassxc"
    put(root, "usr/share/keepassxc/translations/keepassxc_de.qm", data)
    put(root, "usr/share/keepassxc/translations/keepassxc_de_CH.qm", data)
    put(root, "usr/share/keepassxc/translations/keepassxc_fr.qm", data)
    put(root, "usr/share/locale/de/LC_MESSAGES/kfoo5_qt.qm", write_qm(messages[:1]))
    put(root, "usr/share/keepassxc/translations/stripped_de.qm", write_qm(messages, with_sources=False))
    assert [p.name for p in find_qm_files(root)] == ["keepassxc_de.qm", "stripped_de.qm", "kfoo5_qt.qm"]
    docs = {d.doc_id: d for d in QT.extract({"keepassxc": root})}
    assert set(docs) == {"keepassxc/keepassxc_de.qm", "keepassxc/kfoo5_qt.qm"}
    pairs = docs["keepassxc/keepassxc_de.qm"].pairs
    assert pairs[:2] == [("Open", "Öffnen"), ("A bold move", "Ein kühner Zug")]
    assert len(pairs) == 5  # the repeated pair is kept once


# ---------------------------------------------------------------------------------------------------------------------
# Mozilla

EN_FTL = """# comment
-brand-short-name = Firefox
open-file = Open File
    .accesskey = O
    .tooltiptext = Open a file from { -brand-short-name }
tabs-count = { $count ->
    [one] One tab
   *[other] { $count } tabs
}
multi =
    First line
    second line
ref-title = { open-file }
"""
DE_FTL = """-brand-short-name = Firefox
open-file = Datei öffnen
    .accesskey = f
    .tooltiptext = Eine Datei aus { -brand-short-name } öffnen
tabs-count = { $count ->
    [one] Ein Tab
   *[other] { $count } Tabs
}
multi =
    Erste Zeile
    zweite Zeile
ref-title = { open-file }
"""
EN_PROPS = "# c\nYes=&Yes\nsave.accesskey=S\ntabs=One tab;#1 tabs\nlong=a long \\\n    line\n"
DE_PROPS = "Yes = &Ja\nsave.accesskey = p\ntabs = Ein Tab;#1 Tabs\nlong = eine lange \\\n    Zeile\n"
EN_DTD = '<!ENTITY brandShortName "Thunderbird">\n<!-- c -->\n<!ENTITY about.label "About &brandShortName;">\n'
DE_DTD = "<!ENTITY brandShortName \"Thunderbird\">\n<!ENTITY about.label 'Über &brandShortName;'>\n"


def test_mozilla_parsers() -> None:
    ftl = parse_ftl(EN_FTL)
    assert ftl["open-file"] == "Open File" and ftl["open-file.accesskey"] == "O"
    assert ftl["multi"] == "First line\nsecond line"
    assert resolve(ftl["open-file.tooltiptext"], ftl) == "Open a file from Firefox"
    assert resolve('{ "{" } x { $n }', ftl) == "{ x { $n }"
    assert parse_properties(EN_PROPS)["long"] == "a long line"
    assert parse_properties("k=caf\\u00e9\\n") == {"k": "café\n"}
    assert parse_dtd(EN_DTD)["about.label"] == "About &brandShortName;"


def test_mozilla_source(tmp_path: Path) -> None:
    ff_l10n, ff, tb_l10n, tb = (tmp_path / n for n in ("ffl", "ff", "tbl", "tb"))
    write_zip(
        ff_l10n / "usr/lib/firefox-esr/browser/extensions/langpack-de@firefox-esr.mozilla.org.xpi",
        {
            "browser/localization/de/browser/menu.ftl": DE_FTL,
            "chrome/de/locale/de/global/dialog.properties": DE_PROPS,
            "localization/de/toolkit/shared.ftl": "shared = Geteilt\n",
            "localization/de/toolkit/only-de.ftl": "x = Nur\n",
        },
    )
    write_zip(ff / "usr/lib/firefox-esr/browser/omni.ja", {"localization/en-US/browser/menu.ftl": EN_FTL})
    write_zip(
        ff / "usr/lib/firefox-esr/omni.ja",
        {
            "chrome/en-US/locale/en-US/global/dialog.properties": EN_PROPS,
            "localization/en-US/toolkit/shared.ftl": "shared = Shared\n",
        },
    )
    write_zip(
        tb_l10n / "usr/lib/thunderbird/extensions/langpack-de@thunderbird.mozilla.org.xpi",
        {"chrome/de/locale/de/messenger/about.dtd": DE_DTD, "localization/de/toolkit/shared.ftl": "shared = Geteilt\n"},
    )
    # Thunderbird's omni.ja is a relative symbolic link into usr/share, as in the package
    write_zip(
        tb / "usr/share/thunderbird/omni.ja",
        {
            "chrome/en-US/locale/en-US/messenger/about.dtd": EN_DTD,
            "localization/en-US/toolkit/shared.ftl": "shared = Shared\n",
        },
    )
    (tb / "usr/lib/thunderbird").mkdir(parents=True)
    (tb / "usr/lib/thunderbird/omni.ja").symlink_to("../../share/thunderbird/omni.ja")

    roots = {"firefox-esr-l10n-de": ff_l10n, "firefox-esr": ff, "thunderbird-l10n-de": tb_l10n, "thunderbird": tb}
    docs = {d.doc_id: d for d in MOZILLA.extract(roots)}
    assert set(docs) == {
        "firefox-esr-l10n-de/browser/localization/de/browser/menu.ftl",
        "firefox-esr-l10n-de/chrome/de/locale/de/global/dialog.properties",
        "firefox-esr-l10n-de/localization/de/toolkit/shared.ftl",  # once, not again for Thunderbird
        "thunderbird-l10n-de/chrome/de/locale/de/messenger/about.dtd",
    }
    menu = docs["firefox-esr-l10n-de/browser/localization/de/browser/menu.ftl"].pairs
    assert menu == [
        ("Firefox", "Firefox"),
        ("Open File", "Datei öffnen"),
        ("Open a file from Firefox", "Eine Datei aus Firefox öffnen"),
        ("First line second line", "Erste Zeile zweite Zeile"),
    ]  # ref-title resolves to open-file's text: the same pair, kept once
    assert docs["firefox-esr-l10n-de/chrome/de/locale/de/global/dialog.properties"].pairs == [
        ("Yes", "Ja"),
        ("a long line", "eine lange Zeile"),
    ]
    assert docs["thunderbird-l10n-de/chrome/de/locale/de/messenger/about.dtd"].pairs == [
        ("Thunderbird", "Thunderbird"),
        ("About Thunderbird", "Über Thunderbird"),
    ]
    # without its application a language pack gives nothing
    assert list(MOZILLA.extract({"firefox-esr-l10n-de": ff_l10n})) == []


# ---------------------------------------------------------------------------------------------------------------------
# registration and package lists


@pytest.mark.parametrize("name", ["gettext", "qt", "mozilla"])
def test_sources_registered_with_package_lists(name: str) -> None:
    source = SOURCES[name]
    assert source.kind == "strings"
    packages = read_package_list(name)
    assert packages and len(packages) == len(set(packages))
    assert source.packages() == packages
    assert all(p == p.strip() and " " not in p for p in packages)
