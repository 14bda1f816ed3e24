"""BSD ``mdoc`` inline macros (ssh, file, bsdgames): a macro line rendered as the text it prints.

An mdoc line is a sequence of macros and words where a macro may take the rest of the line as its argument
(``.Op Fl a Ar file`` is ``[-a file]``), so the line is rendered token by token, enclosures recursively.
"""

from __future__ import annotations

from corpora.debian.sources.manpages.escapes import JOIN, unescape

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
MDOC_MACROS = set(_MDOC_ENCLOSE) | set(_MDOC_CLOSE) | _MDOC_PLAIN | {"Fl", "Xr", "Nm", "Ns", "Ux", "Bx", "At", "Fx"}
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
        if tok not in MDOC_MACROS:
            out.append(unescape(tok))
            continue
        if tok in _MDOC_ENCLOSE:
            opening, closing = _MDOC_ENCLOSE[tok]
            if tok.endswith("o"):
                out.extend([opening, JOIN] if opening else [])
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
                out.extend([JOIN, _MDOC_CLOSE[tok]])
            continue
        if tok == "Fl":
            if i < len(tokens) and tokens[i] not in MDOC_MACROS and tokens[i] not in _PUNCT_AFTER:
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
            if i < len(tokens) and tokens[i] not in MDOC_MACROS and tokens[i] not in _PUNCT_AFTER:
                out.append(unescape(tokens[i]))
                i += 1
            else:
                out.append(name)
            continue
        if tok == "Ns":
            out.append(JOIN)
            continue
        if tok in ("Ux", "Bx", "At", "Fx"):
            out.append({"Ux": "UNIX", "Bx": "BSD", "At": "AT&T UNIX", "Fx": "FreeBSD"}[tok])
            continue
        if tok == "Ar" and (i >= len(tokens) or tokens[i] in MDOC_MACROS or tokens[i] in _PUNCT_AFTER):
            out.append("file …")
            continue
        # plain macros: their arguments render as they are


def mdoc_inline_join(pieces: list[str]) -> str:
    text = ""
    glue = False
    for piece in pieces:
        if piece == JOIN:
            glue = True
            continue
        if not text or glue or piece in _PUNCT_AFTER or text[-1:] in _PUNCT_BEFORE:
            text += piece
        else:
            text += " " + piece
        glue = False
    return text
