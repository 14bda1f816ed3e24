"""Is an export the same model? Teacher-forced logits side by side, and greedy outputs token by token.

A peer that differs on a sentence is reported with the logit gap that decided it: at the first position
where the outputs part, how far apart our model's logits of its own token and of the peer's token are. A gap
of a few 1e-6 is a near-tie that float summation order flipped; a large one is a real difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from bpd.config import output_limit
from bpd.data.batches import pad_rows
from bpd.decoding.methods.greedy import greedy_decode
from bpd.decoding.peers import Peer


@torch.inference_mode()
def logits_gap(model, hf, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> float:
    """The largest |ours - exported| teacher-forced p_1 logit over the real (unpadded) positions of one batch;
    ``targets`` end with EOS (the decoder reads BOS + target[:-1])."""
    src = pad_rows([list(s) for s in sources], model.pad_id, min_width=1)
    tgt = pad_rows([[model.bos_id, *t[:-1]] for t in targets], model.pad_id, min_width=1)
    ours = model.heads.base_logits(model.decode(tgt, model.encode(src)))
    theirs = hf(input_ids=src, attention_mask=(src != model.pad_id).long(), decoder_input_ids=tgt).logits
    real = torch.zeros_like(tgt, dtype=torch.bool)
    for i, t in enumerate(targets):
        real[i, : len(t)] = True
    return float((ours - theirs).abs()[real].max())


@dataclass
class Mismatch:
    index: int  # the sentence's index among the checked ones
    position: int  # the first output position where the peer parts from greedy
    ours: int
    theirs: int | None  # None: the peer stopped there
    logit_gap: float | None  # our logit of our token minus our logit of the peer's token there


@dataclass
class Identity:
    n: int
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def identical(self) -> float:
        return 1 - len(self.mismatches) / max(1, self.n)


@torch.inference_mode()
def first_divergence(model, source: Sequence[int], ours: list[int], theirs: list[int], index: int) -> Mismatch:
    """Where and by how much (under our model) a peer's output parts from our greedy one."""
    pos = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    their_tok = theirs[pos] if pos < len(theirs) else None
    gap = None
    if pos < len(ours) and their_tok is not None:
        src = torch.tensor([list(source)])
        prefix = torch.tensor([[model.bos_id, *ours[:pos]]])
        logits = model.heads.base_logits(model.decode(prefix, model.encode(src))[0, -1])
        gap = float(logits[ours[pos]] - logits[their_tok])
    return Mismatch(index, pos, ours[pos] if pos < len(ours) else -1, their_tok, gap)


def greedy_identity(model, peer: Peer, sources: Sequence[Sequence[int]], greedy: list[list[int]] | None = None
                    ) -> tuple[Identity, list[list[int]]]:
    """Decode every source alone (batch 1, the harness's output limit) with our greedy (unless given) and with
    ``peer``; the identity and our greedy outputs (to reuse for the next peer)."""
    if greedy is None:
        greedy = [greedy_decode(model, torch.tensor([list(s)]), output_limit(len(s))).tokens[0] for s in sources]
    result = Identity(len(sources))
    for i, (s, ours) in enumerate(zip(sources, greedy)):
        theirs = peer([s], output_limit(len(s)))[0]
        if theirs != ours:
            result.mismatches.append(first_divergence(model, s, ours, theirs, i))
    return result, greedy
