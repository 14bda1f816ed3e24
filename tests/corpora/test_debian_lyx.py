"""The LyX manuals source on two tiny manuals the test writes."""

from __future__ import annotations

from pathlib import Path

from corpora.debian.sources.base import SOURCES
from corpora.debian.sources.lyx import LyxManuals, align_manual, parse_lyx

EN = r"""#LyX 2.3 created this file.
\lyxformat 544
\begin_document
\begin_header
\textclass book
\end_header

\begin_body

\begin_layout Chapter
Welcome to \SpecialChar LyX
!
\end_layout

\begin_layout Standard
This manual is for all of you who have never heard of \SpecialChar LaTeX
, or do not
 know it very well.
\begin_inset Foot
status collapsed

\begin_layout Plain Layout
Send comments to the team.
\end_layout

\end_inset

 Read it
\begin_inset Index idx
status open

\begin_layout Plain Layout
reading
\end_layout

\end_inset

 with care.
\end_layout

\begin_layout Standard
Choose⎵
\begin_inset Info
type  "menu"
arg   "file-open"
\end_inset

 to open a file.
\end_layout

\begin_layout LyX-Code
\backslash
documentclass{book}
\end_layout

\begin_layout Section
Typing the⎵
\begin_inset Quotes eld
\end_inset

code
\begin_inset Quotes erd
\end_inset

 style
\end_layout

\begin_layout Standard
Use the⎵
\begin_inset Flex Code
status collapsed

\begin_layout Plain Layout

\backslash
emph
\end_layout

\end_inset

 command for⎵
\emph on
emphasis
\emph default
 in your text of 2 pages.
\end_layout

\end_body
\end_document
"""

DE = r"""\begin_body

\begin_layout Chapter
Willkommen bei \SpecialChar LyX
!
\end_layout

\begin_layout Standard
Dieses Handbuch ist für alle, die noch nie von \SpecialChar LaTeX
 gehört haben oder es nicht gut kennen.
 Lesen Sie es sorgfältig.
\end_layout

\begin_layout Standard
Wählen Sie⎵
\begin_inset Info
type  "menu"
arg   "file-open"
\end_inset

, um eine Datei zu öffnen.
\end_layout

\begin_layout LyX-Code
\backslash
documentclass{book}
\end_layout

\begin_layout Section
Der⎵
\begin_inset Quotes gld
\end_inset

Code
\begin_inset Quotes grd
\end_inset

-Stil
\end_layout

\begin_layout Standard
Verwenden Sie den Befehl⎵
\begin_inset Flex Code
status collapsed

\begin_layout Plain Layout

\backslash
emph
\end_layout

\end_inset

 für⎵
\emph on
Hervorhebungen
\emph default
 in Ihrem Text von 2 Seiten.
\end_layout

\end_body
"""
EN, DE = EN.replace("⎵", " "), DE.replace("⎵", " ")  # ⎵: a line-ending space LyX needs


def test_parse_lyx_reads_text_and_leaves_out_what_the_file_does_not_hold():
    blocks = parse_lyx(EN)
    assert blocks == [
        ("Chapter", "Welcome to LyX!"),
        (
            "Standard",
            "This manual is for all of you who have never heard of LaTeX, or do not know it very well. "
            "Read it with care.",
        ),
        ("Standard", ""),  # a menu path (Info inset) is not in the file
        ("LyX-Code", ""),
        ("Section", 'Typing the "code" style'),
        ("Standard", "Use the \\emph command for emphasis in your text of 2 pages."),
    ]


def test_manuals_align_by_content_part_by_part(tmp_path: Path):
    pairs = align_manual(parse_lyx(EN), parse_lyx(DE))
    assert ("Welcome to LyX!", "Willkommen bei LyX!") in pairs
    assert (
        "Use the \\emph command for emphasis in your text of 2 pages.",
        "Verwenden Sie den Befehl \\emph für Hervorhebungen in Ihrem Text von 2 Seiten.",
    ) in pairs
    assert not any("open" in e for e, _ in pairs) and not any("documentclass" in e for e, _ in pairs)
    root = tmp_path / "lyx-common"
    (root / "usr/share/lyx/doc/de").mkdir(parents=True)
    (root / "usr/share/lyx/doc/Tutorial.lyx").write_text(EN)
    (root / "usr/share/lyx/doc/de/Tutorial.lyx").write_text(DE)
    (root / "usr/share/lyx/doc/Only.lyx").write_text(EN)  # no German: no document
    docs = list(LyxManuals().extract({"lyx-common": root}))
    assert [d.doc_id for d in docs] == ["lyx-common/Tutorial"] and docs[0].pairs == pairs
    assert SOURCES["lyx"].packages() == ["lyx-common"]
