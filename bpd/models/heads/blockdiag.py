"""The paper's layer made block-diagonal: one independent feed-forward layer (d -> d_ff -> d) per slot,
with a residual from ``h``. Linear in k."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bpd.models.heads.base import ProposalHeads


class BlockDiagHeads(ProposalHeads):
    arch = "blockdiag"

    def create_parameters(self, n: int) -> None:
        self.w_in_b = nn.Parameter(torch.randn(n, self.d_model, self.d_ff) * self.d_model**-0.5)
        self.b_in_b = nn.Parameter(torch.zeros(n, self.d_ff))
        self.w_out_b = nn.Parameter(torch.zeros(n, self.d_ff, self.d_model))
        self.b_out_b = nn.Parameter(torch.zeros(n, self.d_model))

    def learned_states(self, h: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        a, b = lo - self.shift, hi - self.shift
        hidden = F.relu(torch.einsum("...d,nde->...ne", h, self.w_in_b[a:b]) + self.b_in_b[a:b])
        out = torch.einsum("...ne,ned->...nd", hidden, self.w_out_b[a:b]) + self.b_out_b[a:b]
        return h.unsqueeze(-2) + out
