"""Scaled dot-product attention for the model and the heads that read the source, in one place.

On the compiled CPU decode path (``bpd.decoding.engine``) attention is written out as broadcast products, sums
and a softmax: at a translation step's sizes (a few queries over a few hundred keys) the fused CPU kernel's fixed
cost is most of its time, while inductor turns the plain ops into a few loops of its own (no batched matrix
product either, which its GEMM template does not take). Those loops do one query's work once per query, where the
fused kernel multiplies blocks of queries and keys as matrices: over the 3,072-entry caches of super-resolution a
verify pass's k queries cost the plain form most of a round, so a model whose caches are that long keeps the fused
kernel for calls of several queries (``fused_for_many``). Everywhere else (training, eager decoding, GPUs) it is
``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Attention of ``q`` (..., n, dh) over ``k``, ``v`` (..., keys, dh); ``mask`` bool, True = attend (every query
    attends to at least one key)."""
    s = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) * q.shape[-1] ** -0.5  # (..., n, keys)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(dim=-1).unsqueeze(-1) * v.unsqueeze(-3)).sum(-2)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              dropout_p: float = 0.0, fused_for_many: bool = False) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` (bool mask), or ``plain_attention`` while inductor compiles inference on
    a CPU: for every call, or with ``fused_for_many`` for one-query calls only."""
    if (dropout_p == 0.0 and q.device.type == "cpu" and torch.compiler.is_compiling() and not torch.is_grad_enabled()
            and not (fused_for_many and q.shape[-2] > 1)):
        return plain_attention(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
