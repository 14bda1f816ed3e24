"""Greedy decoding with a key/value cache (the strong baseline), and a naive no-cache variant.

The naive variant recomputes the whole decoder prefix at every step, as the paper's reference
implementation did; the benchmark reports it only to show how much a weak baseline would inflate a
blockwise speedup. Both are rounds of one token for ``bpd.decoding.loop.decode_rounds``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bpd.decoding.common import top1
from bpd.decoding.engine import checked_engine, engine_for
from bpd.decoding.loop import Accepted, Batch, Rounds, RowState, decode_rounds
from bpd.decoding.method import NOTHING, Method, Options, Plan, Prepared
from bpd.decoding.result import DecodeResult


@dataclass
class Step(RowState):
    """What the next greedy step reads: the last token (cached) or the whole prefix so far (naive)."""

    tokens: torch.Tensor


class GreedyRounds(Rounds):
    """Argmax of p_1 one token at a time; ``cached``: read the last token against the KV cache, else re-run
    the whole prefix (no cache)."""

    def __init__(self, cached: bool = True) -> None:
        self.cached = cached
        self.room = 1 if cached else None

    def start(self, model, batch: Batch) -> Step:
        return Step(batch.bos)

    def round(self, model, batch: Batch, state: Step) -> tuple[Step, Accepted]:
        h = model.decode(state.tokens, batch.enc, batch.cache)
        nxt = top1(model.heads.base_logits(h[:, -1]))
        following = nxt[:, None] if self.cached else torch.cat([state.tokens, nxt[:, None]], dim=1)
        return Step(following), ([[tok] for tok in nxt.tolist()], None)


@torch.inference_mode()
def greedy_decode(model, src: torch.Tensor, max_len: int | None = None, engine: str = "eager") -> DecodeResult:
    """Argmax of p_1 one token at a time, reusing the encoder output and the decoder's KV cache; ``engine``:
    the eager loop, or the static path's fixed-shape step (``bpd.decoding.engine``: static, compiled)."""
    if checked_engine(engine) != "eager":
        return engine_for(model, engine).greedy(src, max_len)
    return decode_rounds(model, src, max_len, GreedyRounds())


@torch.inference_mode()
def naive_greedy_decode(model, src: torch.Tensor, max_len: int | None = None) -> DecodeResult:
    """Greedy without a decoder cache: the whole prefix is re-run at every step (weak baseline)."""
    return decode_rounds(model, src, max_len, GreedyRounds(cached=False))


class Greedy(Method):
    name = "greedy"

    def sweep(self, plan: Plan, asked: None) -> list[Options]:
        return [Options()]  # always: every ratio's reference

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: Options, run: Prepared = NOTHING
               ) -> DecodeResult:
        return greedy_decode(model, src, max_len=max_len, engine=o.engine)

    def step_cost_key(self, o: Options) -> str:
        return "t1"


class NaiveGreedy(Method):
    name = "naive_greedy"

    def sweep(self, plan: Plan, asked: bool) -> list[Options]:
        return [Options()] if asked else []

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: Options, run: Prepared = NOTHING
               ) -> DecodeResult:
        return naive_greedy_decode(model, src, max_len=max_len)
