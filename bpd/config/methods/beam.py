"""Beam search (``decode.methods.beam``): the quality reference of an evaluation; the benchmark skips it."""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config.common import check
from bpd.config.methods import Role, declare


@dataclass
class BeamOptions:
    """Beam search's options: in a config, and as its decoder reads them (``bpd.decoding.methods.beam``)."""

    size: int = 4  # 0: no beam search (a decoder needs >= 1)
    alpha: float = 0.6  # the GNMT length penalty's exponent

    def validate(self, where: str) -> None:
        check(self.size >= 0, f"{where}.size must be >= 0 (0 = no beam search; got {self.size}).")


declare("beam", Role.BASELINE, "beam search", 20, options=BeamOptions, bench_default=lambda: BeamOptions(size=0))
