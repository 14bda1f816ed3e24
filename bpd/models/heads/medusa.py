"""Medusa heads (Cai et al. 2024): one residual SiLU layer of size d_model per slot. The cheapest."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bpd.models.heads.base import ProposalHeads


class MedusaHeads(ProposalHeads):
    arch = "medusa"

    def create_parameters(self, n: int) -> None:
        self.w_m = nn.Parameter(torch.zeros(n, self.d_model, self.d_model))
        self.b_m = nn.Parameter(torch.zeros(n, self.d_model))

    def learned_states(self, h: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        a, b = lo - self.shift, hi - self.shift
        return h.unsqueeze(-2) + F.silu(torch.einsum("...d,nde->...ne", h, self.w_m[a:b]) + self.b_m[a:b])
