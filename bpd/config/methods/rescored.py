"""The rescored chain (``decode.methods.rescored``: its lattices): the chain's block chosen from the heads' best
candidates by an n-gram model of the training targets, which the method fits itself."""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config.common import check
from bpd.config.methods import Role, declare


@dataclass
class RescoreConfig:
    """One lattice: the heads' ``beam`` best candidates per depth, scored by log p_heads + ``weight`` *
    log p_bigram."""

    beam: int = 4
    weight: float = 0.5


def check_rescore(lattices: list[RescoreConfig], where: str) -> None:
    for r in lattices:
        check(r.beam >= 1 and r.weight >= 0,
              f"{where} needs beam >= 1 and weight >= 0 (got beam={r.beam}, weight={r.weight}).")


declare("rescored", Role.BEYOND, "rescored chain", 50, options=list[RescoreConfig], default=list,
        check=check_rescore, auxiliary=True)
