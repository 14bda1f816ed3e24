"""The static decode path's key/value cache and the decoder call over it (``decode_static``).

The eager cache (``bpd.models.kv_cache``) grows, copies and drops rows as decoding goes, so every call has new
shapes. Here nothing changes shape while a batch is decoded: each layer's keys and values are allocated once
at their full capacity, each row's length lives on the device, every call attends over the first ``window``
entries (the whole capacity on a GPU) under a mask built from those lengths, and rows that finished stay in the
batch (their lengths stop moving). A decoder call is then one fixed-shape function of its inputs per (batch,
tokens, source length, capacity), with the window symbolic on a CPU, which ``torch.compile`` compiles once and a
GPU can capture as a CUDA graph (gpt-fast's design).
"""

from __future__ import annotations

import torch


class StaticKVCache:
    """Per-layer self-attention keys/values (B, H, capacity, dh), allocated once, and each row's length (B,).

    Nothing here touches the host: a call writes its n new entries at each row's own length, and the caller
    moves the lengths (``lengths += accepted``) in the same compiled function, so rolling a row back after a
    verify pass is not moving its length past the entries it rejected (they are masked, later overwritten)."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, capacity: int, dh: int, dtype, device) -> None:
        shape = (batch, n_heads, capacity, dh)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)
        self.capacity = capacity

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the compiled functions write in place (a GPU's CUDA graphs keep their addresses)."""
        return [*self.k, *self.v, self.lengths]

    def reset(self) -> None:
        """Empty every row for the next batch (the entries stay: masked until overwritten)."""
        self.lengths.zero_()


def decode_static(model, tgt: torch.Tensor, enc, k_cache: list[torch.Tensor], v_cache: list[torch.Tensor],
                  lengths: torch.Tensor, window: int, tree: tuple[torch.Tensor, torch.Tensor] | None = None
                  ) -> torch.Tensor:
    """Decoder states (B, n, d) of the n tokens ``tgt`` appended at each row's ``lengths``, attending to the row's
    cached prefix and causally to each other: ``Transformer.decode`` with a cache, in fixed shapes. Their keys and
    values are written into ``k_cache`` / ``v_cache``; ``lengths`` is not moved (the caller knows by how much).
    ``window``: attend over the first ``window`` entries only (every live row's ``lengths + n`` within it).
    ``tree = (depth, ancestors)`` ((B, n), (B, n, n)): the n tokens are a tree of candidates, as in
    ``Transformer.decode``: token i sits at position length + depth[b, i] and attends to the prefix and to its
    ancestors and itself; its entry is still written at slot length + i (the caller moves the kept path)."""
    b, n = tgt.shape
    at = lengths[:, None] + torch.arange(n, device=tgt.device)  # (B, n) where the entries are written
    # Only a row that has finished (its tokens are ignored) reaches past the window: clamped, so that its
    # writes and position lookups stay inside their buffers, which a compiled kernel does not check.
    slots = at.clamp(max=window - 1)
    rows = torch.arange(b, device=tgt.device)[:, None].expand(b, n)
    keys = torch.arange(window, device=tgt.device)
    if tree is None:
        pos = slots
        self_mask = (keys[None, None, :] <= pos[:, :, None])[:, None]  # (B, 1, n, window)
    else:
        depth, anc = tree
        pos = (lengths[:, None] + depth).clamp(max=window - 1)
        rel = keys[None, :] - lengths[:, None]  # (B, window): each key's tree slot, where it is one
        in_tree = (rel >= 0) & (rel < n)
        tree_keys = anc.gather(2, rel.clamp(0, n - 1)[:, None, :].expand(b, n, window))  # (B, n, window)
        self_mask = ((rel < 0)[:, None, :] | (tree_keys & in_tree[:, None, :]))[:, None]
    x = model.embed_tgt(tgt, pos, window, enc)
    for li, layer in enumerate(model.dec_layers):
        def store(k: torch.Tensor, v: torch.Tensor, li: int = li) -> tuple[torch.Tensor, torch.Tensor]:
            # Written into the whole cache (a graph input mutated in place), read through the window.
            k_cache[li][rows, :, slots] = k.transpose(1, 2).to(k_cache[li].dtype)
            v_cache[li][rows, :, slots] = v.transpose(1, 2).to(v_cache[li].dtype)
            return k_cache[li][:, :, :window], v_cache[li][:, :, :window]

        x = layer(x, enc.cross_kv[li], enc.src_mask, self_mask, store)
    return model.dec_ln(x)
