"""The rescored chain (``decode.methods.rescored``: its lattices): the chain's block chosen from the heads' best
candidates by an n-gram model of the training targets, which the method fits itself."""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config.common import ENGINES, check
from bpd.config.methods import Role, declare


@dataclass
class RescoreOptions:
    """One lattice: the heads' ``beam`` best candidates per depth, scored by log p_heads + ``weight`` *
    log p_bigram. A config lists them (each one's decoders at every k >= 2 and criterion); a decoder reads one."""

    beam: int = 4
    weight: float = 0.5

    def validate(self, where: str) -> None:
        check(self.beam >= 1 and self.weight >= 0,
              f"{where} needs beam >= 1 and weight >= 0 (got beam={self.beam}, weight={self.weight}).")


declare("rescored", Role.BEYOND, "rescored chain", 50, options=list[RescoreOptions], auxiliary=True, exact=True,
        engines=ENGINES)
