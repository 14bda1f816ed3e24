"""``toy_bigram``'s decoder: the chain, its blocks drafted by a bigram table of the training targets (each token's
most frequent successor) instead of by the heads. The table is an auxiliary model the method builds itself
(``prepare``, from the task's training pairs), as the rescored chain fits its n-gram model; verification is the
chain's, so with exact acceptance the output is greedy's."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from bpd.decoding.method import NOTHING, Method, Options, Plan, Prepared, Resources, RoundOptions
from bpd.decoding.methods.blockwise import blockwise_decode
from bpd.decoding.result import DecodeResult


@dataclass(frozen=True)
class Bigram:
    """Each token's most frequent successor (V,) and how often it followed the token (V,)."""

    successor: torch.Tensor
    count: torch.Tensor

    @classmethod
    def fit(cls, sequences: Iterable[list[int]], vocab: int, bos: int) -> Bigram:
        """From token sequences, each read as BOS + sequence (a dense V x V count: a toy's vocabulary)."""
        counts = torch.zeros(vocab * vocab, dtype=torch.long)
        for seq in sequences:
            s = torch.tensor([bos, *seq], dtype=torch.long)
            counts.index_add_(0, s[:-1] * vocab + s[1:], torch.ones(len(s) - 1, dtype=torch.long))
        count, successor = counts.view(vocab, vocab).max(dim=1)
        return cls(successor, count)

    def to(self, device: torch.device) -> Bigram:
        return Bigram(self.successor.to(device), self.count.to(device))

    def table(self, min_count: int) -> torch.Tensor:
        """What each token drafts next: its successor, or itself where that followed it fewer than ``min_count``
        times."""
        return torch.where(self.count >= min_count, self.successor, torch.arange(len(self.count),
                                                                                  device=self.count.device))


class BigramChain(Method):
    """Its options are the plugin's ``BigramOptions`` (``o.toy_bigram``), as a config asks for them."""

    name = "toy_bigram"
    own_columns = ("bigram_min_count",)

    def columns(self, o: RoundOptions) -> dict[str, Any]:
        return o.columns() | {"bigram_min_count": o.toy_bigram.min_count}

    def decoder_name(self, o: RoundOptions) -> str:
        return f"toy_bigram_m{o.toy_bigram.min_count}_k{o.k}_{o.criterion_suffix}"

    def sweep(self, plan: Plan, asked: Any) -> list[Options]:
        """Every criterion x k >= 2, when ``decode.methods.toy_bigram.on``."""
        if not asked.on:
            return []
        return [self.options(k, c.name, c.param, toy_bigram=asked) for c in plan.criteria for k in plan.round_ks]

    def prepare(self, task, model, resources: Resources) -> Bigram:
        train = task.pairs("train")
        return Bigram.fit((train.tgt(i).tolist() for i in range(len(train))), model.cfg.vocab_size,
                          model.bos_id).to(resources.device)

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: RoundOptions, run: Prepared = NOTHING
               ) -> DecodeResult:
        bigram = self.built(run, o, "the bigram table of the training targets (BigramChain.prepare builds it).")
        table = bigram.table(o.toy_bigram.min_count)

        def draft(model, h_last: torch.Tensor, first: torch.Tensor, k: int, prev: torch.Tensor, enc=None
                  ) -> torch.Tensor:
            block = [first]
            for _ in range(k - 1):
                block.append(table[block[-1]])
            return torch.cat(block, dim=1)

        return blockwise_decode(model, src, k=o.k, criterion=o.criterion_for(run.criterion_kwargs),
                                max_len=max_len, proposer=draft)
