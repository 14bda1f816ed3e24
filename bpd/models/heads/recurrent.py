"""Recurrent heads: slot i also reads the token slot i - 1 proposed. A residual feed-forward layer over
``[s_{i-1}; embedding(y_{t+i})]`` with ``s_0 = h`` (the sequential dependence of Hydra heads, Ankner et al.
2024, and of ReDrafter, Cheng et al. 2024). Training feeds the target tokens (teacher forcing); without
them the slots chain their own argmax, as when decoding, so proposals are made one slot after another
inside a round (k - 1 small steps, still no extra decoder call)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from bpd.models import fastpath
from bpd.models.fastpath import top1
from bpd.models.heads.base import ProposalHeads
from bpd.models.heads.source import Source


class RecurrentHeads(ProposalHeads):
    arch = "recurrent"
    path_dependent = True
    #: Vectors each slot's first layer reads, concatenated: the previous state and the token's embedding.
    n_inputs = 2
    can_tie = True

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

    def step_logits(self, s: torch.Tensor, tok: torch.Tensor, i: int,
                    source: Source | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``step`` and the new states' logits over the proposal vocabulary (a tree's frontier, one depth)."""
        if torch.is_inference_mode_enabled() and self.n_learned >= i:
            return fastpath.recurrent_step(self, s, tok, i, source)
        s = self.step(s, tok, i, source)
        return s, self.proposal_logits(s)

    def chain(
        self,
        h: torch.Tensor,
        tok: torch.Tensor | None,
        stop: int,
        tokens: torch.Tensor | None = None,
        pick: Callable[[torch.Tensor], torch.Tensor] | None = None,
        last_token: bool = False,
        source: Source | None = None,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """States of slots 1..stop-1 and the tokens chosen from them. Slot 1 reads ``tok`` and slot i the
        token slot i-1 chose with ``pick`` (default: argmax over the whole vocabulary), unless teacher
        ``tokens`` are given. The last slot's token is only chosen with ``last_token`` (decoding needs it,
        teacher-forced logits do not)."""
        pick = pick or (lambda s: top1(self.output(s)))
        states, chosen, s = [], [], h
        for i in range(1, stop):
            s = self.step(s, tokens[..., i - 1] if tokens is not None else tok, i, source)
            states.append(s)
            if tokens is None and (i < stop - 1 or last_token):
                tok = pick(s)
                chosen.append(tok)
        return states, chosen

    def states(self, h: torch.Tensor, stop: int, start: int = 0, tokens: torch.Tensor | None = None,
               source: Source | None = None) -> torch.Tensor:
        stop = min(stop, self.k)
        if self.n_learned == 0:
            return h.unsqueeze(-2)
        first = None if tokens is not None else top1(self.output(h))
        slots = [h] + self.chain(h, first, stop, tokens, source=source)[0]
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
        if self.n_learned == 0:
            return self.proposal_top1(self.states(h, k, start=1))
        if torch.is_inference_mode_enabled() and h.dim() == 2:
            return fastpath.recurrent_propose(self, h, first, k, source)
        chosen = self.chain(h, first[:, 0], min(k, self.k), pick=self.proposal_top1, last_token=True,
                            source=source)[1]
        return torch.stack(chosen, dim=-1)
