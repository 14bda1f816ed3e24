"""Tree shapes: which candidate blocks a tree-verification round (``bpd.decoding.methods.tree``) scores.

* fixed: a set of rank paths, e.g. (0,), (1,), (0, 0), (0, 1): the node (r_1, ..., r_d) is the r_d-th best
  candidate of slot d under its parent. ``TreeShape.widths([3, 2, 1])`` is the full product tree (3
  candidates at depth 1, 2 under each, 1 under those); sparse sets (Medusa's choice) are allowed too, and
  ``TreeShape.chain_plus`` is the chain plus a few such paths (``"chain+1"``: slot 1's second candidate);
* budgeted: ``TreeShape.beam(m, depth)`` keeps, at every depth, the m children with the highest path
  probability (the product of the heads' probabilities along the path) among all children of the
  previous depth's nodes, so the tree grows where the heads are confident (as EAGLE-2 does).

Config strings (``decode.methods.tree``, ``bench.methods.tree``) follow ``bpd.config.parse_tree_shape``'s grammar;
``required_depth`` is the one rule for which k a string fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config import parse_tree_shape


def required_depth(text: str) -> int:
    """The proposal slots (k - 1) a shape string needs at least: its widths, or its deepest rank path; a
    budgeted tree, or the chain of a ``chain+...`` shape, grows to any depth (so 1 for a budget)."""
    beam, widths, extra = parse_tree_shape(text)
    return 1 if beam else len(widths) or max(len(p) for p in extra)


@dataclass(frozen=True)
class TreeShape:
    """Which candidates a round verifies: ``paths`` (fixed rank paths, prefix-closed) or ``beam`` children
    per depth (budgeted by path probability) down to ``depth`` (slots 1..depth)."""

    paths: tuple[tuple[int, ...], ...] = ()
    beam: int = 0
    depth: int = 0
    name: str = ""  # how rows label it ("3x2x1", "beam4", "sparse<N>")

    @staticmethod
    def widths(widths: list[int]) -> TreeShape:
        """The full product tree: ``widths[d-1]`` candidates under every node of depth d-1."""
        if not widths or any(int(w) < 1 for w in widths):
            raise ValueError(f"tree widths must be a non-empty list of counts >= 1 (got {list(widths)}).")
        paths: list[tuple[int, ...]] = [()]
        out: list[tuple[int, ...]] = []
        for w in widths:
            paths = [p + (r,) for p in paths for r in range(int(w))]
            out += paths
        return TreeShape(paths=tuple(out), depth=len(widths), name="x".join(str(int(w)) for w in widths))

    @staticmethod
    def budget(beam: int, depth: int) -> TreeShape:
        if beam < 1 or depth < 1:
            raise ValueError(f"a budgeted tree needs beam >= 1 and depth >= 1 (got {beam} and {depth}).")
        return TreeShape(beam=int(beam), depth=int(depth), name=f"beam{int(beam)}")

    @staticmethod
    def chain_plus(extra: list[tuple[int, ...]], depth: int, name: str = "") -> TreeShape:
        """The chain of first candidates down to ``depth`` plus the nodes at the ``extra`` rank paths (and their
        ancestors): a sparse tree that spends nodes only where the chain's guesses are often second best."""
        paths = {(0,) * d for d in range(1, depth + 1)} | {p[:i] for p in extra for i in range(1, len(p) + 1)}
        return TreeShape(paths=tuple(paths), name=name or "chain" + "".join("+" + "".join(map(str, p)) for p in extra))

    @staticmethod
    def parse(text: str, k: int) -> TreeShape:
        """From a config string: ``"3x2x1"`` (widths per depth; depths beyond them get 1 while < k), ``"beam4"``
        (4 per depth, depth k - 1) or ``"chain+1+10"`` (the chain to depth k - 1 plus those rank paths)."""
        beam, widths, extra = parse_tree_shape(text)
        if beam:
            return TreeShape.budget(beam, k - 1)
        deep = required_depth(text)
        if deep > k - 1:
            raise ValueError(f"tree shape {text!r} is {deep} deep, but k={k} has only {k - 1} proposal "
                             "slots; shorten it or raise k.")
        if extra:
            return TreeShape.chain_plus(extra, k - 1, name=str(text).strip().lower())
        return TreeShape.widths(widths + [1] * (k - 1 - len(widths)))

    def __post_init__(self) -> None:
        if self.paths:
            have = set(self.paths)
            bad = [p for p in self.paths if not p or any(r < 0 for r in p) or (len(p) > 1 and p[:-1] not in have)]
            if bad or len(have) != len(self.paths):
                raise ValueError(f"tree paths must be distinct, non-empty, non-negative and prefix-closed "
                                 f"(the parent of every path listed too); got {bad[:3] or 'duplicates'}.")
            object.__setattr__(self, "paths", tuple(sorted(self.paths, key=lambda p: (len(p), p))))
            object.__setattr__(self, "depth", max(len(p) for p in self.paths))
            if not self.name:
                object.__setattr__(self, "name", f"sparse{len(self.paths) + 1}")

    @property
    def level_sizes(self) -> list[int]:
        """Nodes per depth, root (depth 0) first: the same for every row of a batch."""
        if self.paths:
            return [1] + [sum(len(p) == d for p in self.paths) for d in range(1, self.depth + 1)]
        return [1] + [self.beam] * self.depth

    @property
    def n_nodes(self) -> int:
        return sum(self.level_sizes)
