"""The roff parser of manual pages: a page's source as a sequence of blocks labelled by kind.

Kinds: ``SH`` (section heading), ``SS`` (subsection heading), ``P`` (paragraph), ``TAG`` (item tag), ``BODY``
(item body), ``LIT`` (a literal block: ``.nf``/``.EX``/tables/``.Bd -literal``, kept with empty text so it
takes part in the kind sequence without ever being paired). Both the classic ``man`` macros and BSD ``mdoc``
are read; requests that print nothing we keep (page headers, spacing, fonts without text) are passed over.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from corpora.debian.sources.manpages.escapes import JOIN, clean, roff_args, unescape
from corpora.debian.sources.manpages.mdoc import MDOC_MACROS, mdoc_inline

Block = tuple[str, str]  # (kind, text); kinds: SH SS P TAG BODY LIT

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
            if s.rstrip().endswith(JOIN):
                return
            text = clean(" ".join(self.waiting_parts))
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
        text = clean(" ".join(self.parts))
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
            self.blocks.append((kind, clean(text)))
            self.kind = "P"

    def tag(self, text: str | None) -> None:
        """An item: ``text`` is its tag (None: the next text line is), "" for an untagged item."""
        self.flush()
        if text is None:
            self.waiting = "TAG"
            return
        text = clean(text)
        if text:
            self.blocks.append(("TAG", text))
        self.kind = "BODY"

    def literal(self) -> None:
        self.flush()
        self.blocks.append(("LIT", ""))
        self.kind = "P"


def _is_bullet(tag: str) -> bool:
    """Whether an ``.IP`` tag only marks the item (a bullet, a number, a letter): no text of its own."""
    t = clean(tag)
    return t in ("", "•", "*", "-", "–", "—", "o", "·", "+") or bool(re.fullmatch(r"\(?\d{1,2}[.)]|\(?[a-z][.)]", t))


def parse_roff(source: str, name: str = "") -> list[Block]:
    """The blocks of a manual page (``man`` or ``mdoc`` macros), in page order."""
    return _PageReader(_logical_lines(source), name).read()


class _PageReader:
    """Walks a page's logical lines once; a request may consume the lines after it (a literal block, a macro
    definition, a conditional's braced body, a font macro's text line), so the position is shared state."""

    def __init__(self, lines: list[str], name: str) -> None:
        self.lines = lines
        self.i = 0  # the next line to read
        self.name = name  # the page's name: mdoc's .Nm without arguments prints it
        self.b = _Builder()
        self.strings: dict[str, str] = {}  # strings the page defines with .ds
        self.mdoc_lists: list[str] = []  # list types of the open .Bl lists

    def read(self) -> list[Block]:
        while self.i < len(self.lines):
            line = self.lines[self.i]
            self.i += 1
            if line.startswith((".", "'")):
                self._request(line)
            else:
                self._text_line(line)
        self.b.flush()
        if self.b.waiting in ("SH", "SS"):
            self.b.waiting = None
        return self.b.blocks

    def _text_line(self, line: str) -> None:
        """A blank line ends the paragraph, except between a heading or item request and its text line."""
        if not line.strip():
            if not self.b.waiting:
                self.b.brk()
            return
        self.b.text(unescape(line, self.strings))

    def _next_is_text(self) -> bool:
        return self.i < len(self.lines) and not self.lines[self.i].startswith((".", "'"))

    def _request(self, line: str) -> None:
        body = line[1:].lstrip(" \t")
        m = re.match(r"(\S+)\s*(.*)$", body)
        if not m or body.startswith('\\"'):
            return
        macro, rest = m.group(1), m.group(2)
        if macro.startswith("\\") or self._skipped(macro, rest):
            return
        if macro == "ds":
            self._define_string(rest)
            return
        args = roff_args(rest)
        if self._man_macro(macro, args) or self._mdoc_macro(macro, args):
            return
        if macro == "br":
            self.b.text(" ")
        # any other request (.TH .PD .ad .na .hy .nh .ft .ne .so .nr .Dd .Dt .Os ...) prints nothing we keep

    # -- requests whose lines are skipped ------------------------------------------------------------------

    def _skipped(self, macro: str, rest: str) -> bool:
        """Skip what a literal block, a macro definition or a conditional spans; whether ``macro`` was one."""
        if macro in _LITERAL:
            self.b.literal()
            self._skip_literal(_LITERAL[macro])
        elif macro in _SKIP_BLOCK:
            self._skip_definition(macro, rest)
        elif macro in ("if", "ie", "el", "while"):
            self._skip_conditional(rest)
        else:
            return False
        return True

    def _skip_literal(self, end: str | None) -> None:
        """Past the line that ends the literal block (``.fi``, ``.EE``, ...); ``end`` None (``.cs``): one line."""
        while self.i < len(self.lines) and end and not re.match(r"[.']\s*" + end + r"\b", self.lines[self.i]):
            self.i += 1
        self.i += 1

    def _skip_definition(self, macro: str, rest: str) -> None:
        """Past a macro definition or an ``.ig`` comment: up to ``..`` or the end macro ``.ig`` names."""
        end = ".."
        args = roff_args(rest)
        if macro == "ig" and args and not args[0].startswith("\\"):
            end = "." + args[0]
        while self.i < len(self.lines) and self.lines[self.i].strip() != end:
            self.i += 1
        self.i += 1

    def _skip_conditional(self, rest: str) -> None:
        """Conditionals mostly switch typesetter details; skip them with their braced bodies."""
        depth = rest.count("\\{") - rest.count("\\}")
        while depth > 0 and self.i < len(self.lines):
            depth += self.lines[self.i].count("\\{") - self.lines[self.i].count("\\}")
            self.i += 1

    def _define_string(self, rest: str) -> None:
        args = rest.split(None, 1)
        if args:
            value = args[1] if len(args) > 1 else ""
            self.strings[args[0]] = unescape(value[1:] if value.startswith('"') else value, self.strings)

    # -- man macros -----------------------------------------------------------------------------------------

    def _man_macro(self, macro: str, args: list[str]) -> bool:
        """Apply a ``man`` macro (headings, items, breaks, fonts, links); whether ``macro`` was one."""
        b = self.b
        if macro in ("SH", "Sh"):
            b.heading("SH", _macro_text(macro, args, self.name, self.strings) if args else None)
        elif macro in ("SS", "Ss"):
            b.heading("SS", _macro_text(macro, args, self.name, self.strings) if args else None)
        elif macro == "TP":
            b.tag(None)
        elif macro == "TQ":
            b.waiting = "TAG"
        elif macro == "IP":
            tag = unescape(args[0], self.strings) if args else ""
            b.tag("" if _is_bullet(tag) else tag)
        elif macro in _BREAKS:
            b.brk()
        elif macro in _FONT_SPACED or macro in _FONT_ALTERNATING:
            self._font(macro, args)
        elif macro in ("UR", "MT", "UE", "ME", "URL", "MTO"):
            self._link(macro, args)
        elif macro in ("SY", "OP"):
            b.text(unescape(" ".join(args), self.strings))
        else:
            return False
        return True

    def _font(self, macro: str, args: list[str]) -> None:
        """A font macro prints its arguments, or without any the next text line."""
        if args:
            self.b.text(_macro_text(macro, args, self.name, self.strings))
        elif self._next_is_text():
            self.b.text(unescape(self.lines[self.i], self.strings))
            self.i += 1

    def _link(self, macro: str, args: list[str]) -> None:
        """A link prints its text: ``.URL``/``.MTO`` their text argument (else the address), ``.UE``/``.ME``
        what follows the link (punctuation), closed up to it."""
        if macro in ("URL", "MTO") and args:
            text = args[1] if len(args) > 1 and args[1] else args[0]
            self.b.text(unescape(text, self.strings) + " ".join(args[2:]))
        elif macro in ("UE", "ME") and args:
            self.b.text(JOIN + unescape(" ".join(args), self.strings))

    # -- mdoc macros ----------------------------------------------------------------------------------------

    def _mdoc_macro(self, macro: str, args: list[str]) -> bool:
        """Apply an ``mdoc`` macro (lists, displays, inline macros); whether ``macro`` was one."""
        b = self.b
        if macro == "Nm" and not self.name and args:
            self.name = unescape(args[0], self.strings)
            b.text(self.name)
        elif macro == "Bl":
            b.flush()
            self.mdoc_lists.append(next((a for a in args if a.startswith("-")), "-tag"))
        elif macro == "El":
            b.brk()
            if self.mdoc_lists:
                self.mdoc_lists.pop()
        elif macro == "It":
            self._mdoc_item(args)
        elif macro == "Bd":
            self._mdoc_display(args)
        elif macro == "Ed":
            b.brk()
        elif macro in ("Dl", "D1"):
            b.literal()
        elif macro in MDOC_MACROS:
            b.text(mdoc_inline(macro, args, self.name))
        else:
            return False
        return True

    def _mdoc_item(self, args: list[str]) -> None:
        """An ``.It`` of the innermost open list: a tag for tagged lists, an untagged item otherwise."""
        kind = self.mdoc_lists[-1] if self.mdoc_lists else "-tag"
        if kind in ("-tag", "-hang", "-ohang", "-inset", "-diag"):
            self.b.tag(mdoc_inline("No", args, self.name) if args else "")
        elif kind == "-column":
            self.b.tag("")
            self.b.text(mdoc_inline("No", [a for a in args if a not in ("Ta",)], self.name))
        else:  # -bullet, -dash, -enum, -item, -hyphen
            self.b.tag("")
            if args:
                self.b.text(mdoc_inline("No", args, self.name))

    def _mdoc_display(self, args: list[str]) -> None:
        """A literal display (``.Bd -literal``) is skipped to its ``.Ed``, nested displays counted; another
        display is a paragraph break."""
        if not any(a in ("-literal", "-unfilled", "-code") for a in args):
            self.b.brk()
            return
        self.b.literal()
        depth = 1
        while self.i < len(self.lines) and depth:
            if re.match(r"[.']\s*Bd\b", self.lines[self.i]):
                depth += 1
            elif re.match(r"[.']\s*Ed\b", self.lines[self.i]):
                depth -= 1
            self.i += 1


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
