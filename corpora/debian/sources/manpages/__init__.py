"""German manual pages against the English pages they translate (source ``manpages``).

Both pages are parsed into a sequence of *blocks*, each labelled by kind (section heading, subsection
heading, paragraph, item tag, item body, literal block) and the two sequences are paired by kind; literal
blocks take part in the kind sequence but are never emitted.

| module | what it holds |
|---|---|
| ``escapes`` | roff escapes resolved to the characters they print; request arguments split |
| ``mdoc`` | BSD ``mdoc`` inline macros rendered as text |
| ``roff`` | the page parser: ``man`` and ``mdoc`` requests into kind-labelled blocks |
| ``align`` | pairing two block sequences by kind: page, section, subsection, anchored runs |
| ``source`` | the German pages, their English originals (pinned owners), ``ManpagesSource`` (registered here) |
"""

from corpora.debian.sources.manpages.align import align_blocks, drop_german_addenda
from corpora.debian.sources.manpages.escapes import roff_args, unescape
from corpora.debian.sources.manpages.mdoc import mdoc_inline
from corpora.debian.sources.manpages.roff import Block, parse_roff
from corpora.debian.sources.manpages.source import (
    GERMAN_PACKAGE,
    OWNERS_FILE,
    SKIP_PAGES,
    ManpagesSource,
    align_page,
    german_pages,
    read_owners,
    read_page,
)

__all__ = [
    "GERMAN_PACKAGE",
    "OWNERS_FILE",
    "SKIP_PAGES",
    "Block",
    "ManpagesSource",
    "align_blocks",
    "align_page",
    "drop_german_addenda",
    "german_pages",
    "mdoc_inline",
    "parse_roff",
    "read_owners",
    "read_page",
    "roff_args",
    "unescape",
]
