"""Proposal heads: turn the decoder's final hidden state into k next-token distributions.

Slot 0 is p_1, the base model; slot i predicts the token i positions further ahead from the same
prefix. All architectures share the model's vocabulary projection (the paper's choice), and expose
two entry points so decoding can stay cheap:

* ``base_logits(h)``: p_1 only, used at every verified position,
* ``forward(h, k, tokens)``: all (or the first ``k``) slots, for training and analysis,
* ``propose(h, first, k)``: the proposal tokens of slots 1..k-1 at one position, for decoding.

Architectures:

* ``paper``: Stern et al.'s single feed-forward layer, hidden k*d_ff, output k*d_model, residual from
  ``h`` into each slot. Its weights grow quadratically in k.
* ``blockdiag``: the same but one independent FFN per slot (block-diagonal), linear in k.
* ``medusa``: a residual SiLU block of size d_model per slot (Cai et al. 2024), cheapest.
* ``recurrent``: slot i also reads the token proposed for slot i - 1: a residual FFN over
  ``[s_{i-1}; embedding(y_{t+i})]`` with ``s_0 = h`` (the sequential dependence of Hydra heads, Ankner
  et al. 2024, and ReDrafter, Cheng et al. 2024). Proposals are then made one slot after another (k - 1
  small steps inside one round, still no extra decoder call). Training feeds the target tokens
  (teacher forcing); without ``tokens`` the slots chain their own argmax, as at decoding time.

``identity_p1=True`` makes slot 0 exactly ``h`` so that p_1 equals the base model bit for bit; with
the paper's layer, p_1 otherwise passes through the new layer (which is why the paper's BLEU moves
with k even with a frozen base).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

HEAD_ARCHS = ("paper", "blockdiag", "medusa", "recurrent")


def top1(logits: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dimension (first index on ties, like ``argmax``). ``max(-1).indices`` is
    used because on a CPU it is about 2x faster than ``argmax`` for the few rows of a decoding step
    (measured at V=4000: 13 vs 30 us for 4 rows); every decoder uses this one function."""
    return logits.max(-1).indices


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
        # Inference-only tensors derived from the weights (see ``_derived``), rebuilt when they change.
        self._derived_cache: dict[str, tuple[tuple, torch.Tensor]] = {}
        # Decoding option: proposal heads choose among these token ids only (``set_proposal_vocab``).
        self.proposal_ids: torch.Tensor | None = None
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
        elif arch == "medusa":
            self.w_m = nn.Parameter(torch.zeros(n_learned, d_model, d_model))
            self.b_m = nn.Parameter(torch.zeros(n_learned, d_model))
        else:  # recurrent
            if not identity_p1:
                raise ValueError("heads.arch=recurrent needs heads.identity_p1=true: its first slot reads p_1's token.")
            self.w_r_in = nn.Parameter(torch.randn(n_learned, 2 * d_model, d_ff) * (2 * d_model) ** -0.5)
            self.b_r_in = nn.Parameter(torch.zeros(n_learned, d_ff))
            self.w_r_out = nn.Parameter(torch.zeros(n_learned, d_ff, d_model))
            self.b_r_out = nn.Parameter(torch.zeros(n_learned, d_model))

    @property
    def output(self) -> nn.Linear:
        return self._output[0]

    def _recurrent_step(self, s: torch.Tensor, tok: torch.Tensor, i: int) -> torch.Tensor:
        """State of recurrent slot ``i`` (1-based) from the previous state and the token it reads."""
        n_out = self.output.weight.shape[0]
        # Pad/EOS targets beyond the output vocabulary only occur where the loss is masked anyway.
        e = F.embedding(tok.clamp(0, n_out - 1), self.output.weight)
        hidden = F.relu(torch.cat([s, e.to(s.dtype)], dim=-1) @ self.w_r_in[i - 1] + self.b_r_in[i - 1])
        return s + hidden @ self.w_r_out[i - 1] + self.b_r_out[i - 1]

    def _recurrent_states(self, h: torch.Tensor, k: int, tokens: torch.Tensor | None) -> list[torch.Tensor]:
        """States of slots 1..k-1. Slot i reads ``tokens[..., i-1]`` (teacher forcing) or, without
        ``tokens``, the argmax of slot i-1 (p_1 for slot 1)."""
        tok = None if tokens is not None else top1(self.output(h))
        return self._recurrent_chain(h, tok, k, tokens)[0]

    def _recurrent_chain(
        self,
        h: torch.Tensor,
        tok: torch.Tensor | None,
        k: int,
        tokens: torch.Tensor | None = None,
        pick: Callable[[torch.Tensor], torch.Tensor] | None = None,
        last_token: bool = False,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """States of slots 1..k-1 and the tokens chosen from them. Slot 1 reads ``tok`` and slot i the token
        slot i-1 chose with ``pick`` (default: argmax over the whole vocabulary), unless teacher ``tokens``
        are given. The last slot's token is only chosen with ``last_token`` (decoding needs it, the
        teacher-forced logits do not)."""
        pick = pick or (lambda s: top1(self.output(s)))
        states, chosen, s = [], [], h
        for i in range(1, k):
            s = self._recurrent_step(s, tokens[..., i - 1] if tokens is not None else tok, i)
            states.append(s)
            if tokens is None and (i < k - 1 or last_token):
                tok = pick(s)
                chosen.append(tok)
        return states, chosen

    def _slots(self, h: torch.Tensor, k: int, start: int = 0, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden vectors of slots ``start .. k-1``: (..., k - start, d_model). ``tokens`` (..., >= k-1)
        are the teacher tokens the recurrent slots read (ignored by the other architectures)."""
        k = min(k, self.k)
        if self.n_learned == 0:
            return h.unsqueeze(-2)
        if self.arch == "recurrent":
            slots = [h] + self._recurrent_states(h, k, tokens)
            return torch.stack(slots[start:k], dim=-2)
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

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The shared vocabulary projection. Under inference mode on a CPU it multiplies by a cached
        contiguous (d, V) transpose of the weight: for the few rows a decoding step has, the CPU GEMM is
        about 2x faster that way than against the (V, d) weight (measured at V=4000, d=128: 34 vs 74 us
        for 4 rows, 15 vs 28 us for 1), and that projection is most of a tiny model's step. The copy is
        rebuilt whenever the weight changes (training steps and loads bump its version)."""
        if self.output.weight.device.type != "cpu" or not torch.is_inference_mode_enabled():
            return self.output(x)
        wt = self._output_t()
        return x @ wt if self.output.bias is None else torch.addmm(self.output.bias, x, wt)

    def _output_t(self) -> torch.Tensor:
        """The output weight as a cached contiguous (d, V) transpose (inference on a CPU, see ``project``)."""
        w = self.output.weight
        return self._derived("wt", [w], lambda: w.detach().t().contiguous())

    def _derived(self, name: str, sources: list[torch.Tensor], make):
        """A tensor computed from ``sources`` once, cached until any of them changes (an optimizer step
        or a state-dict load bumps a tensor's version). Only used under inference mode."""
        key = tuple((t.data_ptr(), t._version, t.dtype) for t in sources)
        hit = self._derived_cache.get(name)
        if hit is None or hit[0] != key:
            with torch.inference_mode():
                hit = (key, make())
            self._derived_cache[name] = hit
        return hit[1]

    def forward(self, h: torch.Tensor, k: int | None = None, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the first ``k`` slots (default all): (..., k, V). ``tokens``: see ``_slots``."""
        return self.project(self._slots(h, self.k if k is None else k, tokens=tokens))

    def set_proposal_vocab(self, ids: torch.Tensor | None) -> None:
        """Restrict what the proposal heads may propose to ``ids`` (e.g. the most frequent target tokens),
        or lift the restriction with None. Proposals are only guesses: verification still scores p_1 over
        the whole vocabulary, so exact decoding stays identical to greedy; a smaller projection makes each
        proposal slot cheaper (FR-Spec, Zhao et al. 2025), at the price of never proposing a rare token."""
        dev = self.output.weight.device
        self.proposal_ids = None if ids is None else torch.as_tensor(ids, dtype=torch.long, device=dev)

    def _propose_top1(self, x: torch.Tensor) -> torch.Tensor:
        """Proposed token ids (argmax over the allowed proposal vocabulary)."""
        ids = self.proposal_ids
        if ids is None:
            return top1(self.project(x))
        w, b = self.output.weight, self.output.bias
        if w.device.type == "cpu" and torch.is_inference_mode_enabled():
            wt, b_p = self._proposal_projection()
            logits = x @ wt if b_p is None else torch.addmm(b_p, x, wt)
        else:
            logits = F.linear(x, w[ids], None if b is None else b[ids])
        return ids[top1(logits)]

    def propose(self, h: torch.Tensor, first: torch.Tensor, k: int) -> torch.Tensor:
        """Proposal tokens of slots 1..k-1 (B, k-1) at one position ``h`` (B, d), given p_1's argmax
        ``first`` (B, 1). Recurrent slots are chained, each projected once."""
        if self.arch != "recurrent" or self.n_learned == 0:
            return self._propose_top1(self._slots(h, k, start=1))
        if not (torch.is_inference_mode_enabled() and h.dim() == 2):
            chosen = self._recurrent_chain(h, first[:, 0], min(k, self.k), pick=self._propose_top1, last_token=True)[1]
            return torch.stack(chosen, dim=-1)
        out, s, tok = [], h, first[:, 0]
        # Decoding: the same function in fewer small ops (on a CPU each op costs ~10 us whatever its size).
        # The token half of each slot's first layer is a per-vocabulary table (V, d_ff) computed once, and
        # the second layer's bias rides inside its matrix product (a constant-1 column on the table, a bias
        # row under the weight), so a slot step is a lookup, addmm, relu, addmm, the projection and an
        # argmax. Slots after the first read proposal-vocabulary indices: their tables are gathered to those
        # rows once, and the indices are mapped back to token ids once at the end. (265 -> 177 us at k = 4
        # on the demo model against the per-slot version, with identical proposals.)
        ids = self.proposal_ids
        sources = [self.output.weight, self.w_r_in, self.b_r_in, self.w_r_out, self.b_r_out]
        slots = self._derived("recurrent", sources + ([] if ids is None else [ids]), self._recurrent_tables)
        wt, bias = self._proposal_projection()
        for i, (table, table_p, w_s, w_o) in enumerate(slots[: min(k, self.k) - 1]):
            hidden = torch.addmm((table if i == 0 else table_p)[tok], s, w_s).relu_()
            s = torch.addmm(s, hidden, w_o)
            tok = top1(s @ wt if bias is None else torch.addmm(bias, s, wt))
            out.append(tok)
        toks = torch.stack(out, dim=-1)
        return toks if ids is None else ids[toks]

    def _proposal_projection(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The (d, P) transposed projection onto the proposal vocabulary and its bias (P = V unrestricted)."""
        w, b, ids = self.output.weight, self.output.bias, self.proposal_ids
        if ids is None:
            return self._output_t(), b
        wt = self._derived("wt_proposal", [w, ids], lambda: w[ids].t().contiguous())
        return wt, None if b is None else self._derived("b_proposal", [b, ids], lambda: b[ids])

    def _recurrent_tables(self) -> list[tuple[torch.Tensor, ...]]:
        """Per recurrent slot: the token table over the whole vocabulary (V, d_ff + 1), the same table over
        the proposal vocabulary, the state half of the first layer (d, d_ff + 1) and the second layer
        with its bias as a last row (d_ff + 1, d). The extra column is 1 in the table and 0 in the state
        weight, so it survives the relu as 1 and adds the bias row."""
        d, emb, ids = self.d_model, self.output.weight, self.proposal_ids
        out = []
        for i in range(self.n_learned):
            table = torch.addmm(self.b_r_in[i], emb, self.w_r_in[i, d:])
            table = torch.cat([table, table.new_ones(table.shape[0], 1)], dim=1)
            w_s = self.w_r_in[i, :d]
            w_s = torch.cat([w_s, w_s.new_zeros(d, 1)], dim=1)
            w_o = torch.cat([self.w_r_out[i], self.b_r_out[i][None]], dim=0)
            out.append((table, table if ids is None else table[ids].contiguous(), w_s, w_o))
        return out

    def base_logits(self, h: torch.Tensor) -> torch.Tensor:
        """p_1 logits only: (..., V). Cheap when p_1 is the identity."""
        if self.identity_p1 or self.n_learned == 0:
            return self.project(h)
        return self.project(self._slots(h, 1)[..., 0, :])
