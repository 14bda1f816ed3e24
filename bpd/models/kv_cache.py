"""The decoder's self-attention key/value cache: a length per batch row, rolled back per row after a verify
call, reordered or cut to the live rows, grown as it fills."""

from __future__ import annotations

import torch


class KVCache:
    """Per-layer self-attention keys/values with a length per batch row, up to ``capacity`` entries a row.

    Rows write new entries at their own offsets, so after a blockwise verify step each row rolls back to
    its accepted length by just lowering its length (stale entries are masked, later overwritten). The
    lengths are kept on the device (for positions and masks) and on the host, so the decoder sizes its
    mask without a device synchronisation.

    Each layer holds ``first_entries`` entries at first and doubles (up to ``capacity``) when a call writes
    past them, so that copying the cache, which ``select`` does (beam search reorders it at every step),
    costs the entries in use rather than the whole capacity.
    """

    first_entries = 16

    def __init__(self, n_layers: int, batch: int, n_heads: int, capacity: int, dh: int, dtype, device) -> None:
        shape = (batch, n_heads, min(capacity, self.first_entries), dh)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)
        self.host_lengths = [0] * batch
        self.capacity = capacity

    @property
    def host_max(self) -> int:
        return max(self.host_lengths, default=0)

    def advance(self, n: int) -> None:
        """Every row appended ``n`` entries (a decoder call)."""
        self.lengths = self.lengths + n
        self.host_lengths = [length + n for length in self.host_lengths]

    def rollback(self, appended: int, kept: list[int]) -> None:
        """The last call appended ``appended`` entries per row; row b keeps ``kept[b]`` of them (its accepted
        block) and forgets the rest."""
        if len(kept) == 1:  # batch 1: a scalar op, no index tensor to build
            self.lengths = self.lengths - (appended - kept[0])
        else:
            self.lengths = self.lengths - appended + torch.tensor(kept, device=self.lengths.device)
        self.host_lengths = [length - appended + c for length, c in zip(self.host_lengths, kept)]

    def keep_path(self, appended: int, paths: list[list[int]]) -> None:
        """After a tree call that appended ``appended`` entries per row: row b keeps the entries at tree slots
        ``paths[b]`` (an accepted root-to-node path, slots increasing), moved to follow its prefix, and forgets
        the rest."""
        kept = [len(p) for p in paths]
        if len(paths) == 1:  # batch 1: runs of consecutive slots move as slices (views), no index tensors
            start = self.host_lengths[0] - appended
            path, i = paths[0], 0
            while i < len(path):
                j = i + 1
                while j < len(path) and path[j] == path[j - 1] + 1:
                    j += 1
                if path[i] != i:  # (a run already in place stays)
                    overlap = path[i] - i < j - i  # the run moves by less than its length
                    for t in (*self.k, *self.v):
                        run = t[:, :, start + path[i] : start + path[i] + j - i]
                        t[:, :, start + i : start + j] = run.clone() if overlap else run
                i = j
        else:
            longest = max(kept)
            dev = self.lengths.device
            path = torch.tensor([p + list(range(len(p), longest)) for p in paths], device=dev)
            begin = self.lengths - appended  # (B,) where the tree's slots begin
            rows = torch.arange(path.shape[0], device=dev)[:, None].expand_as(path)
            src, dst = begin[:, None] + path, begin[:, None] + torch.arange(longest, device=dev)
            for t in (*self.k, *self.v):
                t[rows, :, dst] = t[rows, :, src]  # the gather reads all sources before the scatter writes
        self.rollback(appended, kept)

    def write(self, layer: int, at: tuple[torch.Tensor, torch.Tensor], upto: int, k: torch.Tensor, v: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store a decoder call's new keys and values (B, H, n, dh) of layer ``layer`` at each row's own slots
        (``at``: row and slot indices, (B, n) each) and return the layer's first ``upto`` entries."""
        self._hold(layer, upto)
        (rows, slots), ck, cv = at, self.k[layer], self.v[layer]
        ck[rows, :, slots] = k.transpose(1, 2).to(ck.dtype)  # (B,H,n,dh) -> cache[b, :, slot[b, j]]
        cv[rows, :, slots] = v.transpose(1, 2).to(cv.dtype)
        return ck[:, :, :upto], cv[:, :, :upto]

    def _hold(self, layer: int, upto: int) -> None:
        """Grow layer ``layer``'s entries to hold at least ``upto`` (zeros: masked entries must be finite)."""
        have = self.k[layer].shape[2]
        if upto <= have:
            return
        n = min(self.capacity, max(upto, 2 * have))
        for store in (self.k, self.v):
            old = store[layer]
            store[layer] = old.new_zeros(old.shape[0], old.shape[1], n, old.shape[3])
            store[layer][:, :, :have] = old

    def mark(self) -> tuple[torch.Tensor, list[int]]:
        """The current lengths, to ``rewind`` to (the benchmark times many steps from one cache state)."""
        return self.lengths.clone(), list(self.host_lengths)

    def rewind(self, mark: tuple[torch.Tensor, list[int]]) -> None:
        self.lengths, self.host_lengths = mark[0].clone(), list(mark[1])

    def select(self, rows: list[int]) -> None:
        """Keep only the given batch rows, in this order (finished rows stop costing; beams are reordered)."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.lengths.device)
        self.k = [t.index_select(0, idx) for t in self.k]
        self.v = [t.index_select(0, idx) for t in self.v]
        self.lengths = self.lengths.index_select(0, idx)
        self.host_lengths = [self.host_lengths[i] for i in rows]
