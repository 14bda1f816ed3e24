"""The filters every extracted pair goes through, whatever its source.

Each rule drops a kind of pair that would teach the model something other than translation: format
placeholders (stripping them leaves fragments such as "She died in at the age of."), identical sides
(untranslated strings), identifiers and paths, pairs whose lengths cannot be translations of each other,
German sides that are still English, and translator credits. Paragraphs whose two sides split into the same
number of sentences are cut into sentence pairs, so that long manual-page paragraphs fit ``task.max_len``.
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
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ\"„(])")


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


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_SPLIT.split(text) if s]


def sentence_pairs(en: str, de: str) -> list[Pair]:
    """The pair cut into sentence pairs when both sides have the same number (> 1) of sentences, else whole."""
    es, ds = split_sentences(en), split_sentences(de)
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
