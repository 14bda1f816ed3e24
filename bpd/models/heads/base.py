"""What every proposal-head architecture shares: slot 0 is p_1, slots 1..k-1 guess further ahead, and all
of them are read through the model's own vocabulary projection (the paper's choice).

An architecture (one module each beside this one) defines how the hidden vectors of its learned slots are
computed from the decoder state ``h`` (``learned_states``); this class turns them into what training and
decoding use:

* ``states(h, stop, start, tokens)``: hidden vectors of slots ``start .. stop-1``,
* ``forward(h, k, tokens)``: logits of the first ``k`` slots (training, analysis),
* ``slot_logits(h, slots, tokens)``: logits of the chosen slots (the paper's sampled loss asks for one
  slot, and only that one is computed),
* ``slot_states(h, slots, tokens, alive)``: their hidden vectors at the positions a loss scores only, and
  ``slot_output(i, x)`` their logits (the losses),
* ``base_logits(h)``: p_1 only, at every verified position,
* ``propose(h, first, k)``: the proposal tokens of slots 1..k-1 at one position (decoding).

Each also takes ``source`` (``bpd.models.heads.source.Source``): what slots that attend to the input read of
it (``reads_source``); the other architectures ignore it. The model builds it (``Transformer.head_source``).

``tie_slots=True`` (architectures whose slots run one after another) gives every proposal slot the same
weights but its own first-layer bias, a depth signal (EAGLE's single draft layer, Li et al. 2024): the chain
then streams one slot's weights however long it is.

``ahead=True`` (slots that guess from ``h`` alone) adds to each learned slot's state a product of what the input
says about the position it guesses (``Source.ahead``: an image model's upsampled guess of the intensity there,
which the decoder state at ``h`` has not read: it reads its own position's only), through a (d, d) weight per
slot that starts at zero.

``identity_p1=True`` makes slot 0 exactly ``h`` so that p_1 equals the base model bit for bit; otherwise p_1
also passes through the new layer (the paper's variant, which is why its BLEU moves with k even with a
frozen base). ``tokens`` (..., >= k-1) are teacher tokens for architectures whose slots read the previous
slot's token (recurrent); the others ignore them.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from bpd.config.decode import PROPOSAL_PRECISIONS
from bpd.config.registry import lookup
from bpd.models import fastpath
from bpd.models.fastpath import top1
from bpd.models.heads.source import MISSING_AHEAD, Source


class ProposalHeads(nn.Module):
    arch = "base"  # a subclass names its registered architecture (bpd/config/heads.py)
    #: Whether slot i's guess depends on the tokens chosen for slots < i (then a tree of candidates needs a
    #: head step per node: ``step``), or only on the decoder state (one set of candidates per slot).
    path_dependent = False
    #: Whether the slots attend to the input (then every call needs ``source``).
    reads_source = False
    #: Whether one set of slot weights can serve every slot (``tie_slots``): slots that run one after another.
    can_tie = False

    def __init_subclass__(cls, **kwargs) -> None:
        """An architecture's chained slots are its registry entry's (``HeadInfo.chained``), said once there."""
        super().__init_subclass__(**kwargs)
        if "arch" in vars(cls):
            cls.path_dependent = cls.can_tie = lookup("head", cls.arch, "head architecture").info.chained

    def __init__(self, d_model: int, d_ff: int, k: int, output: nn.Linear, identity_p1: bool = True,
                 tie_slots: bool = False, ahead: bool = False) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"k must be >= 1 (got {k}); use k=1 for a plain base model.")
        if tie_slots and not self.can_tie:
            raise ValueError(f"heads.tie_slots=true needs slots that run one after another (recurrent, attend), "
                             f"not heads.arch={self.arch}.")
        if ahead and self.path_dependent:
            raise ValueError(f"heads.ahead=true adds to the states of slots that guess from the decoder state alone "
                             f"(paper, blockdiag, medusa), not heads.arch={self.arch}.")
        if ahead and not identity_p1:
            raise ValueError("heads.ahead=true reads ahead for the proposal slots: it needs heads.identity_p1=true "
                             "(p_1 reads its own position's, as the base does).")
        self.d_model, self.d_ff, self.k, self.identity_p1 = d_model, d_ff, k, identity_p1
        self.tie_slots, self.ahead = tie_slots, ahead
        # Kept as an attribute, not a submodule: its parameters belong to the model (tied embeddings).
        self._output = [output]
        self.derived = fastpath.DerivedCache()
        # Decoding option: proposal heads choose among these token ids only (``set_proposal_vocab``).
        self.proposal_ids: torch.Tensor | None = None
        # Decoding option: the precision of the proposal chain's products (``set_proposal_precision``).
        self.proposal_precision = "float32"
        # Training option: the proposal slots' logits cover these token ids only (``set_loss_vocab``).
        self.loss_ids: torch.Tensor | None = None
        # A plain base model (k == 1 with identity p_1) has no extra parameters at all.
        self.n_learned = k - 1 if identity_p1 else k
        self.shift = 1 if identity_p1 else 0  # slot s is learned slot s - shift
        if self.n_learned:
            self.create_parameters(self.n_learned)
            if ahead:  # zero: the slots start as the architecture's own
                self.w_ahead = nn.Parameter(torch.zeros(self.n_learned, d_model, d_model))

    @property
    def output(self) -> nn.Linear:
        return self._output[0]

    # -- what an architecture defines ----------------------------------------------------------------------
    def create_parameters(self, n: int) -> None:
        """Create the parameters of ``n`` learned slots (their random draws, in a fixed order, are what a
        seed reproduces)."""
        raise NotImplementedError

    def learned_states(self, h: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """Hidden vectors (..., hi - lo, d) of the learned slots ``lo .. hi-1`` (slot numbers, lo >= shift)."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------------------
    def states(self, h: torch.Tensor, stop: int, start: int = 0, tokens: torch.Tensor | None = None,
               source: Source | None = None) -> torch.Tensor:
        """Hidden vectors of slots ``start .. stop-1``: (..., stop - start, d)."""
        stop = min(stop, self.k)
        if self.n_learned == 0:
            return h.unsqueeze(-2)
        parts: list[torch.Tensor] = []
        if self.identity_p1 and start == 0:
            parts.append(h.unsqueeze(-2))
        lo = max(start, self.shift)
        if stop > lo:
            parts.append(self.slot_vectors(h, lo, stop, source))
        return torch.cat(parts, dim=-2) if len(parts) > 1 else parts[0]

    def slot_vectors(self, h: torch.Tensor, lo: int, hi: int, source: Source | None = None,
                     rows: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden vectors (..., hi - lo, d) of the learned slots ``lo .. hi-1`` at ``h``: ``learned_states``, plus
        with ``ahead`` what the input says about each slot's position (``rows``: the flat positions ``h`` holds)."""
        s = self.learned_states(h, lo, hi)
        if not self.ahead:
            return s
        if source is None:
            raise ValueError(MISSING_AHEAD)
        e = source.ahead_vectors(h.shape[:-1], lo, hi, rows).to(s.dtype)
        return s + torch.einsum("...nd,nde->...ne", e, self.w_ahead[lo - self.shift : hi - self.shift])

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The shared vocabulary projection (``fastpath.project`` under CPU inference)."""
        if fastpath.applies(self.output.weight):
            return fastpath.project(self, x)
        return self.output(x)

    def forward(self, h: torch.Tensor, k: int | None = None, tokens: torch.Tensor | None = None,
                source: Source | None = None) -> torch.Tensor:
        """Logits of the first ``k`` slots (default all): (..., k, V)."""
        return self.project(self.states(h, self.k if k is None else k, tokens=tokens, source=source))

    def slot_logits(
        self, h: torch.Tensor, slots: list[int], tokens: torch.Tensor | None = None, source: Source | None = None
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """``(slot, logits (..., V))`` for each requested slot (0 = p_1), each computed when it is reached, so
        a loss over many slots of a large vocabulary holds one slot's logits at a time."""
        flat_tokens = None if tokens is None else tokens.flatten(0, -2)
        for i, x, _ in self.slot_states(h.flatten(0, -2), slots, flat_tokens, source=source):
            yield i, self.slot_output(i, x).unflatten(0, h.shape[:-1])

    def slot_states(
        self, h: torch.Tensor, slots: list[int], tokens: torch.Tensor | None = None, alive: torch.Tensor | None = None,
        source: Source | None = None,
    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor | None]]:
        """``(slot, x, rows)`` for each requested slot of the positions ``h`` (N, d): ``x`` holds the slot's
        hidden vectors at the positions ``rows`` (None: all N), ready for ``slot_output``. ``alive`` (N, S)
        marks, for slot i in column i, the positions the caller will score (a loss: those whose target is not
        padding), so a far slot is not computed where its target lies beyond the sentence's end; it must not
        grow with i (slot i's target is i tokens ahead: once past the end, always past it)."""
        for i in slots:
            rows = None if alive is None else alive[:, i].nonzero()[:, 0]
            x = h if rows is None else h[rows]
            yield i, x if i < self.shift else self.slot_vectors(x, i, i + 1, source, rows)[..., 0, :], rows

    def slot_output(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Slot ``i``'s logits from its hidden vectors: p_1 over the whole vocabulary, a proposal slot through
        ``slot_projection``."""
        return self.project(x) if i == 0 else self.slot_projection(x)

    def base_logits(self, h: torch.Tensor) -> torch.Tensor:
        """p_1 logits only: (..., V). Cheap when p_1 is the identity."""
        if self.identity_p1 or self.n_learned == 0:
            return self.project(h)
        return self.project(self.states(h, 1)[..., 0, :])

    def _token_ids(self, ids: torch.Tensor | None) -> torch.Tensor | None:
        return None if ids is None else torch.as_tensor(ids, dtype=torch.long, device=self.output.weight.device)

    def project_among(self, x: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor:
        """Logits (..., len(ids)) over the tokens ``ids`` only (index i is token ``ids[i]``), through the
        plain projection; None: the whole vocabulary."""
        if ids is None:
            return self.output(x)
        w, b = self.output.weight, self.output.bias
        return torch.nn.functional.linear(x, w[ids], None if b is None else b[ids])

    def set_proposal_vocab(self, ids: torch.Tensor | None) -> None:
        """Restrict what the proposal heads may propose to ``ids`` (e.g. the most frequent target tokens),
        or lift the restriction with None. Proposals are only guesses: verification still scores p_1 over
        the whole vocabulary, so exact decoding stays identical to greedy; a smaller projection makes each
        proposal slot cheaper (FR-Spec, Zhao et al. 2025), at the price of never proposing a rare token."""
        self.proposal_ids = self._token_ids(ids)

    def set_proposal_precision(self, precision: str) -> None:
        """``int8``: the recurrent and attend slots' decoding step multiplies by int8 weights (a CPU path:
        ``fastpath.TableStep`` eagerly, with fbgemm; the static path's traced chain, on any CPU build),
        ``float32`` (the default): as trained. Like the proposal vocabulary, this only
        changes what is proposed: verification scores p_1 with the base's own weights, so exact decoding stays
        identical to greedy. Heads without a slot chain (paper, blockdiag, medusa) ignore it."""
        if precision not in PROPOSAL_PRECISIONS:
            raise ValueError(f"decode.proposal_precision={precision!r}: use one of {', '.join(PROPOSAL_PRECISIONS)}.")
        self.proposal_precision = precision

    def set_loss_vocab(self, ids: torch.Tensor | None) -> None:
        """Train the proposal slots among ``ids`` only (``heads.proposal_vocab``): their logits in
        ``slot_logits`` cover ``ids`` (index i is token ``ids[i]``), which saves most of a slot's cost when
        ``ids`` is a small share of a large vocabulary. None: the whole vocabulary."""
        self.loss_ids = self._token_ids(ids)

    def slot_projection(self, x: torch.Tensor) -> torch.Tensor:
        """A proposal slot's logits for training: over ``loss_ids`` when set, else the whole vocabulary."""
        return self.project_among(x, self.loss_ids)

    def proposal_top1(self, x: torch.Tensor) -> torch.Tensor:
        """Proposed token ids: argmax over the allowed proposal vocabulary."""
        best, ids = top1(self.proposal_logits(x)), self.proposal_ids
        return best if ids is None else ids[best]

    def proposal_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (..., P) over the proposal vocabulary (``set_proposal_vocab``; P = V when unrestricted):
        index i is token ``proposal_ids[i]``. Tree decoding ranks candidates by them."""
        if fastpath.applies(self.output.weight):
            wt, b = fastpath.proposal_projection(self)
            return x @ wt if b is None else x @ wt + b
        return self.project_among(x, self.proposal_ids)

    def propose(self, h: torch.Tensor, first: torch.Tensor, k: int, source: Source | None = None) -> torch.Tensor:
        """Proposal tokens of slots 1..k-1 (B, k-1) at one position ``h`` (B, d), given p_1's argmax
        ``first`` (B, 1): each slot's state projected once."""
        return self.proposal_top1(self.states(h, k, start=1, source=source))
