"""The proposal-head architectures (``heads.arch``) by name, as ``bpd.config.registry`` holds them: each one's
implementation is a module of ``bpd/models/heads/`` (its ``ProposalHeads`` subclass names its ``arch``), paired
with its entry here when the models load. None takes options of its own yet (``heads.*`` applies to every
architecture)."""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config.registry import entries, register


@dataclass(frozen=True)
class HeadInfo:
    #: Slots run one after another, each reading the previous slot's token: slot 1 reads p_1's (so p_1 must
    #: be the base model's own), and one set of slot weights can serve every slot (``heads.tie_slots``).
    chained: bool = False


register("head", "paper", info=HeadInfo())  # Stern et al.: one FFN over all slots
register("head", "blockdiag", info=HeadInfo())  # an FFN per slot
register("head", "medusa", info=HeadInfo())  # a residual SiLU layer per slot (Cai et al. 2024)
register("head", "recurrent", info=HeadInfo(chained=True))  # ours, after Hydra heads and ReDrafter
register("head", "attend", info=HeadInfo(chained=True))  # recurrent slots that also read the source (EAGLE, Hydra++)


def chained_archs() -> tuple[str, ...]:
    """The architectures whose slots run one after another."""
    return tuple(name for name, e in entries("head").items() if e.info.chained)
