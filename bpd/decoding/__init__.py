"""Decoders, one module per method in ``methods/`` behind a registry (``registry.METHODS``: greedy, naive greedy,
beam, blockwise chain, tree verification, rescored chain, draft model), the decode loop they share (``loop``),
acceptance criteria, the common result type, and the timed side-by-side runner that evaluation and the benchmark
share."""

from bpd.decoding import criteria
from bpd.decoding.criteria import Distance, Exact, TopK, make_criterion
from bpd.decoding.methods.beam import beam_decode
from bpd.decoding.methods.blockwise import blockwise_decode
from bpd.decoding.methods.greedy import greedy_decode, naive_greedy_decode
from bpd.decoding.result import DecodeResult

__all__ = [
    "DecodeResult",
    "Distance",
    "Exact",
    "TopK",
    "beam_decode",
    "blockwise_decode",
    "criteria",
    "greedy_decode",
    "make_criterion",
    "naive_greedy_decode",
]
