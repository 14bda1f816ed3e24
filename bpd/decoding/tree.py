"""Tree verification: blockwise decoding that verifies a tree of candidate blocks per round, not one chain.

The chain decoder (``bpd.decoding.blockwise``) proposes one token per slot and loses the rest of the block
at the first wrong guess. Here each slot offers several candidates (the heads' top few), arranged as a tree
whose root is p_1's argmax and whose depth-d nodes guess slot d; every root-to-node path is a candidate
block. One decoder call scores the whole tree: each node attends to the cached prefix and to its own
ancestors only (a tree attention mask, with positions by depth), as in Medusa (Cai et al. 2024) and
SpecInfer (Miao et al. 2024). The round keeps the longest path whose every node the criterion accepts
under p_1 at its parent; with exact acceptance that path is what greedy decoding would produce, so the
output stays identical to greedy. The cache keeps only that path's entries, moved to follow the prefix.

Tree shapes (``TreeShape``):

* fixed: a set of rank paths, e.g. (0,), (1,), (0, 0), (0, 1): the node (r_1, ..., r_d) is the r_d-th best
  candidate of slot d under its parent. ``TreeShape.widths([3, 2, 1])`` is the full product tree (3
  candidates at depth 1, 2 under each, 1 under those); sparse sets (Medusa's choice) are allowed too, and
  ``TreeShape.chain_plus`` is the chain plus a few such paths (``"chain+1"``: slot 1's second candidate);
* budgeted: ``TreeShape.beam(m, depth)`` keeps, at every depth, the m children with the highest path
  probability (the product of the heads' probabilities along the path) among all children of the
  previous depth's nodes, so the tree grows where the heads are confident (as EAGLE-2 does).

Heads whose slots read the previous slot's token (recurrent) get one head step per node: a node's children
are ranked under its own token. Other heads rank every slot once; their trees share candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from bpd.config import parse_tree_shape
from bpd.decoding.common import RowTracker, checked_max_len, count_positions, drop_finished, top1
from bpd.decoding.criteria import Criterion, Exact
from bpd.decoding.result import DecodeResult
from bpd.models import fastpath
from bpd.models.heads import RecurrentHeads


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
        deep = len(widths) or max(len(p) for p in extra)
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


@dataclass
class Tree:
    """One round's candidate tree for every row: ``tokens`` (B, N), ``parent`` (B, N; the root's is 0),
    ``depth`` (B, N), ``ancestors`` (B, N, N; ancestors and self), ``logp`` (B, N; the heads' log-probability
    of the path to each node). A node comes after its parent: fixed shapes in depth-first order (the chain of
    first candidates first), budgeted ones level by level."""

    tokens: torch.Tensor
    parent: torch.Tensor
    depth: torch.Tensor
    ancestors: torch.Tensor
    logp: torch.Tensor | None = None
    shared: tuple[list[int], list[int]] | None = None  # a fixed shape's parent and depth lists, every row's


@lru_cache(maxsize=64)
def _level_plan(shape: TreeShape) -> tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]:
    """A fixed shape's per-depth (parent index in the previous level, rank under it, candidates needed):
    the same every round, so worked out once per shape."""
    plan, prev = [], [()]
    for d in range(1, shape.depth + 1):
        want = [p for p in shape.paths if len(p) == d]
        plan.append((tuple(prev.index(p[:-1]) for p in want), tuple(p[-1] for p in want), max(p[-1] for p in want) + 1))
        prev = want
    return tuple(plan)


def _candidates(heads, state: torch.Tensor, tok: torch.Tensor, d: int, slot_scores: torch.Tensor | None,
                n: int, logp: bool, source=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The ``n`` best children of every frontier node at depth ``d - 1``: (scores (B, F, n), token ids
    (B, F, n), the children's head state (B, F, d_model) or None). Scores are log-probabilities with ``logp``
    (a budgeted tree ranks paths across parents), else raw logits (a fixed shape only ranks a node's own
    children, and logits rank them as their log-probabilities do, without a softmax)."""
    if slot_scores is None:  # path-dependent heads: slot d reads its parent's token
        child_state, scores = heads.step_logits(state, tok, d, source)
        if logp:
            scores = torch.log_softmax(scores.float(), dim=-1)
        top_lp, top_i = scores.topk(min(n, scores.shape[-1]), dim=-1)
    else:  # one set of candidates per slot, shared by every node of the frontier
        child_state = None
        top_lp, top_i = slot_scores[:, d - 1].topk(min(n, slot_scores.shape[-1]), dim=-1)
        top_lp, top_i = (t[:, None].expand(-1, tok.shape[1], -1) for t in (top_lp, top_i))
    ids = heads.proposal_ids
    return top_lp, (top_i if ids is None else ids[top_i]), child_state


def _structure(parent: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Depth (B, N) and ancestors-and-self (B, N, N) of trees whose nodes come in levels of ``sizes`` (root
    first), from each node's parent index (B, N)."""
    b, n = parent.shape
    dev = parent.device
    depth = torch.repeat_interleave(torch.arange(len(sizes), device=dev), torch.tensor(sizes, device=dev))
    anc = torch.eye(n, dtype=torch.bool, device=dev).repeat(b, 1, 1)
    start = 1
    for size in sizes[1:]:  # a level at a time: its parents' rows are complete before it
        lvl = slice(start, start + size)
        anc[:, lvl] |= anc.gather(1, parent[:, lvl, None].expand(-1, -1, n))
        start += size
    return depth[None].expand(b, -1), anc


@lru_cache(maxsize=64)
def _fixed_structure(shape: TreeShape, b: int, dev: torch.device):
    """A fixed shape's parent, depth and ancestor tensors in depth-first order, the permutation that takes its
    level-ordered nodes (as they are built) to that order (None where they agree), and per-level (parent,
    rank, candidates needed): the same every round, so built once per shape, batch size and device (callers
    only read them).

    Depth-first order puts the chain of first candidates at nodes 0, 1, 2, ...: a round that keeps a prefix
    of it (most rounds) finds the kept cache entries already in place and only rolls back."""
    plan = _level_plan(shape)
    sizes = [1] + [len(par) for par, _, _ in plan]
    starts = [sum(sizes[:d]) for d in range(len(sizes))]  # node index of each level's first node
    parent = [0] + [starts[d] + p for d, (par, _, _) in enumerate(plan) for p in par]  # level d+1's parents: level d
    nodes = [()] + [p for d in range(1, shape.depth + 1) for p in shape.paths if len(p) == d]  # level order
    perm = sorted(range(len(nodes)), key=lambda i: nodes[i])  # depth-first (lexicographic) position -> level index
    where = {old: new for new, old in enumerate(perm)}
    parent_df = [0] + [where[parent[i]] for i in perm[1:]]
    parent_t = torch.tensor(parent_df, device=dev)[None].expand(b, -1)
    depth = torch.tensor([len(nodes[i]) for i in perm], device=dev)[None].expand(b, -1)
    anc = torch.eye(len(nodes), dtype=torch.bool, device=dev)
    for i in range(1, len(nodes)):  # depth-first: a node's parent row is complete before it
        anc[i] |= anc[parent_df[i]]
    levels = tuple((torch.tensor(par, device=dev), torch.tensor(rank, device=dev), need) for par, rank, need in plan)
    order = None if perm == list(range(len(nodes))) else torch.tensor(perm, device=dev)
    shared = (parent_df, [len(nodes[i]) for i in perm])
    return parent_t, depth, anc.repeat(b, 1, 1), order, levels, shared


def _fixed_tree(tokens: torch.Tensor, fixed) -> Tree:
    """A fixed shape's tree from its level-ordered tokens (B, N), in the structure's depth-first order."""
    parent, depth, anc, order, _, shared = fixed
    return Tree(tokens if order is None else tokens[:, order], parent, depth, anc, shared=shared)


def _selector(idx: list[int], dev: torch.device) -> slice | torch.Tensor:
    """Indexing that picks ``idx`` along a dimension: a slice (a view, no copy) for a leading run 0, 1, ..."""
    return slice(0, len(idx)) if idx == list(range(len(idx))) else torch.tensor(idx, device=dev)


@lru_cache(maxsize=64)
def _recurrent_plan(shape: TreeShape, dev: torch.device) -> tuple:
    """A fixed shape's per-depth plan for ``fastpath.recurrent_tree``: only nodes with children are stepped
    (a leaf's children are never ranked), and index ops become views where the nodes are in grid order."""
    plan, state_row = [], [0]  # state_row[j]: the row of the previous step's states that node j of a level reads
    for par, rank, need in _level_plan(shape):
        front = sorted(set(par))  # the previous level's nodes with children, in order
        in_front = [front.index(p) for p in par]
        grid = (in_front, list(rank)) == ([f for f in range(len(front)) for _ in range(need)],
                                          list(range(need)) * len(front))
        order = None if grid else (torch.tensor(in_front, device=dev), torch.tensor(rank, device=dev))
        plan.append((_selector([state_row[j] for j in front], dev), _selector(front, dev), order, need))
        state_row = in_front
    return tuple(plan)


@lru_cache(maxsize=64)
def _shared_plan(shape: TreeShape, dev: torch.device) -> tuple[int, torch.Tensor]:
    """A fixed shape's nodes as indices into the (depth, n) grid of every slot's n best candidates, for heads
    whose candidates do not depend on the path (each node's token is its depth's candidate of its rank)."""
    need = max(p[-1] for p in shape.paths) + 1
    return need, torch.tensor([(len(p) - 1) * need + p[-1] for p in shape.paths], device=dev)


def build_tree(model, h: torch.Tensor, first: torch.Tensor, shape: TreeShape, enc=None) -> Tree:
    """The candidate tree at one position: root = p_1's argmax ``first`` (B, 1), decoder state ``h`` (B, d),
    encoder state ``enc`` (heads that attend to the input read it). A budgeted shape also returns each
    path's log-probability (``Tree.logp``); a fixed one needs none."""
    heads = model.heads
    source = None if enc is None else model.head_source(enc)
    b, dev = h.shape[0], h.device
    fixed = _fixed_structure(shape, b, dev) if shape.paths else None
    if fixed is not None and isinstance(heads, RecurrentHeads) and heads.n_learned >= shape.depth and \
            torch.is_inference_mode_enabled():  # the recurrent chain's fast path, a level at a time
        plan = _recurrent_plan(shape, dev)
        return _fixed_tree(torch.cat([first, fastpath.recurrent_tree(heads, h, first, plan, source)], dim=1), fixed)
    if fixed is not None and not heads.path_dependent:  # shared candidates: one top-n over every slot at once
        need, pick = _shared_plan(shape, dev)
        scores = heads.proposal_logits(heads.states(h, shape.depth + 1, start=1))  # (B, depth, P)
        top_i = scores.topk(need, dim=-1).indices.flatten(1)[:, pick]
        ids = heads.proposal_ids
        return _fixed_tree(torch.cat([first, top_i if ids is None else ids[top_i]], dim=1), fixed)
    logp = fixed is None
    slot_scores = None
    if not heads.path_dependent:  # a budgeted tree (fixed shapes of these heads took the shared path above)
        states = heads.states(h, shape.depth + 1, start=1)  # (B, depth, d): every slot at once
        slot_scores = torch.log_softmax(heads.proposal_logits(states).float(), dim=-1)
    toks = [first]
    if fixed is None:  # a budgeted tree's parents and path scores are chosen as it grows
        parents, cum = [torch.zeros(b, 1, dtype=torch.long, device=dev)], [h.new_zeros(b, 1).float()]
    state, count = h[:, None], 1
    for d in range(1, shape.depth + 1):
        fr_tok = toks[-1]
        if fixed is not None:
            par, rank, need = fixed[4][d - 1]
            _, tk, child_state = _candidates(heads, state, fr_tok, d, slot_scores, need, logp, source)
            new_tok = tk[:, par, rank]
        else:
            lp, tk, child_state = _candidates(heads, state, fr_tok, d, slot_scores, shape.beam, logp, source)
            w = lp.shape[-1]
            flat = (cum[-1][:, :, None] + lp).flatten(1)  # (B, F * w)
            new_lp, sel = flat.topk(min(shape.beam, flat.shape[1]), dim=-1)  # sorted: best path first
            if new_lp.shape[1] < shape.beam:
                raise ValueError(f"tree beam {shape.beam} exceeds the {flat.shape[1]} candidates at depth {d}; "
                                 "lower it or lift decode.proposal_vocab.")
            par, new_tok = sel // w, tk.flatten(1).gather(1, sel)
            parents.append(par + (count - fr_tok.shape[1]))  # frontier index -> node index
            cum.append(new_lp)
        if child_state is not None:
            par_b = par[None].expand(b, -1) if fixed is not None else par
            state = child_state.gather(1, par_b[:, :, None].expand(-1, -1, child_state.shape[-1]))
        toks.append(new_tok)
        count += new_tok.shape[1]
    tokens = torch.cat(toks, 1)
    if fixed is not None:
        return _fixed_tree(tokens, fixed)
    parent = torch.cat(parents, 1)
    depth, anc = _structure(parent, [t.shape[1] for t in toks])
    return Tree(tokens, parent, depth, anc, torch.cat(cum, 1))


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


@torch.inference_mode()
def tree_decode(
    model,
    src: torch.Tensor,
    shape: TreeShape | str,
    k: int | None = None,
    criterion: Criterion | None = None,
    max_len: int | None = None,
) -> DecodeResult:
    """Blockwise decoding with tree verification at any batch size; exact criterion == greedy output.

    ``shape`` is a ``TreeShape`` or its config string (``"3x2x1"``, ``"beam4"``); its depth must stay below
    k (the heads guess slots 1..k-1). Rows' ``position_*`` count depths as the chain counts slots.
    """
    k = model.k if k is None else int(k)
    if not 2 <= k <= model.k:
        raise ValueError(f"tree decoding needs k between 2 and the model's trained k={model.k} (got {k}); a tree "
                         "of k = 1 is greedy.")
    shape = TreeShape.parse(shape, k) if isinstance(shape, str) else shape
    if shape.depth > k - 1:
        raise ValueError(f"a tree {shape.depth} deep needs k >= {shape.depth + 1} (got k={k}).")
    criterion = criterion or Exact()
    if not isinstance(criterion, Criterion):
        raise TypeError(f"criterion must be an acceptance criterion instance, e.g. criteria.Exact() "
                        f"(got {criterion!r}).")
    if criterion.min_block_size != 1:
        raise ValueError("tree decoding has no minimum block size (a forced block is no path of the tree); use "
                         "min_block_size=1 or the chain decoder.")
    max_len = checked_max_len(model, src, max_len)
    b, dev = src.shape[0], src.device
    enc = model.encode(src)
    cache = model.new_cache(b, max_len + shape.n_nodes + 1)
    rows = RowTracker(b, model.eos_id, max_len)
    slots = shape.depth
    if max_len <= 0:
        return rows.result(0, position_reached=[0] * slots, position_accepted=[0] * slots)
    h_last = model.decode(torch.full((b, 1), model.bos_id, dtype=torch.long, device=dev), enc, cache)[:, 0]
    first = top1(model.heads.base_logits(h_last))[:, None]
    invocations = 1
    reached, accepted = [0] * slots, [0] * slots
    while rows.active:
        r = verify_tree(model, build_tree(model, h_last, first, shape, enc), enc, cache, criterion)
        invocations += 1
        finished = []
        for s, block in enumerate(r.blocks):
            if rows.accept(s, block):
                finished.append(s)
            # Depths accepted below the root count as the chain's slots.
            count_positions(reached, accepted, len(block) - 1, len(block), rows.blocks[rows.active[s]][-1])
        live = drop_finished(rows, finished, (cache,), enc, r.h_last, r.first)
        if live is None:
            break
        enc, h_last, first = live
    return rows.result(invocations, position_reached=reached, position_accepted=accepted)
