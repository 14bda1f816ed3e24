"""Roff below the request level: escapes resolved to the characters they print, request arguments split.

Both page formats (``man`` and BSD ``mdoc``) share this layer: a text line or a macro argument is unescaped
here before the parser or the mdoc renderer decides which block it belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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
JOIN = "\x00"

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
    "c": JOIN,
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


def clean(text: str) -> str:
    """Text of a block: ``JOIN`` marks closed up with the blanks around them, whitespace collapsed."""
    text = re.sub(r"\s*" + JOIN + r"\s*", "", text)
    return " ".join(text.split())
