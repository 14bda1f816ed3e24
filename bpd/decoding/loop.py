"""The decode loop greedy and every proposal method share, and the setup every decoder shares.

``begin`` does what each decoder did first: check the source and the length limit, encode, make the KV cache
and the BOS column, start the per-row bookkeeping. ``decode_rounds`` runs a method's rounds (``Rounds``: a
``start`` call, then ``round`` until every row has finished), keeps each row's accepted block, counts
per-slot acceptance, and drops finished rows from everything a round carries (``RowState``), so that a method
writes only what its round does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import torch

from bpd.decoding.common import RowTracker, checked_max_len, count_positions
from bpd.decoding.criteria import Criterion, Exact
from bpd.decoding.result import DecodeResult
from bpd.models.kv_cache import KVCache


@dataclass
class Batch:
    """One batch being decoded: the live rows' encoder state and cache, their bookkeeping, and BOS (B, 1)."""

    src: torch.Tensor
    max_len: int
    enc: Any  # the model's EncoderState
    cache: KVCache | None
    rows: RowTracker
    bos: torch.Tensor


def begin(model, src: torch.Tensor, max_len: int | None, room: int | None, beams: int = 1) -> Batch:
    """Checked inputs, the encoder pass, a cache of ``max_len + room`` entries per row (None: no cache) and
    BOS; with ``beams`` > 1 every source row becomes that many adjacent decoder rows (beam search)."""
    max_len = checked_max_len(model, src, max_len)
    b, dev = src.shape[0], src.device
    enc = model.encode(src)
    if beams > 1:
        enc = enc.select(torch.arange(b, device=dev).repeat_interleave(beams))
    cache = None if room is None else model.new_cache(b * beams, max_len + room)
    bos = torch.full((b * beams, 1), model.bos_id, dtype=torch.long, device=dev)
    return Batch(src, max_len, enc, cache, RowTracker(b, model.eos_id, max_len), bos)


def checked_criterion(criterion: Criterion | None) -> Criterion:
    """``criterion``, exact acceptance by default; anything but a criterion instance is refused with the fix."""
    if criterion is None:
        return Exact()
    if not isinstance(criterion, Criterion):
        hint = f"criteria.{criterion.__name__}()" if isinstance(criterion, type) else \
            f"criteria.make_criterion({criterion!r})" if isinstance(criterion, str) else "criteria.Exact()"
        raise TypeError(f"criterion must be an acceptance criterion instance, e.g. {hint} (got {criterion!r}).")
    return criterion


def block_floor(criterion: Criterion, k: int, min_block_size: int = 1) -> int:
    """The minimum block size a round accepts: the larger of ``min_block_size`` and the criterion's own."""
    floor = max(int(min_block_size), criterion.min_block_size)
    if not 1 <= floor <= k:
        raise ValueError(f"min_block_size must be between 1 and k={k} (got {floor}): a round accepts at most k "
                         "tokens; lower the minimum block size or raise k.")
    return floor


State = TypeVar("State", bound="RowState")


@dataclass
class RowState:
    """What one round hands the next, per live row: batch-first tensors, encoder states, a second model's cache.
    A method's state subclasses this; ``select`` keeps the live rows of every field (None stays None)."""

    def select(self: State, keep: list[int], idx: torch.Tensor) -> State:
        return replace(self, **{f.name: _live(getattr(self, f.name), keep, idx) for f in fields(self)})


def _live(value, keep: list[int], idx: torch.Tensor):
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.index_select(0, idx)
    if isinstance(value, KVCache):  # selected in place: it is the same cache the method decodes with
        value.select(keep)
        return value
    return value.select(idx)  # an EncoderState


#: One round's outcome per live row: the tokens it accepted, and how many of proposal slots 1.. were accepted
#: before the first rejection (None for methods without proposals).
Accepted = tuple[list[list[int]], list[int] | None]


class Rounds(ABC):
    """One method's rounds, as ``decode_rounds`` drives them."""

    slots: int = 0  # proposal slots whose acceptance rows count (``DecodeResult.position_*``)
    room: int | None = 1  # cache entries per row beyond max_len that a round may append (None: no cache)
    start_calls: int = 0  # decoder calls ``start`` makes

    @abstractmethod
    def start(self, model, batch: Batch) -> RowState:
        """What the first round reads (e.g. the propose-only first call)."""

    @abstractmethod
    def round(self, model, batch: Batch, state: RowState) -> tuple[RowState, Accepted]:
        """One round over the live rows (one decoder call): the state the next round reads, and what it accepted."""


def decode_rounds(model, src: torch.Tensor, max_len: int | None, rounds: Rounds) -> DecodeResult:
    """Decode ``src`` with ``rounds`` until every row has emitted EOS or reached the length limit."""
    batch = begin(model, src, max_len, rounds.room)
    rows = batch.rows
    reached, accepted = [0] * rounds.slots, [0] * rounds.slots
    if batch.max_len <= 0:
        return rows.result(0, position_reached=reached, position_accepted=accepted)
    state = rounds.start(model, batch)
    invocations = rounds.start_calls
    while rows.active:
        state, (blocks, runs) = rounds.round(model, batch, state)
        invocations += 1
        finished = keep_blocks(rows, blocks, runs, reached, accepted)
        live = rows.drop(finished)
        if live is not None:  # finished rows stop costing: every later call carries the live rows only
            if not rows.active:
                break
            idx = torch.tensor(live, device=batch.src.device)
            batch.enc = batch.enc.select(idx)
            if batch.cache is not None:
                batch.cache.select(live)
            state = state.select(live, idx)
    return rows.result(invocations, position_reached=reached, position_accepted=accepted)


def keep_blocks(rows: RowTracker, blocks: list[list[int]], runs: list[int] | None, reached: list[int],
                accepted: list[int]) -> list[int]:
    """Append each live row's accepted block to its output and count the per-slot acceptance of the kept
    tokens; returns the batch slots that finished (EOS or the length limit)."""
    finished = []
    for s, block in enumerate(blocks):
        if rows.accept(s, block):
            finished.append(s)
        if reached:
            count_positions(reached, accepted, runs[s], len(block), rows.blocks[rows.active[s]][-1])
    return finished
