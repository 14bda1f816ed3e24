"""Recurrent heads whose slots also attend to the input: slot i's first layer reads
``[s_{i-1}; embedding(y_{t+i}); attention(s_{i-1} W_q, source)]``, the source keys and values being the base
model's own (``bpd.models.heads.source``).

A recurrent slot sees the input only through the one decoder state it starts from, so each further slot
guesses from less of what the decoder knew about the source. Reading the source again at every slot is
what EAGLE's draft layer (Li et al. 2024) and Hydra++ (Ankner et al. 2024) do with attention over the
context; here the context a translation needs most is the source sentence, which the decoder already holds
as keys and values, so a slot adds one (d, d) query projection and one attention per step."""

from __future__ import annotations

import torch
from torch import nn

from bpd.models.heads.recurrent import RecurrentHeads
from bpd.models.heads.source import MISSING, Source


class AttendHeads(RecurrentHeads):
    arch = "attend"
    reads_source = True
    n_inputs = 3

    def create_parameters(self, n: int) -> None:
        super().create_parameters(n)
        self.w_q = nn.Parameter(torch.randn(self.n_weight_sets, self.d_model, self.d_model) * self.d_model**-0.5)

    def inputs(self, s: torch.Tensor, e: torch.Tensor, i: int, source: Source | None,
               rows: torch.Tensor | None) -> list[torch.Tensor]:
        if source is None:
            raise ValueError(MISSING)
        return [s, e, source.read(s @ self.w_q[self.weight_set(i)], rows)]
