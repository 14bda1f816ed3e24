"""The manpages and ddtp sources of the Debian corpus, on tiny pages and indexes the tests write."""

from __future__ import annotations

import gzip
from pathlib import Path

from corpora.debian.archive import Archive
from corpora.debian.sources.base import SOURCES, read_package_list
from corpora.debian.sources.ddtp import (
    align_descriptions,
    description_units,
    parse_translation,
)
from corpora.debian.sources.manpages import (
    ManpagesSource,
    align_blocks,
    parse_roff,
    unescape,
)

EN_PAGE = r""".\" a comment
.TH FROB 1 "2024" "frob 1.0" "User Commands"
.SH NAME
frob \- frobnicate files
.SH DESCRIPTION
.B frob
reads each
.I file
and prints it\(emtwice.
Quote: \(aqx\(aq \e.
.PP
It never changes the \fBfile\fR\&.
.nf
frob \-a file
.fi
.TP
.BR \-a ", " \-\-all
Frobnicate all files.
.IP \(bu 2
A bullet item.
.SH SEE ALSO
.BR cat (1)
"""

DE_PAGE = r""".\" -*- coding: UTF-8 -*-
.TH FROB 1 "2024" "frob 1.0" "Dienstprogramme für Benutzer"
.SH BEZEICHNUNG
frob \- Dateien frobnizieren
.SH BESCHREIBUNG
\fBfrob\fP liest jede \fIDatei\fP und gibt sie aus\(emzweimal. Zitat: \(aqx\(aq \e.
.PP
Es ändert die \fBDatei\fP nie.
.nf
frob \-a Datei
.fi
.TP
\fB\-a\fP, \fB\-\-all\fP
Alle Dateien frobnizieren.
.IP \(bu 2
Ein Listenpunkt.
.SH "SIEHE AUCH"
\fBcat\fP(1)
.SH ÜBERSETZUNG
Die deutsche Übersetzung dieser Handbuchseite wurde von Jemand erstellt.
"""


def _write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode("utf-8")))


def test_unescape_resolves_fonts_and_named_characters():
    assert unescape(r"\fBbold\fP \(aqq\(aq \- \e \&x \(em \[u00E4] \*(lqq\*(rq") == "bold 'q' - \\ x — ä “q”"
    assert unescape(r'text \" comment') == "text "


def test_parse_roff_blocks_and_kinds():
    blocks = parse_roff(EN_PAGE, "frob")
    assert blocks == [
        ("SH", "NAME"),
        ("P", "frob - frobnicate files"),
        ("SH", "DESCRIPTION"),
        ("P", "frob reads each file and prints it—twice. Quote: 'x' \\."),
        ("P", "It never changes the file."),
        ("LIT", ""),
        ("TAG", "-a, --all"),
        ("BODY", "Frobnicate all files."),
        ("BODY", "A bullet item."),
        ("SH", "SEE ALSO"),
        ("P", "cat(1)"),
    ]


def test_mdoc_page():
    page = ".Dd 2024\n.Sh NAME\n.Nm frob\n.Nd frob things\n.Sh OPTIONS\n"
    page += ".Bl -tag\n.It Fl a Ar file\nAll of\n.Xr cat 1 .\n.El\n"
    assert parse_roff(page, "frob") == [
        ("SH", "NAME"),
        ("P", "frob frob things"),
        ("SH", "OPTIONS"),
        ("TAG", "-a file"),
        ("BODY", "All of cat(1)."),
    ]


def test_source_pairs_pages_and_skips_differing_structure(tmp_path: Path):
    de = tmp_path / "manpages-de"
    en = tmp_path / "frobtools"
    _write_gz(de / "usr/share/man/de/man1/frob.1.gz", DE_PAGE)
    _write_gz(en / "usr/share/man/man1/frob.1.gz", EN_PAGE)
    # A page whose German translation has a different structure (an extra paragraph, one section less).
    _write_gz(de / "usr/share/man/de/man1/other.1.gz", ".SH BEZEICHNUNG\nx \\- y\n.PP\nEins.\n.PP\nZwei.\n")
    _write_gz(en / "usr/share/man/man1/other.1.gz", ".SH NAME\nx \\- y\n.PP\nOne.\n.SH NOTES\nTwo.\n")
    owners = tmp_path / "owners.tsv"
    owners.write_text("frob\t1\tfrobtools\n", encoding="utf-8")
    docs = list(ManpagesSource(owners).extract({"manpages-de": de, "frobtools": en}))
    assert [d.doc_id for d in docs] == ["manpages/frob.1"]
    pairs = docs[0].pairs
    assert ("NAME", "BEZEICHNUNG") in pairs
    assert ("It never changes the file.", "Es ändert die Datei nie.") in pairs
    assert ("Frobnicate all files.", "Alle Dateien frobnizieren.") in pairs
    assert ("A bullet item.", "Ein Listenpunkt.") in pairs
    assert ("cat(1)", "cat(1)") in pairs
    assert not any("Übersetzung" in g or "frob -a" in e for e, g in pairs)  # addendum and literal dropped
    assert len(pairs) == 10


def test_german_pages_a_package_ships_beside_its_english_ones(tmp_path: Path):
    class Pinned(ManpagesSource):
        def packages(self):
            return ["manpages-de", "frobtools", "gadget"]

    de, frob, gadget = tmp_path / "manpages-de", tmp_path / "frobtools", tmp_path / "gadget"
    _write_gz(de / "usr/share/man/de/man1/frob.1.gz", DE_PAGE)
    _write_gz(frob / "usr/share/man/man1/frob.1.gz", EN_PAGE)
    _write_gz(frob / "usr/share/man/de/man1/frob.1.gz", DE_PAGE)  # manpages-de has it: not twice
    _write_gz(gadget / "usr/share/man/man1/gadget.1.gz", EN_PAGE.replace("frob", "gadget").replace("Frob", "Gadget"))
    _write_gz(gadget / "usr/share/man/de/man1/gadget.1.gz", DE_PAGE.replace("frob", "gadget"))
    _write_gz(gadget / "usr/share/man/de/man8/lonely.8.gz", DE_PAGE)  # no English page in its package
    owners = tmp_path / "owners.tsv"
    owners.write_text("frob\t1\tfrobtools\n", encoding="utf-8")
    docs = list(Pinned(owners).extract({"manpages-de": de, "frobtools": frob, "gadget": gadget}))
    assert [d.doc_id for d in docs] == ["manpages/frob.1", "gadget/man/gadget.1"]
    assert ("Gadgetnicate all files.", "Alle Dateien gadgetnizieren.") in docs[1].pairs


def test_align_by_sections_and_anchored_runs():
    en = [("SH", "A"), ("P", "one"), ("SH", "B"), ("P", "two"), ("P", "extra")]
    de = [("SH", "A'"), ("P", "eins"), ("SH", "B'"), ("P", "zwei")]
    assert align_blocks(en, de) == [("A", "A'"), ("one", "eins")]
    en = [("SH", "O"), ("TAG", "--all"), ("BODY", "all"), ("P", "new"), ("TAG", "--now"), ("BODY", "now")]
    de = [("SH", "O'"), ("TAG", "--all"), ("BODY", "alle"), ("TAG", "--now"), ("BODY", "jetzt")]
    pairs = align_blocks(en, de)
    assert ("now", "jetzt") in pairs and ("all", "alle") in pairs and ("new", "jetzt") not in pairs


def test_package_lists():
    assert "manpages-de" in read_package_list("manpages")
    assert SOURCES["manpages"].packages()[0] == "manpages-de"
    assert SOURCES["ddtp"].packages() == []


EN_TRANSLATION = """Package: frob
Description-md5: 0123456789abcdef0123456789abcdef
Description-en: frobnicator for files
 Frob frobnicates files
 of every kind.
 .
 Features:
  * fast
  * small
 .
 Last paragraph.

Package: gone
Description-md5: ffffffffffffffffffffffffffffffff
Description-en: no translation
 Nothing.
"""

DE_TRANSLATION = """Package: frob
Description-md5: 0123456789abcdef0123456789abcdef
Description-de: Frobnizierer für Dateien
 Frob frobniziert Dateien
 aller Art.
 .
 Merkmale:
  * schnell, klein
 .
 Letzter Absatz.
"""


def test_ddtp_units_and_alignment():
    (_, _, en), = [t for t in parse_translation(EN_TRANSLATION) if t[0] == "frob"]
    short, paras = description_units(en)
    assert short == "frobnicator for files"
    assert paras == [["Frob frobnicates files of every kind."], ["Features:", "fast", "small"], ["Last paragraph."]]
    (_, _, de), = parse_translation(DE_TRANSLATION)
    assert align_descriptions(en, de) == [
        ("frobnicator for files", "Frobnizierer für Dateien"),
        ("Frob frobnicates files of every kind.", "Frob frobniziert Dateien aller Art."),
        ("Last paragraph.", "Letzter Absatz."),
    ]
    # a different paragraph count keeps only the short description
    assert align_descriptions(en, "kurz\n Ein Absatz.") == [("frobnicator for files", "kurz")]


def test_ddtp_source_from_lists(tmp_path: Path):
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en.gz").write_bytes(
        gzip.compress(EN_TRANSLATION.encode())
    )
    (lists / "deb.debian.org_debian_dists_bookworm_main_i18n_Translation-de").write_text(DE_TRANSLATION)
    (lists / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages").write_text("")
    folder, hashes = Archive(tmp_path / "root", deb_dir=lists, progress=False).translations()
    assert set(hashes) == {"Translation-en", "Translation-de"}
    assert (folder / "Translation-en").read_text().startswith("Package: frob")
    docs = list(SOURCES["ddtp"].extract({"ddtp": folder}))
    assert [d.doc_id for d in docs] == ["ddtp/frob"]
    assert len(docs[0].pairs) == 3 and docs[0].kind == "sentences"
    assert list(SOURCES["ddtp"].extract({})) == []
