"""Beam search (``decode.methods.beam``): the quality reference of an evaluation; the benchmark skips it."""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config.common import check
from bpd.config.methods import Role, declare


@dataclass
class BeamConfig:
    size: int = 4  # 0: no beam search
    alpha: float = 0.6  # the GNMT length penalty's exponent


def check_beam(beam: BeamConfig, where: str) -> None:
    check(beam.size >= 0, f"{where}.size must be >= 0 (0 = no beam search; got {beam.size}).")


declare("beam", Role.BASELINE, "beam search", 20, options=BeamConfig, default=BeamConfig,
        bench_default=lambda: BeamConfig(size=0), check=check_beam)
