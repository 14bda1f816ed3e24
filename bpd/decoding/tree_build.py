"""Candidate trees for tree verification (``bpd.decoding.methods.tree``): the heads' top candidates per slot, arranged
as a ``TreeShape`` (``bpd.decoding.tree_shape``) at one position.

Heads whose slots read the previous slot's token (recurrent) get one head step per node: a node's children
are ranked under its own token. Other heads rank every slot once; their trees share candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

from bpd.decoding.tree_shape import TreeShape
from bpd.models import fastpath
from bpd.models.heads import RecurrentHeads


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


#: ``Readers.source`` when the caller hands none: read from ``enc``.
NO_SOURCE = object()


@dataclass(frozen=True)
class Readers:
    """What a tree's slots read, when the caller hands it instead of the model making it: what the heads read of
    the input (``source``), the recurrent slot step (``step``, ``fastpath.TableStep``'s interface) and the proposal
    projection (``logits``). The static path (``bpd.decoding.static_tree``) hands its frozen tables' versions:
    tensors made outside the traced round, no cache keyed by addresses."""

    source: object = NO_SOURCE
    step: Callable | None = None
    logits: Callable | None = None


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
                n: int, logp: bool, readers: Readers) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The ``n`` best children of every frontier node at depth ``d - 1``: (scores (B, F, n), token ids
    (B, F, n), the children's head state (B, F, d_model) or None). Scores are log-probabilities with ``logp``
    (a budgeted tree ranks paths across parents), else raw logits (a fixed shape only ranks a node's own
    children, and logits rank them as their log-probabilities do, without a softmax). ``readers``: the input the
    heads read (resolved) and the slot step to run (None: the heads' own)."""
    if slot_scores is None:  # path-dependent heads: slot d reads its parent's token
        step = readers.step
        child_state, scores = heads.step_logits(state, tok, d, readers.source) if step is None else step(state, tok, d)
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
    # (from the sizes on the host: a repeat count read from a tensor would be a shape the static path cannot trace)
    depth = torch.tensor([d for d, size in enumerate(sizes) for _ in range(size)], device=dev)
    # Each node's ancestors by walking up the parents (the root is its own parent), compared with every node: no
    # in-place updates of slices, which inductor's CPU code generation mis-typed in a compiled round (torch 2.13).
    up = [torch.arange(n, device=dev).expand(b, n)]
    for _ in sizes[1:]:
        up.append(parent.gather(1, up[-1]))
    anc = (torch.stack(up, dim=-1)[..., None] == torch.arange(n, device=dev)).any(dim=-2)  # (B, N, N)
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
    # (whole tensors, not expanded views: the static path's compiled rounds hold them as constants, and inductor's
    # constant folding loses a constant that is a view)
    parent_t = torch.tensor(parent_df, device=dev)[None].repeat(b, 1)
    depth = torch.tensor([len(nodes[i]) for i in perm], device=dev)[None].repeat(b, 1)
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


def build_tree(model, h: torch.Tensor, first: torch.Tensor, shape: TreeShape, enc=None,
               at: torch.Tensor | None = None, *, given: Readers = Readers()) -> Tree:
    """The candidate tree at one position: root = p_1's argmax ``first`` (B, 1), decoder state ``h`` (B, d),
    encoder state ``enc`` (heads that read the input read it), ``at``: each row's position of ``h`` (heads that read
    ahead need it). A budgeted shape also returns each path's log-probability (``Tree.logp``); a fixed one needs
    none. ``given``: what the caller hands the slots instead (``Readers``: the static path's frozen tables)."""
    heads = model.heads
    source = given.source
    if source is NO_SOURCE:
        source = None if enc is None else model.head_source(enc, at)
    step = given.step
    readers = Readers(source, step)
    proposal_logits = heads.proposal_logits if given.logits is None else given.logits
    b, dev = h.shape[0], h.device
    fixed = _fixed_structure(shape, b, dev) if shape.paths else None
    if fixed is not None and isinstance(heads, RecurrentHeads) and heads.n_learned >= shape.depth and \
            (step is not None or torch.is_inference_mode_enabled()):  # the recurrent chain's fast path, by level
        plan = _recurrent_plan(shape, dev)
        below = fastpath.recurrent_tree(heads, h, first, plan, source, step)
        return _fixed_tree(torch.cat([first, below], dim=1), fixed)
    if fixed is not None and not heads.path_dependent:  # shared candidates: one top-n over every slot at once
        need, pick = _shared_plan(shape, dev)
        scores = proposal_logits(heads.states(h, shape.depth + 1, start=1, source=source))  # (B, depth, P)
        top_i = scores.topk(need, dim=-1).indices.flatten(1)[:, pick]
        ids = heads.proposal_ids
        return _fixed_tree(torch.cat([first, top_i if ids is None else ids[top_i]], dim=1), fixed)
    logp = fixed is None
    slot_scores = None
    if not heads.path_dependent:  # a budgeted tree (fixed shapes of these heads took the shared path above)
        states = heads.states(h, shape.depth + 1, start=1, source=source)  # (B, depth, d): every slot at once
        slot_scores = torch.log_softmax(proposal_logits(states).float(), dim=-1)
    toks = [first]
    if fixed is None:  # a budgeted tree's parents and path scores are chosen as it grows
        parents, cum = [torch.zeros(b, 1, dtype=torch.long, device=dev)], [h.new_zeros(b, 1).float()]
    state, count = h[:, None], 1
    for d in range(1, shape.depth + 1):
        fr_tok = toks[-1]
        if fixed is not None:
            par, rank, need = fixed[4][d - 1]
            _, tk, child_state = _candidates(heads, state, fr_tok, d, slot_scores, need, logp, readers)
            new_tok = tk[:, par, rank]
        else:
            lp, tk, child_state = _candidates(heads, state, fr_tok, d, slot_scores, shape.beam, logp, readers)
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

