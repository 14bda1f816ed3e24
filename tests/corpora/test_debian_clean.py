"""The sentence splitter of the Debian corpus: it cuts at sentence ends, not after abbreviations or ordinals."""

from __future__ import annotations

import pytest

from corpora.debian.clean import ABBREVIATIONS, sentence_pairs, split_sentences

GERMAN = [
    "Jh.",
    "z. B.",
    "z.B.",
    "d. h.",
    "u. a.",
    "bzw.",
    "ggf.",
    "usw.",
    "vgl.",
    "Nr.",
    "S.",
    "ca.",
    "evtl.",
    "inkl.",
    "Abb.",
    "Kap.",
    "Tab.",
    "etc.",
    "Dr.",
    "Prof.",
    "sog.",
    "i. d. R.",
    "o. Ä.",
]
ENGLISH = ["e.g.", "i.e.", "etc.", "vs.", "Mr.", "Dr.", "Fig.", "No.", "cf.", "e. g.", "Prof.", "St."]


@pytest.mark.parametrize("abbr", GERMAN)
def test_german_abbreviations_do_not_end_a_sentence(abbr):
    text = f"Das steht in {abbr} Dateien der Liste. Danach folgt mehr."
    assert split_sentences(text, "de") == [f"Das steht in {abbr} Dateien der Liste.", "Danach folgt mehr."]


@pytest.mark.parametrize("abbr", ENGLISH)
def test_english_abbreviations_do_not_end_a_sentence(abbr):
    text = f"It is in {abbr} Section One of the list. Then comes more."
    assert split_sentences(text, "en") == [f"It is in {abbr} Section One of the list.", "Then comes more."]


def test_every_listed_abbreviation_is_kept_whole():
    for lang, words in ABBREVIATIONS.items():
        for abbr in words:
            assert len(split_sentences(f"See {abbr} Next one.", lang)) == 1, (lang, abbr)


@pytest.mark.parametrize(
    "text",
    [
        "Er lebte im 18. Jh. in Wien.",
        "Das war am 18. Januar so.",
        "Am 3. Mai 2020 und am 1. August.",
        "Die 2. Auflage erschien später.",
        "Vom 20. Jahrhundert an war es anders.",
        "Das Fest ist am 24. Dezember jedes Jahres.",
    ],
)
def test_german_ordinals_and_dates_do_not_end_a_sentence(text):
    assert split_sentences(text, "de") == [text]


def test_real_sentence_ends_still_split():
    assert split_sentences("Open the file. Save it! Done? Yes.", "en") == [
        "Open the file.",
        "Save it!",
        "Done?",
        "Yes.",
    ]
    assert split_sentences("Das Jahr war 1999. Danach kam 2000.", "de") == ["Das Jahr war 1999.", "Danach kam 2000."]
    assert split_sentences("It was version 42. Then came more.", "en") == ["It was version 42.", "Then came more."]
    assert split_sentences("Lies (z. B. hier) weiter. Dann „Schluss“.", "de") == [
        "Lies (z. B. hier) weiter.",
        "Dann „Schluss“.",
    ]
    assert split_sentences("Lowercase after a period. is no boundary.", "en") == [
        "Lowercase after a period. is no boundary."
    ]


def test_sentence_pairs_need_the_same_count_on_both_sides():
    en = "Scientists of the 18th century, e.g. Euler, wrote in Latin. Later they wrote in German."
    de = "Gelehrte des 18. Jh. wie z. B. Euler schrieben Latein. Später schrieben sie Deutsch."
    assert sentence_pairs(en, de) == [
        (
            "Scientists of the 18th century, e.g. Euler, wrote in Latin.",
            "Gelehrte des 18. Jh. wie z. B. Euler schrieben Latein.",
        ),
        ("Later they wrote in German.", "Später schrieben sie Deutsch."),
    ]
    # an unbalanced paragraph stays whole rather than pairing the wrong sentences
    assert sentence_pairs("One. Two. Three.", "Eins. Zwei und drei.") == [("One. Two. Three.", "Eins. Zwei und drei.")]
