"""Length-bucketed token batches from stored lengths, collated by a ``torch.utils.data.DataLoader``.

``make_batches`` decides which examples go together, from the lengths alone (a pure function of the
lengths, the seed, the rank and the world size); ``BatchDataset`` pads one such batch into tensors; and
``batch_iterator`` runs the collation in DataLoader workers (pinned memory on CUDA) so the training step
does not wait for Python, starting at any batch of the epoch (exact resume without collating the skipped
batches).
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def make_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    chunk_size: int = 8192,
) -> list[np.ndarray]:
    """Index arrays of the batches of an epoch for this rank.

    Examples are (optionally) shuffled, cut into chunks of ``chunk_size``, and sorted by length within each
    chunk, so a batch holds similar lengths (little padding) while chunks keep batches from being identical
    every epoch. A batch grows while ``batch_size * max(longest src, longest tgt)`` stays <= ``max_tokens``
    (an example longer than that alone forms a batch). With ``shuffle`` the batch order is shuffled too.
    For DDP, the batch list is cut to a multiple of ``world_size`` and rank r takes every world_size-th
    batch from r: disjoint equal shares, so all ranks run the same number of steps and no all-reduce hangs.
    Pass ``seed + epoch`` to get a new order each epoch.

    The random draws are Python's ``random.Random(seed)`` shuffles, as in the list-based version this
    replaced, so the same seed gives the same batches (``tests/test_data_batches.py`` checks it); indices
    live in one int32 array (batches are views of it), so memory stays a few bytes per example.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    src_lengths, tgt_lengths = np.asarray(src_lengths, dtype=np.int32), np.asarray(tgt_lengths, dtype=np.int32)
    n = len(src_lengths)
    rng = random.Random(seed)
    order = array("i", range(n))
    if shuffle:
        rng.shuffle(order)  # the same draws as shuffling a list of range(n)
    order_np = np.frombuffer(order, dtype=np.int32) if n else np.zeros(0, np.int32)
    lengths = np.maximum(src_lengths, tgt_lengths)
    batches: list[np.ndarray] = []
    for start in range(0, n, chunk_size):
        chunk = order_np[start : start + chunk_size]
        # Stable sort by (length, source length): equal keys keep their shuffled order.
        chunk = chunk[np.lexsort((src_lengths[chunk], lengths[chunk]))]
        chunk_lengths = lengths[chunk].tolist()
        begin, size = 0, 0
        for j, length in enumerate(chunk_lengths):
            # Sorted ascending, so the newest example is the widest of its batch.
            if size and (size + 1) * length > max_tokens:
                batches.append(chunk[begin:j])
                begin, size = j, 0
            size += 1
        if size:
            batches.append(chunk[begin:])
    if shuffle:
        rng.shuffle(batches)
    usable = len(batches) // world_size * world_size
    return batches[:usable][rank::world_size]


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, lead: int | None = None, min_width: int = 0) -> torch.Tensor:
    """Right-padded (B, width) LongTensor of token rows (arrays or lists); ``lead`` (BOS) shifts every row right
    by one, dropping its last token (the teacher-forcing input). Decoders ask for ``min_width=1``: a batch of
    empty sources is then one column of padding, which their input check refuses by name."""
    width = max(min_width, max((len(r) for r in rows), default=0))
    out = np.full((len(rows), width), pad_id, dtype=np.int64)
    for i, r in enumerate(rows):
        if lead is None:
            out[i, : len(r)] = r
        elif len(r):
            out[i, 0] = lead
            out[i, 1 : len(r)] = r[:-1]
    return torch.from_numpy(out)


class BatchDataset(Dataset):
    """Batch ``j`` of a fixed batch list, collated: ``(src (B,S), tgt_in (B,T), tgt_out (B,T))`` LongTensors.

    ``tgt_out`` is the target as stored (ending in EOS for text); ``tgt_in`` is it shifted right behind BOS,
    so position t of ``tgt_in`` predicts position t of ``tgt_out``; all right-padded with ``pad_id``.
    """

    def __init__(self, pairs: Any, batches: list[np.ndarray], pad_id: int, bos_id: int) -> None:
        self.pairs, self.batches, self.pad_id, self.bos_id = pairs, batches, pad_id, bos_id

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, j: int) -> Batch:
        idx = self.batches[j].tolist()
        srcs = [self.pairs.src(i) for i in idx]
        tgts = [self.pairs.tgt(i) for i in idx]
        return (
            pad_rows(srcs, self.pad_id),
            pad_rows(tgts, self.pad_id, lead=self.bos_id),
            pad_rows(tgts, self.pad_id),
        )


def batch_iterator(pairs: Any, batches: list[np.ndarray], pad_id: int, bos_id: int, start: int = 0,
                   workers: int = 0, pin_memory: bool = False) -> Iterator[Batch]:
    """The collated batches ``batches[start:]`` in order: in this process (``workers`` 0) or in a DataLoader
    with worker processes that collate ahead of the training step."""
    dataset = BatchDataset(pairs, batches[start:], pad_id, bos_id)
    if workers <= 0:
        return (dataset[j] for j in range(len(dataset)))
    loader = DataLoader(dataset, batch_size=None, shuffle=False, num_workers=workers, pin_memory=pin_memory,
                        prefetch_factor=4, persistent_workers=False)
    return iter(loader)


__all__ = ["BatchDataset", "batch_iterator", "make_batches", "pad_rows"]
