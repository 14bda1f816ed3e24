"""Recurrent heads: slot i also reads the token slot i - 1 proposed. A residual feed-forward layer over
``[s_{i-1}; embedding(y_{t+i})]`` with ``s_0 = h`` (the sequential dependence of Hydra heads, Ankner et al.
2024, and of ReDrafter, Cheng et al. 2024). Training feeds the target tokens (teacher forcing); without
them the slots chain their own argmax, as when decoding, so proposals are made one slot after another
inside a round (k - 1 small steps, still no extra decoder call)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from bpd.models import fastpath
from bpd.models.fastpath import top1
from bpd.models.heads.base import ProposalHeads
from bpd.models.heads.source import Source


class SlotStep(Protocol):
    """One recurrent slot's step as decoding runs it: the states after slot ``i`` (1-based) and their logits over
    the proposal vocabulary, the read token being a token id or (``from_proposal``) a proposal-vocabulary index
    as the previous slot's argmax gives it. ``RecurrentHeads.stepper`` picks the implementation:
    ``PlainStep`` (the parameters, as training computes the slot) or ``fastpath.TableStep`` (inference)."""

    def __call__(self, s: torch.Tensor, tok: torch.Tensor, i: int, from_proposal: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor: ...


class PlainStep:
    """``RecurrentHeads.step`` and ``proposal_logits``: the slot computed from the parameters."""

    def __init__(self, heads: RecurrentHeads, source: Source | None = None) -> None:
        self.heads, self.source = heads, source

    def __call__(self, s: torch.Tensor, tok: torch.Tensor, i: int, from_proposal: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.heads.step(s, self.token_ids(tok) if from_proposal else tok, i, self.source)
        return s, self.heads.proposal_logits(s)

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        ids = self.heads.proposal_ids
        return idx if ids is None else ids[idx]


class RecurrentHeads(ProposalHeads):
    arch = "recurrent"
    #: Vectors each slot's first layer reads, concatenated: the previous state and the token's embedding.
    n_inputs = 2

    def create_parameters(self, n: int) -> None:
        if not self.identity_p1:
            raise ValueError(f"heads.arch={self.arch} needs heads.identity_p1=true: its first slot reads p_1's token.")
        width, m = self.n_inputs * self.d_model, self.n_weight_sets
        self.w_r_in = nn.Parameter(torch.randn(m, width, self.d_ff) * width**-0.5)
        # Each slot keeps its own first-layer bias even when the weights are tied: it tells the slot its depth.
        self.b_r_in = nn.Parameter(torch.zeros(n, self.d_ff))
        self.w_r_out = nn.Parameter(torch.zeros(m, self.d_ff, self.d_model))
        self.b_r_out = nn.Parameter(torch.zeros(m, self.d_model))

    @property
    def n_weight_sets(self) -> int:
        """How many sets of slot weights there are: one per learned slot, or one for all (``tie_slots``)."""
        return 1 if self.tie_slots else self.n_learned

    def weight_set(self, i: int) -> int:
        """The index of slot ``i``'s (1-based) weights in the stacked parameters."""
        return 0 if self.tie_slots else i - 1

    def inputs(self, s: torch.Tensor, e: torch.Tensor, i: int, source: Source | None,
               rows: torch.Tensor | None) -> list[torch.Tensor]:
        """What slot ``i``'s first layer reads at states ``s``: the state and the read token's embedding."""
        return [s, e]

    def step(self, s: torch.Tensor, tok: torch.Tensor, i: int, source: Source | None = None,
             rows: torch.Tensor | None = None) -> torch.Tensor:
        """State of slot ``i`` (1-based) from the previous slot's state and the token it reads (``rows``: the
        flat positions ``s`` holds, where a loss computes the slot at some positions only)."""
        n_out = self.output.weight.shape[0]
        # Pad/EOS targets beyond the output vocabulary only occur where the loss is masked anyway.
        e = F.embedding(tok.clamp(0, n_out - 1), self.output.weight).to(s.dtype)
        x, j = torch.cat(self.inputs(s, e, i, source, rows), dim=-1), self.weight_set(i)
        hidden = F.relu(x @ self.w_r_in[j] + self.b_r_in[i - 1])
        return s + hidden @ self.w_r_out[j] + self.b_r_out[j]

    def stepper(self, source: Source | None = None) -> SlotStep:
        """The slot step decoding runs, chosen once per call: the decoding tables under inference mode (no
        autograd to serve; ``fastpath.TableStep``), else the parameters (``PlainStep``)."""
        if self.n_learned and not torch.compiler.is_compiling() and torch.is_inference_mode_enabled():
            return fastpath.TableStep(self, source)
        return PlainStep(self, source)

    def step_logits(self, s: torch.Tensor, tok: torch.Tensor, i: int,
                    source: Source | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``step`` and the new states' logits over the proposal vocabulary (a tree's frontier, one depth)."""
        return self.stepper(source)(s, tok, i)

    def chain(self, h: torch.Tensor, tok: torch.Tensor | None, stop: int, tokens: torch.Tensor | None = None,
              source: Source | None = None) -> list[torch.Tensor]:
        """States of slots 1..stop-1 (training, analysis). Slot 1 reads ``tok`` and slot i the argmax of slot
        i-1 over the whole vocabulary, unless teacher ``tokens`` are given."""
        states, s = [], h
        for i in range(1, stop):
            s = self.step(s, tokens[..., i - 1] if tokens is not None else tok, i, source)
            states.append(s)
            if tokens is None and i < stop - 1:
                tok = top1(self.output(s))
        return states

    def states(self, h: torch.Tensor, stop: int, start: int = 0, tokens: torch.Tensor | None = None,
               source: Source | None = None) -> torch.Tensor:
        stop = min(stop, self.k)
        if self.n_learned == 0:
            return h.unsqueeze(-2)
        first = None if tokens is not None else top1(self.output(h))
        slots = [h] + self.chain(h, first, stop, tokens, source=source)
        return torch.stack(slots[start:stop], dim=-2)

    def slot_states(
        self, h: torch.Tensor, slots: list[int], tokens: torch.Tensor | None = None, alive: torch.Tensor | None = None,
        source: Source | None = None,
    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor | None]]:
        """The chain is sequential: the states up to the furthest requested slot are computed once (in slot
        order), each slot only at the positions still ``alive`` for it (a subset of the previous slot's)."""
        if max(slots) == 0 or self.n_learned == 0:
            yield from super().slot_states(h, slots, tokens, alive)
            return
        if tokens is None:  # each slot reads the previous one's argmax: the whole chain, then the rows asked for
            states = self.states(h, max(slots) + 1, source=source)
            for i in slots:
                rows = None if alive is None else alive[:, i].nonzero()[:, 0]
                yield i, states[:, i] if rows is None else states[rows, i], rows
            return
        rows = None if alive is None else alive[:, 0].nonzero()[:, 0]
        s, wanted = (h if rows is None else h[rows]), set(slots)
        if 0 in wanted:
            yield 0, s, rows
        for i in range(1, max(slots) + 1):
            if alive is not None:
                keep = alive[rows, i]
                rows, s = rows[keep], s[keep]
            s = self.step(s, tokens[:, i - 1] if rows is None else tokens[rows, i - 1], i, source, rows)
            if i in wanted:
                yield i, s, rows

    def propose(self, h: torch.Tensor, first: torch.Tensor, k: int, source: Source | None = None) -> torch.Tensor:
        """The chain of slots 1..k-1 at one position ``h`` (B, d), each reading the previous slot's argmax over
        the proposal vocabulary (slot 1: p_1's ``first``), one ``stepper`` step per slot."""
        if self.n_learned == 0:
            return self.proposal_top1(self.states(h, k, start=1))
        step = self.stepper(source)
        s, tok, chosen = h, first[:, 0], []
        for i in range(1, min(k, self.k)):
            s, logits = step(s, tok, i, from_proposal=i > 1)
            tok = top1(logits)
            chosen.append(tok)
        return step.token_ids(torch.stack(chosen, dim=-1))
