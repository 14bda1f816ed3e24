"""``toy_shared``: one residual tanh layer that every proposal slot shares, each slot adding an offset of its own
(d² + k·d parameters), the smallest architecture that still tells its slots apart."""

from __future__ import annotations

import torch
from torch import nn

from bpd.models.heads.base import ProposalHeads


class SharedHeads(ProposalHeads):
    arch = "toy_shared"

    def create_parameters(self, n: int) -> None:
        self.w = nn.Parameter(torch.zeros(self.d_model, self.d_model))
        self.offset = nn.Parameter(torch.zeros(n, self.d_model))

    def learned_states(self, h: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        a, b = lo - self.shift, hi - self.shift
        return (h + torch.tanh(h @ self.w)).unsqueeze(-2) + self.offset[a:b]
