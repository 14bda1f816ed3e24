"""German manual pages of ``manpages-de`` against the English pages they translate (source ``manpages``).

``manpages-de`` ships German pages as ``usr/share/man/de/man<sec>/<name>.<sec>.gz``; the English page of
the same name and section is shipped by the program's own package (coreutils, systemd, manpages, ...).
Which package that is was looked up once in the archive's Contents index and pinned in
``packages/manpages_owners.tsv`` (page, section, package) and ``packages/manpages.txt``; where several
packages ship a page of that name (elogind and systemd, grub-legacy and grub2-common), the pinned one is
the package whose page the German translation aligns with. A page whose owner is missing from ``roots``
is looked for in every other root.

Both pages are parsed into a sequence of *blocks*, each labelled by kind (section heading, subsection
heading, paragraph, item tag, item body, literal block); po4a, which manpages-de uses, translates a page
message by message, so a translation of the same page version has the same block sequence. Pages pair
block by block when the sequences have the same kinds; otherwise section by section (headings split the
pages into as many sections on both sides) where a section's kinds agree, and nothing else. Literal blocks
(``.nf``/``.EX``/tables/``.Bd -literal``) take part in the kind sequence but are never emitted.
Both the classic ``man`` macros and BSD ``mdoc`` (ssh, file, bsdgames) are read.
"""

from __future__ import annotations

import csv
import difflib
import gzip
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from bpd.data.debian.sources.base import PACKAGE_LISTS, Document, Pair, Source, register

GERMAN_PACKAGE = "manpages-de"
OWNERS_FILE = PACKAGE_LISTS / "manpages_owners.tsv"

Block = tuple[str, str]  # (kind, text); kinds: SH SS P TAG BODY LIT

_HEADING = ("SH", "SS")
#: Sections manpages-de appends to every page (translators, bug address); they have no English original.
_GERMAN_ADDENDA = {"ÜBERSETZUNG", "ÜBERSETZER", "ÜBERSETZUNGEN"}
#: Generated indexes (one directive name per line): nothing to translate, and their runs misalign.
SKIP_PAGES = {"systemd.directives.7", "systemd.index.7"}

# ---------------------------------------------------------------------------------------------- escapes

_NAMED = {
    "aq": "'",
    "dq": '"',
    "em": "—",
    "en": "–",
    "hy": "-",
    "mi": "-",
    "bu": "•",
    "lq": "“",
    "rq": "”",
    "oq": "‘",
    "cq": "’",
    "Fo": "«",
    "Fc": "»",
    "fo": "‹",
    "fc": "›",
    "Bq": "„",
    "bq": "‚",
    "co": "©",
    "rg": "®",
    "tm": "™",
    "de": "°",
    "mu": "×",
    "di": "÷",
    ">=": "≥",
    "<=": "≤",
    "!=": "≠",
    "->": "→",
    "<-": "←",
    "ua": "↑",
    "da": "↓",
    "<>": "↔",
    "rA": "⇒",
    "lA": "⇐",
    "ga": "`",
    "ha": "^",
    "ti": "~",
    "rs": "\\",
    "sl": "/",
    "ss": "ß",
    ":a": "ä",
    ":o": "ö",
    ":u": "ü",
    ":A": "Ä",
    ":O": "Ö",
    ":U": "Ü",
    "pl": "+",
    "eq": "=",
    "+-": "±",
    "Eu": "€",
    "eu": "€",
    "sc": "§",
    "ps": "¶",
    "ct": "¢",
    "Po": "£",
    "Ye": "¥",
    "ba": "|",
    "br": "|",
    "or": "|",
    "ul": "_",
    "ru": "_",
    "at": "@",
    "sh": "#",
    "Do": "$",
    "pc": "·",
    "aa": "´",
    "'e": "é",
    "'a": "á",
    "`a": "à",
    "`e": "è",
    "^a": "â",
    "^e": "ê",
    "^o": "ô",
    "~n": "ñ",
    ",c": "ç",
    "if": "∞",
    "ca": "∩",
    "cu": "∪",
    "sq": "□",
    "lh": "☜",
    "rh": "☞",
    "dg": "†",
    "ci": "○",
    "OK": "✓",
    "12": "½",
    "14": "¼",
    "34": "¾",
    "S1": "¹",
    "S2": "²",
    "S3": "³",
    "lB": "[",
    "rB": "]",
    "lC": "{",
    "rC": "}",
    "la": "⟨",
    "ra": "⟩",
    "en-dash": "–",
    "em-dash": "—",
}
_STRINGS = {"R": "®", "Tm": "™", "lq": "“", "rq": "”", "Aq": "'", "aq": "'", "C+": "C++", "Lq": "“", "Rq": "”"}

#: \c (continue the line without a break) is kept as this mark until lines are joined.
_JOIN = "\x00"

_ESCAPE = re.compile(
    r"\\(?:"
    r"f(?:\[[^\]]*\]|\(..|.)"  # font
    r"|s[-+]?(?:\d|\(\d\d|\[[^\]]*\]|'[^']*')"  # size
    r"|[*](?:\[[^\]]*\]|\(..|.)"  # string
    r"|n[-+]?(?:\[[^\]]*\]|\(..|.)"  # register
    r"|\((..)"  # named character (group 1)
    r"|\[([^\]]*)\]"  # named character (group 2)
    r"|[hvwxoblLDHSRNXZ]'[^']*'"  # motions, widths, drawings, device controls
    r"|[kmgFMVY](?:\[[^\]]*\]|\(..|.)"  # marks, colours, other environment changes
    r"|z"
    r"|(.)"  # one-character escapes (group 3)
    r")",
    re.S,
)

_SIMPLE = {
    "-": "-",
    "e": "\\",
    "\\": "\\",
    "&": "",
    "|": "",
    "^": "",
    " ": " ",
    "~": " ",
    "0": " ",
    "c": _JOIN,
    "%": "",
    ",": "",
    "/": "",
    ".": ".",
    "'": "´",
    "`": "`",
    ":": "",
    "t": " ",
    "a": "",
    "d": "",
    "u": "",
    "r": "",
    "p": "",
    "{": "",
    "}": "",
    "!": "",
    "E": "\\",
    '"': "",
}


def unescape(text: str, strings: Mapping[str, str] | None = None) -> str:
    """Roff text with escapes resolved to the characters they print and fonts/motions dropped."""
    extra = strings or {}

    def sub(m: re.Match[str]) -> str:
        whole = m.group(0)
        if m.group(1) is not None:
            return _NAMED.get(m.group(1), "")
        if m.group(2) is not None:
            name = m.group(2)
            if re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name):
                return chr(int(name[1:], 16))
            return _NAMED.get(name, "")
        if m.group(3) is not None:
            return _SIMPLE.get(m.group(3), m.group(3))
        if whole.startswith("\\*"):
            name = whole[2:]
            name = name[1:-1] if name.startswith("[") else name[1:] if name.startswith("(") else name
            return extra.get(name, _STRINGS.get(name, ""))
        return ""

    # \" starts a comment that runs to the end of the line (\\" is an escaped backslash, not a comment).
    text = re.sub(r'(?<!\\)((?:\\\\)*)\\".*', r"\1", text)
    return _ESCAPE.sub(sub, text)


def roff_args(line: str) -> list[str]:
    """The arguments of a request line (after the macro name): blanks separate, double quotes group."""
    args: list[str] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        buf = []
        if line[i] == '"':
            i += 1
            while i < n:
                if line[i] == '"':
                    if i + 1 < n and line[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                if line[i] == "\\" and i + 1 < n:
                    buf.append(line[i : i + 2])
                    i += 2
                    continue
                buf.append(line[i])
                i += 1
        else:
            while i < n and line[i] not in " \t":
                if line[i] == "\\" and i + 1 < n:
                    buf.append(line[i : i + 2])
                    i += 2
                    continue
                buf.append(line[i])
                i += 1
        args.append("".join(buf))
    return args


def _clean(text: str) -> str:
    text = re.sub(r"\s*" + _JOIN + r"\s*", "", text)
    return " ".join(text.split())


# ----------------------------------------------------------------------------------------------- mdoc

_MDOC_ENCLOSE = {
    "Dq": ("“", "”"),
    "Do": ("“", "”"),
    "Sq": ("‘", "’"),
    "So": ("‘", "’"),
    "Qq": ('"', '"'),
    "Qo": ('"', '"'),
    "Pq": ("(", ")"),
    "Po": ("(", ")"),
    "Bq": ("[", "]"),
    "Bo": ("[", "]"),
    "Brq": ("{", "}"),
    "Bro": ("{", "}"),
    "Aq": ("⟨", "⟩"),
    "Ao": ("⟨", "⟩"),
    "Op": ("[", "]"),
    "Oo": ("[", "]"),
    "Ql": ("‘", "’"),
    "Eo": ("", ""),
}
_MDOC_CLOSE = {"Dc": "”", "Sc": "’", "Qc": '"', "Pc": ")", "Bc": "]", "Brc": "}", "Ac": "⟩", "Oc": "]", "Ec": ""}
_MDOC_PLAIN = {
    "Ar",
    "Cm",
    "Pa",
    "Ev",
    "Ic",
    "Dv",
    "Va",
    "Em",
    "Sy",
    "Sx",
    "Er",
    "Fa",
    "Ad",
    "An",
    "Li",
    "No",
    "Tn",
    "Lk",
    "Mt",
    "Cd",
    "Ft",
    "Fn",
    "Vt",
    "Ot",
    "Ms",
    "Lb",
    "In",
    "Ta",
    "Nd",
    "Xo",
    "Xc",
    "Ap",
    "St",
    "Dl",
    "%A",
    "%B",
    "%D",
    "%I",
    "%J",
    "%N",
    "%O",
    "%P",
    "%Q",
    "%R",
    "%T",
    "%U",
    "%V",
    "Bf",
    "Ef",
    "Pf",
}
_MDOC_MACROS = set(_MDOC_ENCLOSE) | set(_MDOC_CLOSE) | _MDOC_PLAIN | {"Fl", "Xr", "Nm", "Ns", "Ux", "Bx", "At", "Fx"}
_PUNCT_AFTER = {".", ",", ";", ":", ")", "]", "?", "!", "}"}
_PUNCT_BEFORE = {"(", "["}


def mdoc_inline(macro: str, args: list[str], name: str) -> str:
    """Text of one mdoc line: ``macro`` with its arguments, which may call further macros."""
    out: list[str] = []
    _mdoc_render([macro, *args], name, out)
    return mdoc_inline_join(out)


def _mdoc_render(tokens: list[str], name: str, out: list[str]) -> None:
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok not in _MDOC_MACROS:
            out.append(unescape(tok))
            continue
        if tok in _MDOC_ENCLOSE:
            opening, closing = _MDOC_ENCLOSE[tok]
            if tok.endswith("o"):
                out.extend([opening, _JOIN] if opening else [])
                continue
            inner: list[str] = []
            rest = tokens[i:]
            # trailing punctuation stays outside the enclosure
            tail: list[str] = []
            while rest and rest[-1] in _PUNCT_AFTER:
                tail.insert(0, rest.pop())
            _mdoc_render(rest, name, inner)
            text = mdoc_inline_join(inner)
            out.append(opening + text + closing)
            out.extend(tail)
            return
        if tok in _MDOC_CLOSE:
            if _MDOC_CLOSE[tok]:
                out.extend([_JOIN, _MDOC_CLOSE[tok]])
            continue
        if tok == "Fl":
            if i < len(tokens) and tokens[i] not in _MDOC_MACROS and tokens[i] not in _PUNCT_AFTER:
                out.append("-" + unescape(tokens[i]))
                i += 1
            else:
                out.append("-")
            continue
        if tok == "Xr":
            if i + 1 < len(tokens):
                out.append(f"{unescape(tokens[i])}({unescape(tokens[i + 1])})")
                i += 2
            continue
        if tok == "Nm":
            if i < len(tokens) and tokens[i] not in _MDOC_MACROS and tokens[i] not in _PUNCT_AFTER:
                out.append(unescape(tokens[i]))
                i += 1
            else:
                out.append(name)
            continue
        if tok == "Ns":
            out.append(_JOIN)
            continue
        if tok in ("Ux", "Bx", "At", "Fx"):
            out.append({"Ux": "UNIX", "Bx": "BSD", "At": "AT&T UNIX", "Fx": "FreeBSD"}[tok])
            continue
        if tok == "Ar" and (i >= len(tokens) or tokens[i] in _MDOC_MACROS or tokens[i] in _PUNCT_AFTER):
            out.append("file …")
            continue
        # plain macros: their arguments render as they are


def mdoc_inline_join(pieces: list[str]) -> str:
    text = ""
    glue = False
    for piece in pieces:
        if piece == _JOIN:
            glue = True
            continue
        if not text or glue or piece in _PUNCT_AFTER or text[-1:] in _PUNCT_BEFORE:
            text += piece
        else:
            text += " " + piece
        glue = False
    return text


# ---------------------------------------------------------------------------------------------- parser

_FONT_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}
_FONT_SPACED = {"B", "I", "SM", "SB"}
_BREAKS = {"PP", "LP", "P", "sp", "HP", "RS", "RE", "in", "ti", "Pp", "Lp"}
_LITERAL = {"nf": "fi", "EX": "EE", "TS": "TE", "EQ": "EN", "Vb": "Ve", "PS": "PE", "cs": None}
_SKIP_BLOCK = {"de", "de1", "am", "ig", "ds1"}


class _Builder:
    """Collects text lines into blocks, tracking whether the next text line is a heading or an item tag."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.parts: list[str] = []
        self.kind = "P"
        self.waiting: str | None = None  # "SH", "SS" or "TAG": the next text line is that block
        self.waiting_parts: list[str] = []

    def text(self, s: str) -> None:
        if self.waiting:
            self.waiting_parts.append(s)
            if s.rstrip().endswith(_JOIN):
                return
            text = _clean(" ".join(self.waiting_parts))
            kind, self.waiting, self.waiting_parts = self.waiting, None, []
            if kind == "TAG":
                if text:
                    self.blocks.append(("TAG", text))
                self.kind = "BODY"
            else:
                self.blocks.append((kind, text))
                self.kind = "P"
            return
        self.parts.append(s)

    def flush(self) -> None:
        text = _clean(" ".join(self.parts))
        if text:
            self.blocks.append((self.kind, text))
        self.parts = []

    def brk(self, kind: str = "P") -> None:
        self.flush()
        self.kind = kind

    def heading(self, kind: str, text: str | None) -> None:
        self.flush()
        self.waiting = None
        if text is None:
            self.waiting = kind
        else:
            self.blocks.append((kind, _clean(text)))
            self.kind = "P"

    def tag(self, text: str | None) -> None:
        """An item: ``text`` is its tag (None: the next text line is), "" for an untagged item."""
        self.flush()
        if text is None:
            self.waiting = "TAG"
            return
        text = _clean(text)
        if text:
            self.blocks.append(("TAG", text))
        self.kind = "BODY"

    def literal(self) -> None:
        self.flush()
        self.blocks.append(("LIT", ""))
        self.kind = "P"


def _is_bullet(tag: str) -> bool:
    t = _clean(tag)
    return t in ("", "•", "*", "-", "–", "—", "o", "·", "+") or bool(re.fullmatch(r"\(?\d{1,2}[.)]|\(?[a-z][.)]", t))


def parse_roff(source: str, name: str = "") -> list[Block]:
    """The blocks of a manual page (``man`` or ``mdoc`` macros), in page order."""
    lines = _logical_lines(source)
    b = _Builder()
    strings: dict[str, str] = {}
    i = 0
    n = len(lines)
    mdoc_lists: list[str] = []  # list types of the open .Bl lists
    while i < n:
        line = lines[i]
        i += 1
        if not line.startswith((".", "'")):
            if not line.strip():
                if not b.waiting:
                    b.brk()
                continue
            b.text(unescape(line, strings))
            continue
        body = line[1:].lstrip(" \t")
        m = re.match(r"(\S+)\s*(.*)$", body)
        if not m or body.startswith('\\"'):
            continue
        macro, rest = m.group(1), m.group(2)
        if macro.startswith("\\"):
            continue
        if macro in _LITERAL:
            end = _LITERAL[macro]
            b.literal()
            while i < n and end and not re.match(r"[.']\s*" + end + r"\b", lines[i]):
                i += 1
            i += 1
            continue
        if macro in _SKIP_BLOCK:
            end = ".."
            args = roff_args(rest)
            if macro == "ig" and args and not args[0].startswith("\\"):
                end = "." + args[0]
            while i < n and lines[i].strip() != end:
                i += 1
            i += 1
            continue
        if macro in ("if", "ie", "el", "while"):
            # Conditionals mostly switch typesetter details; skip them with their braced bodies.
            depth = rest.count("\\{") - rest.count("\\}")
            while depth > 0 and i < n:
                depth += lines[i].count("\\{") - lines[i].count("\\}")
                i += 1
            continue
        if macro == "ds":
            args = rest.split(None, 1)
            if args:
                value = args[1] if len(args) > 1 else ""
                strings[args[0]] = unescape(value[1:] if value.startswith('"') else value, strings)
            continue
        args = roff_args(rest)
        if macro in ("SH", "Sh"):
            b.heading("SH", _macro_text(macro, args, name, strings) if args else None)
        elif macro in ("SS", "Ss"):
            b.heading("SS", _macro_text(macro, args, name, strings) if args else None)
        elif macro == "TP":
            b.tag(None)
        elif macro == "TQ":
            b.waiting = "TAG"
        elif macro == "IP":
            tag = unescape(args[0], strings) if args else ""
            b.tag("" if _is_bullet(tag) else tag)
        elif macro in _BREAKS:
            b.brk()
        elif macro in _FONT_SPACED or macro in _FONT_ALTERNATING:
            if args:
                b.text(_macro_text(macro, args, name, strings))
            elif i < n and not lines[i].startswith((".", "'")):
                b.text(unescape(lines[i], strings))
                i += 1
        elif macro in ("UR", "MT", "UE", "ME", "URL", "MTO"):
            if macro in ("URL", "MTO") and args:
                b.text(unescape(args[1] if len(args) > 1 and args[1] else args[0], strings) + " ".join(args[2:]))
            elif macro in ("UE", "ME") and args:
                b.text(_JOIN + unescape(" ".join(args), strings))
        elif macro in ("SY", "OP"):
            b.text(unescape(" ".join(args), strings))
        elif macro == "Nm" and not name and args:
            name = unescape(args[0], strings)
            b.text(name)
        elif macro == "Bl":
            b.flush()
            mdoc_lists.append(next((a for a in args if a.startswith("-")), "-tag"))
        elif macro == "El":
            b.brk()
            if mdoc_lists:
                mdoc_lists.pop()
        elif macro == "It":
            kind = mdoc_lists[-1] if mdoc_lists else "-tag"
            if kind in ("-tag", "-hang", "-ohang", "-inset", "-diag"):
                b.tag(mdoc_inline("No", args, name) if args else "")
            elif kind == "-column":
                b.tag("")
                b.text(mdoc_inline("No", [a for a in args if a not in ("Ta",)], name))
            else:  # -bullet, -dash, -enum, -item, -hyphen
                b.tag("")
                if args:
                    b.text(mdoc_inline("No", args, name))
        elif macro == "Bd":
            if any(a in ("-literal", "-unfilled", "-code") for a in args):
                b.literal()
                depth = 1
                while i < n and depth:
                    if re.match(r"[.']\s*Bd\b", lines[i]):
                        depth += 1
                    elif re.match(r"[.']\s*Ed\b", lines[i]):
                        depth -= 1
                    i += 1
            else:
                b.brk()
        elif macro == "Ed":
            b.brk()
        elif macro in ("Dl", "D1"):
            b.literal()
        elif macro in _MDOC_MACROS:
            b.text(mdoc_inline(macro, args, name))
        elif macro == "br":
            b.text(" ")
        # any other request (.TH .PD .ad .na .hy .nh .ft .ne .so .nr .Dd .Dt .Os ...) prints nothing we keep
    b.flush()
    if b.waiting in ("SH", "SS"):
        b.waiting = None
    return b.blocks


def _macro_text(macro: str, args: list[str], name: str, strings: Mapping[str, str]) -> str:
    if macro in _FONT_ALTERNATING:
        return "".join(unescape(a, strings) for a in args)
    if macro in _FONT_SPACED or macro in ("SH", "SS"):
        return " ".join(unescape(a, strings) for a in args)
    return mdoc_inline("No", args, name)


def _logical_lines(source: str) -> list[str]:
    """Lines with escaped newlines (a trailing backslash) joined."""
    out: list[str] = []
    buf = ""
    for raw in source.replace("\r\n", "\n").split("\n"):
        line = buf + raw
        trail = len(line) - len(line.rstrip("\\"))
        if trail % 2 == 1:
            buf = line[:-1]
            continue
        buf = ""
        out.append(line)
    if buf:
        out.append(buf)
    return out


# ------------------------------------------------------------------------------------------- alignment


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


# ---------------------------------------------------------------------------------------------- source


def read_page(path: Path) -> str:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def read_owners(path: Path = OWNERS_FILE) -> dict[tuple[str, str], str]:
    """(page name, section) -> the package pinned as shipping the English page."""
    owners: dict[tuple[str, str], str] = {}
    if not path.exists():
        return owners
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) >= 3 and not row[0].startswith("#"):
                owners[(row[0], row[1])] = row[2]
    return owners


def _english_page(roots: Mapping[str, Path], owner: str | None, name: str, sec: str) -> Path | None:
    candidates = [owner] if owner in roots else []
    candidates += sorted(p for p in roots if p not in (owner, GERMAN_PACKAGE))
    for pkg in candidates:
        folder = roots[pkg] / "usr/share/man" / f"man{sec}"
        for fn in (f"{name}.{sec}.gz", f"{name}.{sec}"):
            path = folder / fn
            # A symlinked page is an alias of another page (runit's halt is runit-shutdown), not this one.
            if path.is_file() and not path.is_symlink():
                return path
    return None


def german_pages(root: Path) -> Iterator[tuple[str, str, Path]]:
    """(name, section, path) of the German pages under ``root/usr/share/man/de`` (links to other pages left out)."""
    man_de = root / "usr/share/man/de"
    if not man_de.is_dir():
        return
    for sec_dir in sorted(man_de.iterdir()):
        if not sec_dir.is_dir():
            continue
        for path in sorted(sec_dir.iterdir()):
            m = re.fullmatch(r"(.+)\.(\d\w*?)(?:\.gz)?", path.name)
            if not m or path.is_symlink() or not path.is_file() or f"{m.group(1)}.{m.group(2)}" in SKIP_PAGES:
                continue
            yield m.group(1), m.group(2), path


class ManpagesSource(Source):
    """German manual pages paired block by block with the English pages of the same name and section.

    First the pages of manpages-de (``manpages/<name>.<sec>``), then those other pinned packages ship beside
    their English ones (dpkg, apt, debhelper, devscripts: po4a inside the package), each paired with its own
    package's English page, else the one another package ships (debconf-i18n's German pages translate
    debconf's), as ``<package>/man/<name>.<sec>``, unless manpages-de already gave that page.
    """

    name = "manpages"
    kind = "sentences"
    members = ("./usr/share/man/de/*", "./usr/share/man/man*")
    shared_members = ("./usr/share/man/man*",)  # an English page without a pinned owner is looked for anywhere

    def __init__(self, owners_file: Path = OWNERS_FILE) -> None:
        self.owners_file = owners_file

    def extract(self, roots: Mapping[str, Path]) -> Iterator[Document]:
        owners = read_owners(self.owners_file)
        done: set[str] = set()
        german_root = roots.get(GERMAN_PACKAGE)
        for name, sec, path in german_pages(german_root) if german_root is not None else ():
            english_path = _english_page(roots, owners.get((name, sec)), name, sec)
            if english_path is None:
                continue
            pairs = align_page(read_page(english_path), read_page(path), name)
            if pairs:
                done.add(f"{name}.{sec}")
                yield Document(doc_id=f"manpages/{name}.{sec}", pairs=pairs, kind=self.kind)
        for package in dict.fromkeys(self.packages()):
            if package == GERMAN_PACKAGE or package not in roots:
                continue
            for name, sec, path in german_pages(roots[package]):
                english_path = _english_page(roots, package, name, sec)
                if f"{name}.{sec}" in done or english_path is None:
                    continue
                pairs = align_page(read_page(english_path), read_page(path), name)
                if pairs:
                    done.add(f"{name}.{sec}")
                    yield Document(doc_id=f"{package}/man/{name}.{sec}", pairs=pairs, kind=self.kind)


def align_page(english: str, german: str, name: str = "") -> list[Pair]:
    """The pairs of one English page and its German translation (both roff source)."""
    if english.lstrip().startswith(".so ") or german.lstrip().startswith(".so "):
        return []
    return align_blocks(parse_roff(english, name), drop_german_addenda(parse_roff(german, name)))


register(ManpagesSource())
