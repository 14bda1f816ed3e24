"""Structurally aligned documentation sources: LibreOffice help by paragraph id, GNOME Mallard pages,
KDE handbook caches and DocBook HTML manuals by block sequence."""

from __future__ import annotations

import bz2
from pathlib import Path

from corpora.debian.sources import docbooks
from corpora.debian.sources.blocks import DOCBOOK, HTML, MALLARD, align_blocks, parse_blocks
from corpora.debian.sources.docbooks import DocbookManuals, Manual
from corpora.debian.sources.gnome_help import GnomeHelp
from corpora.debian.sources.kde_doc import KdeDoc, kde_cache_pages
from corpora.debian.sources.libreoffice_help import LibreOfficeHelp, pair_pages


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- LibreOffice help

LO_EN = """<html><body><div id="DisplayArea">
<h1 id="hd_id1">Standard Filter</h1>
<p id="par_id2" class="paragraph">Use the <span class="emph">Standard Filter</span> to refine searches.</p>
<p id="par_id3" class="code">=SUM(A1:A3)</p>
<p id="par_id4">LibreOffice</p>
<p id="par_id5">Only in English.</p>
<p id="par_id2">Use the <span class="emph">Standard Filter</span> again.</p>
<pre><p id="par_id6">code</p></pre>
</div></body></html>"""

LO_DE = """<html><body><div id="DisplayArea">
<p id="par_id2" class="paragraph">Verwenden Sie den <span class="emph">Standardfilter</span>, um Suchen
 zu verfeinern.</p>
<h1 id="hd_id1">Standardfilter</h1>
<p id="par_id3" class="code">=SUMME(A1:A3)</p>
<p id="par_id4">LibreOffice</p>
<p id="par_id2">Verwenden Sie den <span class="emph">Standardfilter</span> erneut.</p>
</div></body></html>"""


def test_libreoffice_pairs_by_id_and_occurrence() -> None:
    pairs = pair_pages(LO_EN, LO_DE)
    assert pairs == [
        ("Standard Filter", "Standardfilter"),
        ("Use the Standard Filter to refine searches.", "Verwenden Sie den Standardfilter, um Suchen zu verfeinern."),
        ("Use the Standard Filter again.", "Verwenden Sie den Standardfilter erneut."),
    ]  # code paragraphs, untranslated text and ids missing on one side are left out


def test_libreoffice_source_doc_ids(tmp_path: Path) -> None:
    en_root, de_root = tmp_path / "en", tmp_path / "de"
    _write(en_root / "usr/share/libreoffice/help/en-US/text/scalc/01/12090000.html", LO_EN)
    _write(de_root / "usr/share/libreoffice/help/de/text/scalc/01/12090000.html", LO_DE)
    _write(en_root / "usr/share/libreoffice/help/en-US/text/swriter/only_en.html", LO_EN)
    docs = list(LibreOfficeHelp().extract({"libreoffice-help-en-us": en_root, "libreoffice-help-de": de_root}))
    assert [d.doc_id for d in docs] == ["libreoffice-help/scalc/01/12090000"]
    assert len(docs[0].pairs) == 3 and docs[0].kind == "sentences"
    assert list(LibreOfficeHelp().extract({"libreoffice-help-de": de_root})) == []


# ---------------------------------------------------------------- block parsing and alignment

PAGE_EN = """<?xml version="1.0" encoding="utf-8"?>
<page xmlns="http://projectmallard.org/1.0/" id="net-wireless-connect">
  <info>
    <credit type="author"><name>GNOME Documentation Project</name></credit>
    <license><p>Creative Commons Share Alike 3.0</p></license>
    <desc>Get on the internet &#8212; wirelessly.</desc>
  </info>
  <title>Connect to a wireless network</title>
  <p>Open the <gui>system menu</gui> from the right side of the top bar.</p>
  <steps>
    <item><p>Click <guiseq><gui>Settings</gui><gui>Wi-Fi</gui></guiseq> and press
      <keyseq><key>Ctrl</key><key>W</key></keyseq>.</p></item>
    <item><p>Type the <em>password</em> and click <code>Connect</code>.</p></item>
  </steps>
  <code>nmcli device wifi connect</code>
  <screen>$ nmcli radio</screen>
  <p>GNOME</p>
</page>
"""

PAGE_DE = """<?xml version="1.0" encoding="utf-8"?>
<page xmlns="http://projectmallard.org/1.0/" id="net-wireless-connect">
  <info>
    <credit type="author"><name>GNOME-Dokumentationsprojekt</name></credit>
    <license><p>Creative Commons Share Alike 3.0</p></license>
    <desc>Gehen Sie ins Internet &#8212; drahtlos.</desc>
    <mal:credit xmlns:mal="http://projectmallard.org/1.0/" type="translator copyright">
      <mal:name>Mario</mal:name><mal:years>2011</mal:years>
    </mal:credit>
  </info>
  <title>Verbinden mit einem Funknetzwerk</title>
  <p>Öffnen Sie das <gui>Systemmenü</gui> auf der rechten Seite der oberen Leiste.</p>
  <steps>
    <item><p>Klicken Sie auf <guiseq><gui>Einstellungen</gui><gui>WLAN</gui></guiseq> und drücken Sie
      <keyseq><key>Strg</key><key>W</key></keyseq>.</p></item>
    <item><p>Geben Sie das <em>Passwort</em> ein und klicken Sie auf <code>Connect</code>.</p></item>
  </steps>
  <code>nmcli device wifi connect</code>
  <screen>$ nmcli radio</screen>
  <p>GNOME</p>
</page>
"""


def test_mallard_blocks_keep_inline_text_and_drop_code() -> None:
    got = parse_blocks(PAGE_EN, MALLARD)
    assert got == [
        ("desc", "Get on the internet \u2014 wirelessly."),
        ("title", "Connect to a wireless network"),
        ("p", "Open the system menu from the right side of the top bar."),
        ("p", "Click Settings \u25b8 Wi-Fi and press Ctrl+W."),
        ("p", "Type the password and click Connect."),
        ("p", "GNOME"),
    ]


def test_gnome_help_pairs_pages(tmp_path: Path) -> None:
    root = tmp_path / "gnome-user-docs"
    _write(root / "usr/share/help/C/gnome-help/net-wireless-connect.page", PAGE_EN)
    _write(root / "usr/share/help/de/gnome-help/net-wireless-connect.page", PAGE_DE)
    # a German page of another shape is skipped, not misaligned
    _write(root / "usr/share/help/C/gnome-help/other.page", PAGE_EN)
    _write(root / "usr/share/help/de/gnome-help/other.page", "<page><title>Nur ein Titel</title><p>Text</p></page>")
    src = GnomeHelp()
    src.packages = lambda: ["gnome-user-docs", "absent-package"]  # type: ignore[method-assign]
    docs = list(src.extract({"gnome-user-docs": root}))
    assert [d.doc_id for d in docs] == ["gnome-user-docs/gnome-help/net-wireless-connect"]
    pairs = docs[0].pairs
    assert pairs[0] == ("Get on the internet \u2014 wirelessly.", "Gehen Sie ins Internet \u2014 drahtlos.")
    assert (
        "Click Settings \u25b8 Wi-Fi and press Ctrl+W.",
        "Klicken Sie auf Einstellungen \u25b8 WLAN und drücken Sie Strg+W.",
    ) in pairs
    assert all(en != de for en, de in pairs)  # "GNOME" and the license are untranslated
    assert len(pairs) == 5


def test_docbook_entities_and_verbatim() -> None:
    xml = """<!DOCTYPE article [ <!ENTITY app "Sticky Notes"> ]>
<article><articleinfo><title>&app; Manual</title><copyright><year>2004</year></copyright></articleinfo>
<sect1><title>Usage</title><para>Start <application>&app;</application> now.
<programlisting>sticky --help</programlisting></para>
<para>Choose <menuchoice><guimenu>File</guimenu><guimenuitem>Quit</guimenuitem></menuchoice>.<indexterm>
<primary>quit</primary></indexterm></para>
<informaltable><tgroup><tbody><row><entry>Cell</entry></row></tbody></tgroup></informaltable></sect1></article>"""
    assert parse_blocks(xml, DOCBOOK) == [
        ("title", "Sticky Notes Manual"),
        ("title", "Usage"),
        ("para", "Start Sticky Notes now."),
        ("para", "Choose File \u25b8 Quit."),
        ("entry", "Cell"),
    ]


def test_html_nested_blocks_and_navigation() -> None:
    page = """<html><head><title>T</title></head><body>
<div class="navheader">Prev Next</div>
<ul><li>Item <b>one</b><ul><li>Nested</li></ul>tail</li></ul>
<p>Para with <code>code</code> and <a href="x">a link</a>.<br>Second line
<div class="programlisting">ls -l</div><pre>echo hi</pre>
<table><tr><td>A<td>B</table>
<h2>Heading</h2>
</body></html>"""
    assert parse_blocks(page, HTML) == [
        ("li", "Item one"),
        ("li", "Nested"),
        ("li", "tail"),
        ("p", "Para with code and a link. Second line"),
        ("td", "A"),
        ("td", "B"),
        ("h", "Heading"),
    ]


def test_align_blocks_skips_pages_too_far_apart() -> None:
    en = [("p", f"English paragraph number {i} with some text.") for i in range(10)]
    de = [("p", f"Deutscher Absatz Nummer {i} mit etwas Text.") for i in range(10)]
    assert align_blocks(en, de) == [(e, d) for (_, e), (_, d) in zip(en, de, strict=True)]
    assert align_blocks(en, [("h", "x")] * 3 + de[:3]) is None
    assert align_blocks([], de) is None


def test_align_blocks_places_a_missing_block() -> None:
    # the German page lacks the fourth paragraph; only the confident matches away from the gap remain
    en = [("h", "Title 1"), *[("p", f"A fairly ordinary sentence of text, number {i}.") for i in range(1, 8)]]
    de = [
        ("h", "Titel 1"),
        *[("p", f"Ein ganz gewöhnlicher Satz mit Text, Nummer {i}.") for i in range(1, 8) if i != 4],
    ]
    pairs = align_blocks(en, de)
    assert pairs is not None and pairs
    for e, d in pairs:
        assert e[-2] == d[-2]  # the numbers agree: no pair is shifted
    assert not any(e.endswith("4.") for e, _ in pairs)


def test_align_blocks_rejects_shifted_lengths() -> None:
    en = [("p", "Short."), ("p", "A much longer English paragraph that goes on and on for a good while here.")] * 3
    de = [
        ("p", "Ein viel längerer deutscher Absatz, der eine ganze Weile so weitergeht und weitergeht."),
        ("p", "Kurz."),
    ] * 3
    assert align_blocks(en, de) is None


# ---------------------------------------------------------------- KDE and DocBook HTML


def _kde_cache(pages: dict[str, str]) -> bytes:
    body = "".join(f'<FILENAME filename="{name}">{html}</FILENAME>\n' for name, html in pages.items())
    return bz2.compress(body.encode("utf-8"))


KDE_EN = (
    '<html><body><div id="header">The Okular Handbook</div><div class="navCenter"><table class="navigation">'
    '<tr><td>Prev</td><td>Next</td></tr></table></div><h1 class="title">Introduction</h1>'
    "<p>Okular is a universal document viewer.</p><p>It supports <acronym>PDF</acronym> files.</p>"
    '<div id="footer"><div id="footer_text">Would you like to comment?</div></div></body></html>'
)
KDE_DE = (
    '<html><body><div id="header">Das Handbuch zu Okular</div><div class="navCenter"><table class="navigation">'
    '<tr><td>Zurück</td><td>Weiter</td></tr></table></div><h1 class="title">Einleitung</h1>'
    "<p>Okular ist ein universeller Dokumentbetrachter.</p><p>Es unterstützt <acronym>PDF</acronym>-Dateien.</p>"
    '<div id="footer"><div id="footer_text">Möchten Sie Kommentare beitragen?</div></div></body></html>'
)


def test_kde_cache_pairs(tmp_path: Path) -> None:
    assert set(kde_cache_pages(_kde_cache({"a.html": "x", "b.html": "y"}))) == {"a.html", "b.html"}
    root = tmp_path / "okular"
    (root / "usr/share/doc/HTML/en/okular").mkdir(parents=True)
    (root / "usr/share/doc/HTML/de/okular").mkdir(parents=True)
    mismatched = "<html><body><h1>Nur</h1><ul><li>eins</li><li>zwei</li><li>drei</li></ul></body></html>"
    (root / "usr/share/doc/HTML/en/okular/index.cache.bz2").write_bytes(
        _kde_cache({"index.html": KDE_EN, "other.html": KDE_EN, "only-en.html": KDE_EN})
    )
    (root / "usr/share/doc/HTML/de/okular/index.cache.bz2").write_bytes(
        _kde_cache({"index.html": KDE_DE, "other.html": mismatched})
    )
    src = KdeDoc()
    src.packages = lambda: ["okular"]  # type: ignore[method-assign]
    docs = list(src.extract({"okular": root}))
    assert [d.doc_id for d in docs] == ["okular/okular"]
    assert docs[0].pairs == [
        ("Introduction", "Einleitung"),
        ("Okular is a universal document viewer.", "Okular ist ein universeller Dokumentbetrachter."),
        ("It supports PDF files.", "Es unterstützt PDF-Dateien."),
    ]


def test_docbook_manuals_doc_ids(tmp_path: Path, monkeypatch) -> None:
    en_page = (
        "<html><body><h1>1. Introduction</h1><p>Debian is a free operating system.</p><pre>apt</pre></body></html>"
    )
    de_page = (
        "<html><body><h1>1. Einführung</h1><p>Debian ist ein freies Betriebssystem.</p><pre>apt</pre></body></html>"
    )
    _write(tmp_path / "ref-en/usr/share/debian-reference/ch01.en.html", en_page)
    _write(tmp_path / "ref-de/usr/share/debian-reference/ch01.de.html", de_page)
    _write(tmp_path / "ref-en/usr/share/debian-reference/ch02.en.html", en_page)  # no German: skipped
    hb = "usr/share/doc/debian-handbook/html"
    _write(tmp_path / f"hb/{hb}/en-US/sect.intro.html", en_page)
    _write(tmp_path / f"hb/{hb}/de-DE/sect.intro.html", de_page)
    src = DocbookManuals()
    manuals = tuple(m for m in docbooks.MANUALS if m.doc in ("debian-handbook", "debian-reference"))
    monkeypatch.setattr(src, "manuals", manuals)
    roots = {
        "debian-reference-en": tmp_path / "ref-en",
        "debian-reference-de": tmp_path / "ref-de",
        "debian-handbook": tmp_path / "hb",
    }
    docs = {d.doc_id: d.pairs for d in src.extract(roots)}
    expected = [
        ("1. Introduction", "1. Einführung"),
        ("Debian is a free operating system.", "Debian ist ein freies Betriebssystem."),
    ]
    assert docs == {"debian-handbook/sect.intro": expected, "debian-reference/ch01": expected}
    # a custom manual whose German page name differs
    _write(tmp_path / "cnc-en/doc/gcode.html", en_page)
    _write(tmp_path / "cnc-de/doc/gcode_de.html", de_page)
    monkeypatch.setattr(
        src,
        "manuals",
        (Manual("cnc", ("cnc-en", "doc"), ("cnc-de", "doc"), pattern="gcode.html", to_de=(r"\.html$", "_de.html")),),
    )
    assert [d.doc_id for d in src.extract({"cnc-en": tmp_path / "cnc-en", "cnc-de": tmp_path / "cnc-de"})] == [
        "cnc/gcode"
    ]


def test_sources_registered_with_package_lists() -> None:
    from corpora.debian.sources.base import SOURCES

    for name in ("libreoffice_help", "gnome_help", "kde_doc", "docbooks"):
        assert name in SOURCES and SOURCES[name].packages()
