"""Proposal heads: turn the decoder's final hidden state into k next-token distributions.

Slot 0 is p_1, the base model; slot i predicts the token i positions further ahead from the same
prefix. All architectures share the model's vocabulary projection (the paper's choice), and expose
two entry points so decoding can stay cheap:

* ``base_logits(h)``: p_1 only, used at every verified position,
* ``forward(h, k)``: all (or the first ``k``) slots, used where proposals are needed.

Architectures:

* ``paper``: Stern et al.'s single feed-forward layer, hidden k*d_ff, output k*d_model, residual from
  ``h`` into each slot. Its weights grow quadratically in k.
* ``blockdiag``: the same but one independent FFN per slot (block-diagonal), linear in k.
* ``medusa``: a residual SiLU block of size d_model per slot (Cai et al. 2024), cheapest.

``identity_p1=True`` makes slot 0 exactly ``h`` so that p_1 equals the base model bit for bit; with
the paper's layer, p_1 otherwise passes through the new layer (which is why the paper's BLEU moves
with k even with a frozen base).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

HEAD_ARCHS = ("paper", "blockdiag", "medusa")


class ProposalHeads(nn.Module):
    def __init__(
        self,
        d_model: int,
        d_ff: int,
        k: int,
        output: nn.Linear,
        arch: str = "paper",
        identity_p1: bool = False,
    ) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"k must be >= 1 (got {k}); use k=1 for a plain base model.")
        if arch not in HEAD_ARCHS:
            raise ValueError(f"unknown head architecture {arch!r}; choose one of {', '.join(HEAD_ARCHS)}.")
        self.d_model, self.d_ff, self.k, self.arch = d_model, d_ff, k, arch
        self.identity_p1 = identity_p1
        # Kept as an attribute, not a submodule: its parameters belong to the model (tied embeddings).
        self._output = [output]
        # A plain base model (k == 1 with identity p_1) has no extra parameters at all.
        n_learned = k - 1 if identity_p1 else k
        self.n_learned = n_learned
        if n_learned == 0:
            return
        if arch == "paper":
            # One layer over all k slots (even when p_1 is the identity, to keep the paper's shape).
            self.w_in = nn.Linear(d_model, k * d_ff)
            self.w_out = nn.Linear(k * d_ff, k * d_model)
            nn.init.zeros_(self.w_out.weight)
            nn.init.zeros_(self.w_out.bias)
        elif arch == "blockdiag":
            self.w_in_b = nn.Parameter(torch.randn(n_learned, d_model, d_ff) * d_model**-0.5)
            self.b_in_b = nn.Parameter(torch.zeros(n_learned, d_ff))
            self.w_out_b = nn.Parameter(torch.zeros(n_learned, d_ff, d_model))
            self.b_out_b = nn.Parameter(torch.zeros(n_learned, d_model))
        else:  # medusa
            self.w_m = nn.Parameter(torch.zeros(n_learned, d_model, d_model))
            self.b_m = nn.Parameter(torch.zeros(n_learned, d_model))

    @property
    def output(self) -> nn.Linear:
        return self._output[0]

    def _slots(self, h: torch.Tensor, k: int, start: int = 0) -> torch.Tensor:
        """Hidden vectors of slots ``start .. k-1``: (..., k - start, d_model)."""
        k = min(k, self.k)
        if self.n_learned == 0:
            return h.unsqueeze(-2)
        parts: list[torch.Tensor] = []
        if self.identity_p1 and start == 0:
            parts.append(h.unsqueeze(-2))
        # Learned slots a..b-1 in the learned-parameter numbering (slot s is learned index s - shift).
        shift = 1 if self.identity_p1 else 0
        a, b = max(start, shift) - shift, k - shift
        if b > a:
            if self.arch == "paper":
                hidden = F.relu(self.w_in(h))
                # Only the output rows of the wanted slots: the layer is block-structured on its output side.
                lo, hi = (a + shift) * self.d_model, (b + shift) * self.d_model
                out = F.linear(hidden, self.w_out.weight[lo:hi], self.w_out.bias[lo:hi])
                out = out.unflatten(-1, (b - a, self.d_model))
            elif self.arch == "blockdiag":
                hidden = F.relu(torch.einsum("...d,nde->...ne", h, self.w_in_b[a:b]) + self.b_in_b[a:b])
                out = torch.einsum("...ne,ned->...nd", hidden, self.w_out_b[a:b]) + self.b_out_b[a:b]
            else:
                out = F.silu(torch.einsum("...d,nde->...ne", h, self.w_m[a:b]) + self.b_m[a:b])
            parts.append(h.unsqueeze(-2) + out)
        return torch.cat(parts, dim=-2) if len(parts) > 1 else parts[0]

    def forward(self, h: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Logits of the first ``k`` slots (default all): (..., k, V)."""
        return self.output(self._slots(h, self.k if k is None else k))

    def proposal_logits(self, h: torch.Tensor, k: int) -> torch.Tensor:
        """Logits of slots 1 .. k-1 only (p_1 comes from ``base_logits``): (..., k-1, V)."""
        return self.output(self._slots(h, k, start=1))

    def base_logits(self, h: torch.Tensor) -> torch.Tensor:
        """p_1 logits only: (..., V). Cheap when p_1 is the identity."""
        if self.identity_p1 or self.n_learned == 0:
            return self.output(h)
        return self.output(self._slots(h, 1)[..., 0, :])
