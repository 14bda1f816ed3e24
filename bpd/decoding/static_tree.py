"""Tree verification on the static path: a round as one fixed-shape function (``bpd.decoding.engine`` runs and
compiles it), the eager round's (``bpd.decoding.methods.tree``) steps on the preallocated cache.

* **propose**: the candidate tree at each row's last accepted position (``tree_build.build_tree``, on the frozen
  decoding tables of ``static_steps.decoding_tables``): a fixed shape's N nodes, or a budget's;
* **verify**: the N nodes through the decoder in one call against the static cache, under the tree attention mask
  (``decode_static(tree=...)``), written at slots length .. length + N - 1;
* **accept**: a node passes when the criterion accepts it under p_1 at its parent, and a path when all its nodes
  pass; each row keeps its deepest such path (the first, most probable, of that depth: the eager round's choice);
* **update**: the kept path's cache entries move to follow the prefix, the lengths advance by the path's length,
  and the decoder state and p_1's argmax at its last node are what the next round proposes from.

The tree's shape is fixed per round (a budgeted tree's parents differ by row, its node count does not), so a
round has the same shapes at every call. The host reads each row's path tokens and length once per round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from bpd.decoding.common import count_positions
from bpd.decoding.criteria import Criterion, Exact
from bpd.decoding.result import DecodeResult
from bpd.decoding.static_steps import DecodingTables, decoding_tables
from bpd.decoding.tree_build import Readers, Tree, _fixed_structure, _recurrent_plan, _shared_plan, build_tree
from bpd.decoding.tree_shape import TreeShape
from bpd.models import fastpath
from bpd.models.fastpath import top1
from bpd.models.heads.source import Source
from bpd.models.static_cache import decode_static
from bpd.models.transformer import EncoderState


class TablesStep(fastpath.SlotStep):
    """A recurrent slot's step on the static path's frozen tables: ``fastpath.TableStep``'s interface (what
    ``build_tree`` runs), with ``DecodingTables``' copies of the weights (own storage; int8 ones multiplied
    weight-only) instead of caches keyed by the parameters' addresses, which a traced function cannot read."""

    def __init__(self, tables: DecodingTables, source: Source | None) -> None:
        self.tables, self.source = tables, source

    def flat(self, s: torch.Tensor, tok: torch.Tensor, i: int, batch: int, from_proposal: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The step for flat states ``s`` (n, d) of ``batch`` rows reading ``tok`` (n,): the new states and their
        logits over the proposal vocabulary."""
        t = self.tables
        slot = t.slot(i - 1)
        lookup = slot[1 if from_proposal else 0][tok]
        if t.int8:
            name = f"s{i - 1}_"
            s = fastpath.slot_layers(lambda x, j: t.times(x, f"{name}{j}"), lookup, s, hasattr(t, f"{name}4"),
                                     self.source, batch)
        else:
            s = torch.addmm(s, fastpath.slot_hidden(lookup, s, slot, self.source, batch), slot[3])
        return s, t.logits(s)

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        return idx if self.tables.ids is None else self.tables.ids[idx]


def propose(model, shape: TreeShape, h: torch.Tensor, first: torch.Tensor, source: Source | None,
            tables: DecodingTables | None) -> Tree:
    """The candidate tree at the last accepted position ``h`` (B, d), rooted at p_1's argmax ``first`` (B, 1)."""
    step = TablesStep(tables, source) if tables is not None and tables.n_slots else None
    return build_tree(model, h, first, shape, given=Readers(source, step, None if tables is None else tables.logits))


def verify(model, tree: Tree, enc: EncoderState, k_cache: list[torch.Tensor], v_cache: list[torch.Tensor],
           lengths: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder call over every row's tree: decoder states (B, N, d), p_1's logits (B, N, V) and argmax (B, N)."""
    h = decode_static(model, tree.tokens, enc, k_cache, v_cache, lengths, window, tree=(tree.depth, tree.ancestors))
    logits = model.heads.base_logits(h)
    return h, logits, top1(logits)


def accept(criterion: Criterion, tree: Tree, depth: int, logits: torch.Tensor, best: torch.Tensor,
           alive: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's kept path in a tree ``depth`` deep: its last node (B,), its length k_hat (B,; 0 for finished
    rows) and its nodes by depth (B, depth + 1), slot j's own index past the path (so that moving them keeps those
    entries where they are)."""
    b, n = tree.tokens.shape
    dev = tree.tokens.device
    if isinstance(criterion, Exact):
        flags = best.gather(1, tree.parent) == tree.tokens
    else:
        parent_logits = logits.gather(1, tree.parent[:, :, None].expand(-1, -1, logits.shape[-1]))
        flags = criterion.accept(parent_logits, tree.tokens, best.gather(1, tree.parent))
    idx = torch.arange(n, device=dev)
    flags = flags | (idx == 0)  # the root is p_1's own argmax
    ok = (flags[:, None, :] | ~tree.ancestors).all(dim=-1)  # (B, N): every node on the path to it passes
    # the deepest node that passes, the first (most probable) among those of its depth
    last = torch.where(ok, tree.depth * n + (n - 1 - idx), -1).argmax(dim=1)
    khat = (tree.depth.gather(1, last[:, None])[:, 0] + 1) * alive.long()
    levels = torch.arange(depth + 1, device=dev)
    on_path = tree.ancestors.gather(1, last[:, None, None].expand(-1, 1, n))[:, 0]  # (B, N)
    at = on_path[:, None, :] & (tree.depth[:, None, :] == levels[None, :, None])  # (B, depth + 1, N)
    path = torch.where(at.any(dim=-1) & alive[:, None], at.long().argmax(dim=-1), levels[None])
    return last, khat, path


def update(k_cache: list[torch.Tensor], v_cache: list[torch.Tensor], lengths: torch.Tensor, path: torch.Tensor,
           khat: torch.Tensor, window: int) -> None:
    """Move each row's kept path's entries (tree slots ``path``) to follow its prefix, and advance its length."""
    b, m = path.shape
    at = torch.arange(m, device=path.device)
    rows = torch.arange(b, device=path.device)[:, None].expand(b, m)
    dst = (lengths[:, None] + at).clamp(max=window - 1)
    src = (lengths[:, None] + path).clamp(max=window - 1)
    for t in (*k_cache, *v_cache):
        t[rows, :, dst] = t[rows, :, src]  # the gather reads every source before the scatter writes
    lengths.add_(khat)


def fixed_structure(shape: TreeShape, batch: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """A fixed shape's parent (B, N), depth (B, N) and ancestors (B, N, N), a budgeted tree's depth (B, N) alone
    (its parents are chosen as it grows), handed to each round as inputs: as constants of a compiled round,
    inductor's constant folding (under weight freezing) folds the ops on them into new constants and loses one
    ("references nonexistent attribute", torch 2.13)."""
    if not shape.paths:  # a budget: its depths alone are fixed
        sizes = shape.level_sizes
        return (torch.tensor([d for d, size in enumerate(sizes) for _ in range(size)], device=device)[None]
                .repeat(batch, 1),)
    parent, depth, anc, *_ = _fixed_structure(shape, batch, device)
    return parent, depth, anc


def tree_start(model) -> Callable:
    """The first call: BOS through the decoder; the decoder state (B, d) and p_1's argmax (B, 1) there."""

    def start(bos, alive, lengths, k_cache, v_cache, encoded, source, span):
        enc = EncoderState(*encoded)
        h = decode_static(model, bos, enc, k_cache, v_cache, lengths, span.shape[0])[:, 0]
        lengths.add_(alive.long())
        return h, top1(model.heads.base_logits(h))[:, None]

    return start


def tree_round(model, shape: TreeShape, criterion: Criterion, batch: int) -> Callable:
    """One round from the decoder state ``h_last`` (B, d) and p_1's argmax ``first`` (B, 1) at the last accepted
    position: propose, verify, accept, update. Returns the path lengths (B,), the path tokens (B, depth + 1), and
    the state and argmax at the path's end."""
    tables = decoding_tables(model)
    dev = model.tgt_embed.weight.device
    if shape.paths:  # a fixed shape's structure, made here, never inside a trace (``build_tree`` reads it cached)
        _fixed_structure(shape, batch, dev)
        _recurrent_plan(shape, dev)
        _shared_plan(shape, dev)

    def round_(carry, alive, lengths, k_cache, v_cache, encoded, source, span):
        h_last, first, structure = carry  # (what the last round ended at, and the tree's fixed structure)
        enc = EncoderState(*encoded)
        window = span.shape[0]
        src = Source.joined(None if source is None else Source(*source), model.head_ahead(enc, lengths - 1))
        tree = propose(model, shape, h_last, first, src, tables)
        # a fixed shape's (parent, depth, ancestors), a budget's depths: inputs, not constants (``fixed_structure``)
        tree = Tree(tree.tokens, *structure) if len(structure) == 3 else replace(tree, depth=structure[0])
        h, logits, best = verify(model, tree, enc, k_cache, v_cache, lengths, window)
        last, khat, path = accept(criterion, tree, shape.depth, logits, best, alive)
        update(k_cache, v_cache, lengths, path, khat, window)
        h_next = h.gather(1, last[:, None, None].expand(-1, 1, h.shape[-1]))[:, 0]
        return khat, tree.tokens.gather(1, path), h_next, best.gather(1, last[:, None])

    return round_


def tree_decode_static(engine, src: torch.Tensor, shape: TreeShape, criterion: Criterion,
                       max_len: int | None = None) -> DecodeResult:
    """Tree verification on the static path (``engine``: a ``StaticEngine``): the start call, then one fixed-shape
    round per iteration; the host keeps each row's path as the eager loop keeps its block."""
    from bpd.decoding.engine import _finish

    n = shape.n_nodes
    b = engine.begin(src, max_len, room=n + 1)
    reached, accepted = [0] * shape.depth, [0] * shape.depth
    if b.max_len <= 0:
        return b.rows.result(0, position_reached=reached, position_accepted=accepted)
    model, rows = engine.model, src.shape[0]
    structure = fixed_structure(shape, rows, b.alive.device)
    h, first = engine.call(("tree_start",), lambda: tree_start(model), engine.bos(b), *engine.batch_args(b, 1))
    b.reach += 1
    calls = 1
    make = lambda: tree_round(model, shape, criterion, rows)  # noqa: E731
    while b.rows.active:
        khat, block, h, first = engine.call(("tree", shape, criterion), make, (h, first, structure),
                                            *engine.batch_args(b, n))
        calls += 1
        host = torch.cat([block, khat[:, None]], dim=1).tolist()
        b.reach += max(r[-1] for r in host)  # the longest row moved by the longest path
        finished = []
        for slot, row in enumerate(b.rows.active):
            m = host[row][-1]
            if b.rows.accept(slot, host[row][:m]):
                finished.append(row)
            count_positions(reached, accepted, m - 1, m, b.rows.blocks[row][-1])
        _finish(b, finished)
    return b.rows.result(calls, position_reached=reached, position_accepted=accepted)
