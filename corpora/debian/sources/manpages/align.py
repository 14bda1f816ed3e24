"""Pairing the blocks of an English manual page with those of its German translation, by block kind.

po4a, which manpages-de uses, translates a page message by message, so a translation of the same page
version has the same block sequence. Pages pair block by block when the sequences have the same kinds;
otherwise section by section where a section's kinds agree, and by runs of blocks with the same anchors
(options, paths, page references) where they still differ; nothing else.
"""

from __future__ import annotations

import difflib
import re

from corpora.debian.sources.base import Pair
from corpora.debian.sources.manpages.roff import Block

#: Sections manpages-de appends to every page (translators, bug address); they have no English original.
_GERMAN_ADDENDA = {"ÜBERSETZUNG", "ÜBERSETZER", "ÜBERSETZUNGEN"}


def drop_german_addenda(blocks: list[Block]) -> list[Block]:
    """The German page without the sections manpages-de appends (ÜBERSETZUNG: translators, bug address)."""
    for k in range(len(blocks) - 1, -1, -1):
        kind, text = blocks[k]
        if kind == "SH" and text.strip().upper() in _GERMAN_ADDENDA:
            return blocks[:k]
    return blocks


def _sections(blocks: list[Block], level: str) -> list[list[Block]]:
    out: list[list[Block]] = [[]]
    for block in blocks:
        if block[0] == level or (level == "SS" and block[0] == "SH"):
            out.append([])
        out[-1].append(block)
    return out if out[0] else out[1:]


def _kinds(blocks: list[Block]) -> list[str]:
    return [kind for kind, _ in blocks]


def align_blocks(english: list[Block], german: list[Block]) -> list[Pair]:
    """Pairs of blocks of two pages, kept only where the block structure agrees.

    The whole page pairs when its kind sequence is equal on both sides. Otherwise, when both pages have
    as many sections (``SH``), each section pairs when its kinds are equal; an unequal section pairs by
    subsections (``SS``) when those are as many; what still differs pairs by runs of blocks whose kinds
    and anchor tokens (options, ``KEY=``, ``$VARS``, page references, paths, numbers) agree, matched in
    order (``_pair_runs``), which also serves pages with unequal section counts. Literal blocks never pair.
    """
    if _kinds(english) == _kinds(german):
        return _pair(english, german)
    pairs: list[Pair] = []
    en_secs, de_secs = _sections(english, "SH"), _sections(german, "SH")
    if len(en_secs) != len(de_secs):
        return _pair_runs(english, german)
    for en_sec, de_sec in zip(en_secs, de_secs, strict=True):
        if _kinds(en_sec) == _kinds(de_sec):
            pairs.extend(_pair(en_sec, de_sec))
            continue
        en_subs, de_subs = _sections(en_sec, "SS"), _sections(de_sec, "SS")
        if len(en_subs) != len(de_subs) or len(en_subs) < 2:
            pairs.extend(_pair_runs(en_sec, de_sec))
            continue
        for en_sub, de_sub in zip(en_subs, de_subs, strict=True):
            if _kinds(en_sub) == _kinds(de_sub):
                pairs.extend(_pair(en_sub, de_sub))
            else:
                pairs.extend(_pair_runs(en_sub, de_sub))
    return pairs


#: Tokens translators leave alone: options, KEY= directives, $VARIABLES, page references, paths, numbers.
_ANCHOR = re.compile(
    r"(?<![\w-])(?:--?[A-Za-z0-9][\w-]*|[A-Za-z][\w.-]*=|\$\{?\w+|[\w.:-]+\(\d\w*\)|/[\w./-]+|\d+(?:\.\d+)*)"
)


def _signature(block: Block) -> tuple[str, tuple[str, ...]]:
    kind, text = block
    anchors = _ANCHOR.findall(text)
    words = text.split()
    if kind != "LIT" and 0 < len(words) <= 6 and re.fullmatch(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+", words[0]):
        anchors.insert(0, words[0])  # the command or directive a short block (a tag) names
    return kind, tuple(sorted(set(anchors)))


def _pair_runs(english: list[Block], german: list[Block]) -> list[Pair]:
    """Pairs from the runs of blocks whose kinds and anchor tokens agree, where the two sides differ.

    The blocks are compared by signature (kind and the sorted anchors) and matched in order (difflib);
    a run of matching blocks pairs only when it holds an anchored block, so two anchorless paragraphs
    never pair just because they sit next to a difference.
    """
    en_sig = [_signature(b) for b in english]
    de_sig = [_signature(b) for b in german]
    pairs: list[Pair] = []
    matcher = difflib.SequenceMatcher(None, en_sig, de_sig, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal" or not any(sig[1] for sig in en_sig[i1:i2]):
            continue
        pairs.extend(_pair(english[i1:i2], german[j1:j2]))
    return pairs


def _pair(english: list[Block], german: list[Block]) -> list[Pair]:
    return [(e, g) for (kind, e), (_, g) in zip(english, german, strict=True) if kind != "LIT" and e and g]
