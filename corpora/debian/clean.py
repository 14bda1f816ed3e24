"""The filters every extracted pair goes through, whatever its source.

Each rule drops a kind of pair that would teach the model something other than translation: format
placeholders (stripping them leaves fragments such as "She died in at the age of."), identical sides
(untranslated strings), identifiers and paths, pairs whose lengths cannot be translations of each other,
German sides that are still English, and translator credits. Paragraphs whose two sides split into the same
number of sentences are cut into sentence pairs, so that long manual-page paragraphs fit ``task.max_len``.
The splitter knows the abbreviations of each language ("z. B.", "bzw.", "e.g.", "Dr.") and German ordinals
("am 18. Januar", "im 18. Jh."), so a sentence is not cut inside them.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator

Pair = tuple[str, str]

_WS = re.compile(r"\s+")
_PLACEHOLDER = re.compile(
    r"%(?:\(\w+\))?[-+ #0-9.*]*[sdifuxXcgeEplqzhjLn%@]"  # printf, python %(name)s
    r"|%\d+\$?[sd]?"  # %1, %1$s (Qt, gettext positional)
    r"|\{\d*\}|\{[A-Za-z_][\w.\-]*\}|\{\{[^}]*\}\}|\$\{[^}]*\}"  # {0} {} {name} {{name}} ${var}
    r"|\$\d\b|\$[A-Z_]{2,}\b|<[A-Z_]{2,}>"  # $1 $HOME <FILE>
    r"|\[\[?[A-Za-z_]+\]\]?"  # [[name]]
)
_URLISH = re.compile(r"(?:https?://|www\.|\S+@\S+\.\w+|^/\S+$|\S+\.(?:so|py|conf|txt|html|png|xml)\b)")
_IDENT = re.compile(r"^[\w.\-:/+=#]+$")
_CREDITS = re.compile(r"translator[-_ ]?credits|your names?$|your e-?mails?$|translated by|übersetzt von",
                      re.IGNORECASE)
_EN_WORDS = frozenset("the a an of to and is are was were be this that with for from by on in it you your not "
                      "can will which have has".split())
_DE_WORDS = frozenset("der die das den dem des ein eine einen einem einer und ist sind war nicht mit für von "
                      "auf zu im in sie es ich wird werden kann können auch oder wenn bei als aus an".split())
#: Where a sentence may end: after ``.``, ``!`` or ``?`` and space, before a capital, a quote or a bracket (a
#: boundary after ``.`` is then checked against the abbreviations below).
_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ\"„(])")
#: Abbreviations a sentence does not end at, per language, as the token before the boundary. Besides these, any
#: run of letter-period pairs is one: ``S.``, ``z.B.``, ``U.S.``, initials (``J. R. R.``) and so every part of
#: the spaced forms ``z. B.``, ``d. h.``, ``u. a.``, ``e. g.``.
ABBREVIATIONS: dict[str, frozenset[str]] = {
    "de": frozenset(
        "Abb. Abs. Abschn. allg. Anm. Aufl. Bd. Bde. bspw. bzgl. bzw. ca. Chr. Dr. evtl. exkl. etc. ff. Fr. ggf. "
        "gegr. Hr. Hrsg. inkl. insb. Jh. Jhd. Jhdt. Kap. max. min. Mio. Mrd. Nr. Prof. sog. St. Std. Str. Tab. "
        "usw. vgl. zzgl. zz. zzt. Zt.".split()
    ),
    "en": frozenset(
        "e.g. i.e. etc. vs. cf. approx. Mr. Mrs. Ms. Dr. Prof. St. Jr. Sr. Inc. Ltd. Co. Corp. Fig. Figs. No. "
        "Nos. Vol. Ch. Sec. Eq. Ref. pp. al. ca. resp. viz. min. max. Jan. Feb. Mar. Apr. Aug. Sept. Sep. Oct. "
        "Nov. Dec.".split()
    ),
}
#: Month names: a number before one is a German date ("am 18. Januar"), not a sentence end.
MONTHS = frozenset(
    "Januar Jänner Februar März April Mai Juni Juli August September Oktober November Dezember "
    "January February March May June July October December".split()
)
_OPENERS = "([{\"'„“‚‘«»"
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+")  # S. / z.B. / U.S. / e.g.
_ORDINAL_DE = re.compile(r"\d{1,2}\.")  # German ordinals: "18. Jh.", "3. Auflage", "am 1. Mai"
_NUMBER = re.compile(r"\d+\.")


def abbreviation_before(head: str, tail: str, lang: str) -> bool:
    """Whether the period that ends ``head`` belongs to an abbreviation or an ordinal (so a sentence does not
    end there); ``tail`` is the text after the space, ``lang`` "en" or "de"."""
    tokens = head.split()
    if not tokens:
        return False
    last = tokens[-1].lstrip(_OPENERS)
    if last in ABBREVIATIONS.get(lang, ()) or _DOTTED.fullmatch(last):
        return True
    if _NUMBER.fullmatch(last):
        following = tail.split(maxsplit=1)[0].strip(_OPENERS + ".,;:") if tail.split() else ""
        if following in MONTHS or (lang == "de" and (_ORDINAL_DE.fullmatch(last) or following.startswith("Jh"))):
            return True
    return False


def normalize(text: str) -> str:
    """NFC, entities decoded, control characters and a byte-order mark removed, whitespace collapsed."""
    text = html.unescape(text)
    text = unicodedata.normalize("NFC", text).replace("\ufeff", "").replace("\u00ad", "")
    text = "".join(ch if ch >= " " or ch in "\t\n" else " " for ch in text)
    return _WS.sub(" ", text).strip()


def _words(text: str) -> list[str]:
    return re.findall(r"[\wÄÖÜäöüß']+", text.lower())


def still_english(de: str) -> bool:
    """A "German" side that reads as English: more English than German function words."""
    ws = _words(de)
    if len(ws) < 4:
        return False
    en = sum(w in _EN_WORDS for w in ws)
    deu = sum(w in _DE_WORDS for w in ws)
    return en >= 2 and en > 2 * deu


def reject_reason(en: str, de: str) -> str | None:
    """Why a (normalised) pair is not kept, or None when it is."""
    if not en or not de:
        return "empty"
    if _PLACEHOLDER.search(en) or _PLACEHOLDER.search(de):
        return "placeholder"
    if en.casefold() == de.casefold():
        return "untranslated"
    if _CREDITS.search(en):
        return "credits"
    if (_IDENT.match(en) and not en.isalpha()) or _URLISH.search(en) and len(en.split()) <= 2:
        return "identifier"
    if not re.search(r"[A-Za-z]", en) or not re.search(r"[A-Za-zÄÖÜäöüß]", de):
        return "no letters"
    ne, nd = len(en), len(de)
    if max(ne, nd) > 8 and (ne > 3 * nd + 10 or nd > 3 * ne + 10):
        return "length ratio"
    if still_english(de):
        return "german side in english"
    return None


def split_sentences(text: str, lang: str = "en") -> list[str]:
    """``text`` cut into sentences at ``.``/``!``/``?`` + space + a capital, a quote or a bracket, but not after
    an abbreviation or ordinal of ``lang`` (:func:`abbreviation_before`)."""
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        if text[m.start() - 1] == "." and abbreviation_before(text[start : m.start()], text[m.end() :], lang):
            continue
        out.append(text[start : m.start()])
        start = m.end()
    out.append(text[start:])
    return [s for s in out if s]


def sentence_pairs(en: str, de: str) -> list[Pair]:
    """The pair cut into sentence pairs when both sides have the same number (> 1) of sentences, else whole."""
    es, ds = split_sentences(en, "en"), split_sentences(de, "de")
    if len(es) > 1 and len(es) == len(ds):
        return list(zip(es, ds))
    return [(en, de)]


def clean_pairs(pairs: list[Pair], stats: Counter[str]) -> Iterator[Pair]:
    """Normalised, filtered and sentence-split pairs of one document; ``stats`` counts what each rule dropped."""
    for raw_en, raw_de in pairs:
        en, de = normalize(raw_en), normalize(raw_de)
        for s_en, s_de in sentence_pairs(en, de):
            why = reject_reason(s_en, s_de)
            if why is None:
                stats["kept"] += 1
                yield s_en, s_de
            else:
                stats[why] += 1
