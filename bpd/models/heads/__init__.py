"""Proposal heads, one module per architecture (see ``base.py`` for what they share).

* ``paper``: Stern et al.'s single feed-forward layer over all k slots (quadratic in k),
* ``blockdiag``: one independent feed-forward layer per slot,
* ``medusa``: one residual SiLU layer per slot (Cai et al. 2024),
* ``recurrent``: each slot also reads the previous slot's token (Hydra / ReDrafter style),
* ``attend``: recurrent slots that also attend to the input through the base's cross-attention keys and
  values (EAGLE / Hydra++ style; ``source.py``).

A new architecture is its entry in ``bpd/config/heads.py`` (its name; ``chained`` if its slots run one after
another) and a module here with a subclass of ``ProposalHeads`` naming that ``arch`` and defining
``learned_states`` (and, if its slots depend on each other, ``states``, ``slot_logits`` and ``propose``): the
classes are found here (a plugin's in the module its entry names) and paired with the registry's entries, none
listed.
"""

from __future__ import annotations

from torch import nn

from bpd.config.registry import implementations, kept
from bpd.models.heads.attend import AttendHeads
from bpd.models.heads.base import ProposalHeads
from bpd.models.heads.blockdiag import BlockDiagHeads
from bpd.models.heads.medusa import MedusaHeads
from bpd.models.heads.paper import PaperHeads
from bpd.models.heads.recurrent import RecurrentHeads
from bpd.models.heads.source import Ahead, Source

#: Each architecture by ``heads.arch`` (``kept``: with a plugin loaded later, its architectures too).
HEADS: dict[str, type[ProposalHeads]] = kept(lambda: implementations("head", __name__, ProposalHeads, "arch"))


def build_heads(
    arch: str, d_model: int, d_ff: int, k: int, output: nn.Linear, identity_p1: bool = True, tie_slots: bool = False,
    ahead: bool = False,
) -> ProposalHeads:
    if arch not in HEADS:
        raise ValueError(f"unknown head architecture {arch!r}; choose one of {', '.join(HEADS)}.")
    return HEADS[arch](d_model, d_ff, k, output, identity_p1, tie_slots, ahead)


__all__ = ["HEADS", "Ahead", "AttendHeads", "BlockDiagHeads", "MedusaHeads", "PaperHeads", "ProposalHeads",
           "RecurrentHeads", "Source", "build_heads"]
