"""Tree verification (``decode.methods.tree``: the tree shapes to verify) and the one grammar of tree-shape
strings."""

from __future__ import annotations

import re

from bpd.config.common import ENGINES, check
from bpd.config.methods import Role, declare

TREE_GRAMMAR = "use widths per depth like '3x2x1', a budget like 'beam4' or the chain plus rank paths like 'chain+1+10'"


def parse_tree_shape(text: str) -> tuple[int, list[int], list[tuple[int, ...]]]:
    """The one grammar of tree-shape strings (``decode.methods.tree``, ``tree_decode``): ``"beam4"`` -> (4, [], []),
    a budget of 4 nodes per depth; ``"3x2x1"`` -> (0, [3, 2, 1], []), candidates per node at each depth;
    ``"chain+1+10"`` -> (0, [], [(1,), (1, 0)]), the chain of first candidates plus the nodes at these rank paths
    (one digit per depth: ``10`` is the best child of slot 1's second candidate)."""
    t = str(text).strip().lower()
    if re.fullmatch(r"beam[1-9][0-9]*", t):
        return int(t[4:]), [], []
    if re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*)*", t):
        return 0, [int(w) for w in t.split("x")], []
    if re.fullmatch(r"chain(\+[0-9]+)+", t):
        return 0, [], [tuple(int(c) for c in p) for p in t.split("+")[1:]]
    raise ValueError(f"unknown tree shape {text!r}; {TREE_GRAMMAR}.")


def check_tree_shapes(trees: list[str], where: str) -> None:
    for t in trees:
        try:
            parse_tree_shape(t)
        except ValueError:
            check(False, f"unknown tree shape {t!r} in {where}; {TREE_GRAMMAR}.")


declare("tree", Role.BEYOND, "tree", 40, options=list[str], check=check_tree_shapes, exact=True, engines=ENGINES)
