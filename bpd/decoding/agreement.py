"""Why an exact decoder's output differs from greedy's, when it does.

Exact acceptance keeps a proposed token only where it is p_1's argmax, so an exact decoder computes the
same function as greedy decoding. It computes it in another order, though: the verify pass scores k
positions in one call, greedy one at a time, and float32 sums in another order round differently (by
about 1e-7 of the logits' size). Where two tokens' logits are that close, the two can pick different
argmaxes, and the outputs part. :func:`mismatch_gaps` measures, for each output that differs from
greedy's, how close that call was: p_1's logit gap between the two tokens at the first position where
they part, teacher-forced on their shared prefix. A gap at rounding level is such a near-tie; a gap of
logit size is a decoding bug.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


@torch.inference_mode()
def mismatch_gaps(model, sources: Sequence[Sequence[int]], greedy: Sequence[Sequence[int]],
                  other: Sequence[Sequence[int]]) -> list[float]:
    """For each output in ``other`` that differs from greedy's: the logit of greedy's token minus that of
    ``other``'s at the first position where they part (inf when one output is a prefix of the other:
    no single token choice explains that)."""
    device = next(model.parameters()).device
    gaps = []
    for src, g, o in zip(sources, greedy, other):
        if list(g) == list(o):
            continue
        t = next((i for i, (a, b) in enumerate(zip(g, o)) if a != b), None)
        if t is None:
            gaps.append(math.inf)
            continue
        s = torch.tensor([list(src)], dtype=torch.long, device=device)
        tgt = torch.tensor([[model.bos_id, *g[:t]]], dtype=torch.long, device=device)
        logits = model.heads.base_logits(model.decode(tgt, model.encode(s))[:, t]).float()[0]
        gaps.append((logits[g[t]] - logits[o[t]]).item())
    return gaps
