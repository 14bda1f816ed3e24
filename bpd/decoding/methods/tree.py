"""Tree verification: blockwise decoding that verifies a tree of candidate blocks per round, not one chain.

The chain decoder (``bpd.decoding.methods.blockwise``) proposes one token per slot and loses the rest of the block
at the first wrong guess. Here each slot offers several candidates (the heads' top few), arranged as a tree
(``bpd.decoding.tree_shape``, built by ``bpd.decoding.tree_build``) whose root is p_1's argmax and whose
depth-d nodes guess slot d; every root-to-node path is a candidate block. One decoder call scores the whole
tree: each node attends to the cached prefix and to its own ancestors only (a tree attention mask, with
positions by depth), as in Medusa (Cai et al. 2024) and SpecInfer (Miao et al. 2024). The round keeps the
longest path whose every node the criterion accepts under p_1 at its parent; with exact acceptance that path
is what greedy decoding would produce, so the output stays identical to greedy. The cache keeps only that
path's entries, moved to follow the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from bpd.decoding.common import last_position, top1
from bpd.decoding.criteria import Criterion, Exact
from bpd.decoding.engine import checked_engine, engine_for
from bpd.decoding.loop import Accepted, Batch, Rounds, RowState, checked_criterion, decode_rounds
from bpd.decoding.method import NOTHING, Method, Options, Plan, Prepared, RoundOptions
from bpd.decoding.result import DecodeResult
from bpd.decoding.static_tree import tree_decode_static
from bpd.decoding.tree_build import Tree, build_tree
from bpd.decoding.tree_shape import TreeShape, required_depth

__all__ = ["TreeShape", "build_tree", "tree_decode", "verify_tree"]


@dataclass
class TreeRound:
    """A round's outcome per row: the accepted path (node indices, root first) and its tokens, and the decoder
    state (B, d) and p_1's argmax (B, 1) at the path's last node."""

    paths: list[list[int]]
    blocks: list[list[int]]
    h_last: torch.Tensor
    first: torch.Tensor


def verify_tree(model, tree: Tree, enc, cache, criterion: Criterion) -> TreeRound:
    """One decoder call over every row's tree; accept the longest path whose nodes all pass the criterion
    under p_1 at their parent (one host synchronisation); keep that path in the cache."""
    n = tree.tokens.shape[1]
    h = model.decode(tree.tokens, enc, cache, tree=(tree.depth, tree.ancestors))
    logits = model.heads.base_logits(h)
    best = top1(logits)
    if isinstance(criterion, Exact) and tree.shared is not None:
        # A fixed shape: parents and depths are known on the host, so the argmaxes and tokens are all that
        # cross over, and a node passes when its parent's argmax is its token.
        par, dep = tree.shared
        host = [(([b[par[i]] == t[i] for i in range(n)]), t, par, dep)
                for b, t in torch.stack([best, tree.tokens], dim=1).tolist()]
    else:
        parent_best = best.gather(1, tree.parent)
        if isinstance(criterion, Exact):
            flags = parent_best == tree.tokens
        else:
            parent_logits = logits.gather(1, tree.parent[:, :, None].expand(-1, -1, logits.shape[-1]))
            flags = criterion.accept(parent_logits, tree.tokens, parent_best)
        host = torch.stack([flags.long(), tree.tokens, tree.parent, tree.depth], dim=1).tolist()
    paths, blocks = [], []
    for f, tok, par, dep in host:
        ok, deepest = [True] + [False] * (n - 1), 0
        for i in range(1, n):
            ok[i] = bool(f[i]) and ok[par[i]]
            if ok[i] and dep[i] > dep[deepest]:
                deepest = i  # the first (most probable) node of the greatest accepted depth
        path = [deepest]
        while path[-1]:
            path.append(par[path[-1]])
        path.reverse()
        paths.append(path)
        blocks.append([tok[i] for i in path])
    kept = [len(p) for p in paths]
    if all(p[-1] == len(p) - 1 for p in paths):  # every path is already in place (nodes 0, 1, ..): no move
        cache.rollback(n, kept)
    else:
        cache.keep_path(n, paths)
    if len(paths) == 1:  # batch 1: plain views, no index tensor to build
        i = paths[0][-1]
        return TreeRound(paths, blocks, h[:, i], best[:, i : i + 1])
    last = torch.tensor([p[-1] for p in paths], device=h.device)[:, None]
    return TreeRound(paths, blocks, h.gather(1, last[:, :, None].expand(-1, 1, h.shape[-1]))[:, 0],
                     best.gather(1, last))


@dataclass
class TreeState(RowState):
    """The decoder state (B, d) and p_1's argmax (B, 1) at the last accepted node: the next tree's root."""

    h_last: torch.Tensor
    first: torch.Tensor


class TreeRounds(Rounds):
    """Build the candidate tree at the last accepted position, verify it in one call, keep the accepted path."""

    def __init__(self, shape: TreeShape, criterion: Criterion) -> None:
        self.shape, self.criterion = shape, criterion
        # Depths accepted below the root count as the chain's slots.
        self.slots, self.room, self.start_calls = shape.depth, shape.n_nodes + 1, 1

    def start(self, model, batch: Batch) -> TreeState:
        h_last = model.decode(batch.bos, batch.enc, batch.cache)[:, 0]
        return TreeState(h_last, top1(model.heads.base_logits(h_last))[:, None])

    def round(self, model, batch: Batch, state: TreeState) -> tuple[TreeState, Accepted]:
        tree = build_tree(model, state.h_last, state.first, self.shape, batch.enc, last_position(batch.cache))
        r = verify_tree(model, tree, batch.enc, batch.cache, self.criterion)
        return TreeState(r.h_last, r.first), (r.blocks, [len(b) - 1 for b in r.blocks])


@torch.inference_mode()
def tree_decode(
    model,
    src: torch.Tensor,
    shape: TreeShape | str,
    k: int | None = None,
    criterion: Criterion | None = None,
    max_len: int | None = None,
    engine: str = "eager",
) -> DecodeResult:
    """Blockwise decoding with tree verification at any batch size; exact criterion == greedy output.

    ``shape`` is a ``TreeShape`` or its config string (``"3x2x1"``, ``"beam4"``); its depth must stay below
    k (the heads guess slots 1..k-1). Rows' ``position_*`` count depths as the chain counts slots. ``engine``: the
    eager loop, or the static path's fixed-shape rounds (``bpd.decoding.static_tree``: static, compiled).
    """
    k = model.k if k is None else int(k)
    if not 2 <= k <= model.k:
        raise ValueError(f"tree decoding needs k between 2 and the model's trained k={model.k} (got {k}); a tree "
                         "of k = 1 is greedy.")
    shape = checked_shape(shape, k)
    criterion = checked_criterion(criterion)
    if criterion.min_block_size != 1:
        raise ValueError("tree decoding has no minimum block size (a forced block is no path of the tree); use "
                         "min_block_size=1 or the chain decoder.")
    if checked_engine(engine) != "eager":
        return tree_decode_static(engine_for(model, engine), src, shape, criterion, max_len)
    return decode_rounds(model, src, max_len, TreeRounds(shape, criterion))


def checked_shape(shape: TreeShape | str, k: int) -> TreeShape:
    """A shape (or its config string) that fits k: the heads guess slots 1..k-1 only."""
    shape = TreeShape.parse(shape, k) if isinstance(shape, str) else shape
    if shape.depth > k - 1:
        raise ValueError(f"a tree {shape.depth} deep needs k >= {shape.depth + 1} (got k={k}).")
    return shape


@lru_cache(maxsize=256)
def _shape(tree: str, k: int) -> TreeShape:
    return checked_shape(tree, k)


class TreeVerification(Method):
    """Its options are a tree shape's config string (``o.tree``: "3x2x1", "beam4", "chain+1"), one of those a
    config lists."""

    name = "tree"
    own_columns = ("tree", "tree_nodes")

    @staticmethod
    def shape(o: RoundOptions) -> TreeShape:
        """The shape ``o`` asks for, refused unless it fits its k (parsed once per shape and k: decoders time
        their calls)."""
        return _shape(o.tree or "", o.k)

    def check(self, o: RoundOptions) -> None:
        if o.min_block_size != 1:
            raise ValueError("tree decoding has no minimum block size (a forced block is no path of the tree).")
        self.shape(o)

    def columns(self, o: RoundOptions) -> dict[str, Any]:
        shape = self.shape(o)
        return o.columns() | {"tree": shape.name, "tree_nodes": shape.n_nodes}

    def decoder_name(self, o: RoundOptions) -> str:
        return f"tree_{self.shape(o).name}_k{o.k}_{o.criterion_suffix}"

    def sweep(self, plan: Plan, asked: list[str]) -> list[Options]:
        """Every shape asked x criterion x k >= 2 that the shape fits (widths deeper than k - 1 slots skip that
        k)."""
        return [self.options(k, c.name, c.param, tree=shape) for shape in asked for c in plan.criteria
                for k in plan.round_ks if required_depth(shape) <= k - 1]

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: RoundOptions, run: Prepared = NOTHING
               ) -> DecodeResult:
        return tree_decode(model, src, self.shape(o), k=o.k, criterion=o.criterion_for(run.criterion_kwargs),
                           max_len=max_len, engine=o.engine)

    def step_cost_key(self, o: RoundOptions) -> str:
        return f"tree{o.k}_{self.shape(o).name}"
