"""Draft rescoring (Kim et al. 2024, "Exploring and Improving Drafts in Blockwise Parallel Decoding"): choose
the block to verify from the heads' top candidates with a language model over the output, not slot by slot.

Each head guesses its slot without seeing what the other slots chose (or, for recurrent heads, only their
own argmax), so a block of individually likely tokens may read badly as a sequence. Here the heads' top
candidates per slot form a lattice (built as a budgeted tree, ``bpd.decoding.tree_build.build_tree``: the ``m``
most probable paths per depth), every full-depth path is scored

    score = log p_heads(path) + weight * log p_ngram(path | the last accepted token)

and the best path is verified as the chain's block. Verification, acceptance and the cache are the
chain's: with exact acceptance the output is greedy's whatever is proposed.

``NgramLM`` is an interpolated bigram model with absolute discounting over token ids, fit on the training
targets (``fit``); it is small (one sorted array of bigram keys) and scores on the device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bpd.config.methods.rescored import RescoreOptions
from bpd.decoding.engine import checked_engine, engine_for
from bpd.decoding.method import NOTHING, Method, Options, Plan, Prepared, Resources, RoundOptions
from bpd.decoding.methods.blockwise import blockwise_decode
from bpd.decoding.result import DecodeResult
from bpd.decoding.tree_build import build_tree
from bpd.decoding.tree_shape import TreeShape


class NgramLM:
    """An interpolated bigram model with absolute discounting:
    p(w | v) = max(c(v, w) - d, 0) / c(v) + d * n(v) / c(v) * p(w), with p(w) the add-one unigram and n(v)
    the number of distinct successors of v; a context never seen falls back to p(w)."""

    def __init__(self, vocab: int, keys: np.ndarray, logp: np.ndarray, backoff: np.ndarray, unigram: np.ndarray):
        self.vocab = vocab
        self.keys = torch.as_tensor(keys, dtype=torch.long)  # prev * vocab + next, sorted
        self.pair_logp = torch.as_tensor(logp, dtype=torch.float32)  # log p(next | prev) of seen pairs
        self.backoff = torch.as_tensor(backoff, dtype=torch.float32)  # log of prev's back-off mass (V,)
        self.unigram = torch.as_tensor(unigram, dtype=torch.float32)  # log p(w) (V,)

    @classmethod
    def fit(cls, sequences: Iterable[list[int]], vocab: int, bos: int, discount: float = 0.75) -> NgramLM:
        """From token sequences (each read as BOS + sequence)."""
        pairs, uni = [], np.ones(vocab, dtype=np.float64)  # add-one unigram
        for seq in sequences:
            s = np.asarray([bos, *seq], dtype=np.int64)
            if len(s) > 1:
                pairs.append(s[:-1] * vocab + s[1:])
            np.add.at(uni, s[1:], 1)
        uni_logp = np.log(uni / uni.sum())
        keys, counts = np.unique(np.concatenate(pairs) if pairs else np.zeros(0, np.int64), return_counts=True)
        prev = keys // vocab
        ctx = np.bincount(prev, weights=counts, minlength=vocab)
        succ = np.bincount(prev, minlength=vocab)
        mass = np.where(ctx > 0, discount * succ / np.maximum(ctx, 1), 1.0)  # back-off mass per context
        p = (np.maximum(counts - discount, 0) / ctx[prev]) + mass[prev] * np.exp(uni_logp[keys % vocab])
        return cls(vocab, keys, np.log(p), np.log(mass), uni_logp)

    @classmethod
    def fit_pairs(cls, pairs, vocab: int, bos: int, limit: int = 1_000_000) -> NgramLM:
        """From the targets of a task's training pairs (the first ``limit`` of them: a bigram model is
        saturated long before WMT14's 4.5M)."""
        return cls.fit((pairs.tgt(i).tolist() for i in range(min(len(pairs), limit))), vocab, bos)

    def to(self, device: torch.device) -> NgramLM:
        for name in ("keys", "pair_logp", "backoff", "unigram"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def logp(self, prev: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor:
        """log p(nxt | prev), elementwise over tensors of one shape."""
        q = prev.clamp(0, self.vocab - 1) * self.vocab + nxt.clamp(0, self.vocab - 1)
        if self.keys.numel() == 0:
            return self.unigram[nxt.clamp(0, self.vocab - 1)]
        i = torch.searchsorted(self.keys, q).clamp(max=self.keys.numel() - 1)
        seen = self.keys[i] == q
        unseen = self.backoff[prev.clamp(0, self.vocab - 1)] + self.unigram[nxt.clamp(0, self.vocab - 1)]
        return torch.where(seen, self.pair_logp[i], unseen)


@dataclass
class Rescorer:
    """Proposes the chain's block from a rescored lattice: ``beam`` candidates per depth, the n-gram model's
    log-probability weighted by ``weight`` (0: the heads' most probable path)."""

    lm: NgramLM
    beam: int = 4
    weight: float = 0.5

    def __call__(self, model, h_last: torch.Tensor, first: torch.Tensor, k: int, prev: torch.Tensor,
                 enc=None) -> torch.Tensor:
        """The block (B, k) to verify: ``first`` (B, 1) is p_1's argmax, ``prev`` (B, 1) the token before it,
        ``enc`` the rows' encoder state (heads that attend to the input read it)."""
        if k == 1:
            return first
        tree = build_tree(model, h_last, first, TreeShape.budget(self.beam, k - 1), enc)
        return rescored_block(self.lm, self.weight, tree, first, prev, k)


def rescored_block(lm: NgramLM, weight: float, tree, first: torch.Tensor, prev: torch.Tensor, k: int) -> torch.Tensor:
    """The block (B, k) from a budgeted lattice ``tree`` (``tree_build.Tree``, k - 1 deep, ``beam`` nodes a level)
    rooted at ``first`` (B, 1): the full-depth path of the best log p_heads + ``weight`` * log p_ngram, the n-gram
    model ``lm`` reading the root after ``prev`` (B, 1), the last accepted token. The eager and the static paths'
    rescoring (``bpd.decoding.static_rescore``)."""
    beam = (tree.tokens.shape[1] - 1) // (k - 1)
    lm_step = lm.logp(tree.tokens.gather(1, tree.parent), tree.tokens)  # each node given its parent
    lm_step[:, 0] = lm.logp(prev[:, 0], tree.tokens[:, 0])  # the root given the last accepted token
    n = tree.tokens.shape[1]
    lm_cum = lm_step.clone()
    for i in range(1, n):  # depth order: parents first
        lm_cum[:, i] += lm_cum.gather(1, tree.parent[:, i : i + 1])[:, 0]
    leaves = slice(n - beam, n)  # the deepest level (every level holds ``beam`` nodes)
    score = tree.logp[:, leaves] + weight * lm_cum[:, leaves]
    node = score.argmax(dim=1) + (n - beam)  # (B,)
    path = [node]
    for _ in range(k - 2):
        path.append(tree.parent.gather(1, path[-1][:, None])[:, 0])
    path.reverse()
    return torch.cat([first, tree.tokens.gather(1, torch.stack(path, dim=1))], dim=1)


class Rescored(Method):
    """The chain, with its block chosen from the heads' lattice by the n-gram model (``Rescorer``); a decoder's
    lattice is a ``RescoreOptions`` (``o.rescored``), one of those a config lists."""

    name = "rescored"
    own_columns = ("rescore_beam", "rescore_weight")

    def columns(self, o: RoundOptions) -> dict[str, Any]:
        return o.columns() | {"rescore_beam": o.rescored.beam, "rescore_weight": o.rescored.weight}

    def decoder_name(self, o: RoundOptions) -> str:
        return f"rescored_b{o.rescored.beam}_w{o.rescored.weight:g}_k{o.k}_{o.criterion_suffix}"

    def sweep(self, plan: Plan, asked: list[RescoreOptions]) -> list[Options]:
        """Every lattice asked x criterion x k >= 2."""
        return [self.options(k, c.name, c.param, rescored=r) for r in asked for c in plan.criteria
                for k in plan.round_ks]

    def prepare(self, task, model, resources: Resources) -> NgramLM:
        """The bigram model of the task's training targets, on the run's device."""
        return NgramLM.fit_pairs(task.pairs("train"), model.cfg.vocab_size, model.bos_id).to(resources.device)

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: RoundOptions, run: Prepared = NOTHING
               ) -> DecodeResult:
        lm = self.built(run, o, "an n-gram model of the training targets (bpd.decoding.methods.rescore: "
                                   "Rescored.prepare fits it).")
        criterion = o.criterion_for(run.criterion_kwargs)
        if checked_engine(o.engine) != "eager":  # (imported here: the static round imports this module)
            from bpd.decoding.static_rescore import rescored_decode_static

            return rescored_decode_static(engine_for(model, o.engine), src, o.k, criterion, lm, o.rescored.beam,
                                          o.rescored.weight, max_len)
        return blockwise_decode(model, src, k=o.k, criterion=criterion, max_len=max_len,
                                proposer=Rescorer(lm, o.rescored.beam, o.rescored.weight))
