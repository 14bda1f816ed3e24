"""Stern et al.'s proposal layer: one feed-forward layer over all k slots, hidden k * d_ff, output
k * d_model, with a residual from ``h`` into each slot. Its weights grow quadratically in k."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bpd.models.heads.base import ProposalHeads


class PaperHeads(ProposalHeads):
    arch = "paper"

    def create_parameters(self, n: int) -> None:
        # One layer over all k slots, even when p_1 is the identity, to keep the paper's shape.
        k = self.k
        self.w_in = nn.Linear(self.d_model, k * self.d_ff)
        self.w_out = nn.Linear(k * self.d_ff, k * self.d_model)
        nn.init.zeros_(self.w_out.weight)
        nn.init.zeros_(self.w_out.bias)

    def learned_states(self, h: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        hidden = F.relu(self.w_in(h))
        # Only the output rows of the wanted slots: the layer is block-structured on its output side.
        rows = slice(lo * self.d_model, hi * self.d_model)
        weight, bias = self.w_out.weight[rows], self.w_out.bias[rows]
        if lo and torch.compiler.is_compiling():
            # Rows of their own, as ``static_steps.own_storage`` gives the chain's tables (slot lo would get slot
            # 0's rows): in the graph, freezing folds the product into a new constant (it drops a clone).
            weight, bias = weight.mul(1), bias.mul(1)
        out = F.linear(hidden, weight, bias)
        return h.unsqueeze(-2) + out.unflatten(-1, (hi - lo, self.d_model))
