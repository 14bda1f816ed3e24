"""What a task is to the stages: everything that differs between translation and super-resolution, behind
one small interface, so that training, distillation, evaluation and the benchmark are written once.

A task holds its encoded splits as (source ids, target ids) pairs and knows how to build its model, how
long an output may be, how to score and write outputs, and what to add to rows and W&B. To add a task kind,
register it with its config (``bpd/config/task.py``) and subclass ``Task`` naming that ``kind`` in a module of
``bpd/tasks/``: ``bpd.tasks.TASKS`` finds it there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch

from bpd.config import SPLITS, DecodeConfig, HeadsConfig, ModelConfig, TrainConfig, cache_key, keyed
from bpd.data.batches import batch_iterator, make_batches
from bpd.data.store import ArrayPairs, ListPairs, PairStore
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import Passes, RunOutput, decode_and_time
from bpd.tracking import Tracker
from bpd.training.checkpoint import CheckpointError

#: A split's (source ids, target ids) pairs: a memory-mapped token store, or arrays / lists with its interface.
Pairs = PairStore | ArrayPairs | ListPairs
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class Scorer(Protocol):
    """A split's quality measure (BLEU, PSNR) and the writer of its outputs to files."""

    def score(self, tokens: list[list[int]], greedy_tokens: list[list[int]]) -> dict[str, Any]: ...

    def write(self, tokens: list[list[int]], stem: Path) -> dict[str, str]: ...


class Task:
    kind = "task"
    quality = "quality"  # the row column of the scorer's main metric
    #: How many dev examples the heads stage decodes with the base model to track per-head agreement with it
    #: (None: all of them).
    dev_outputs_sample: int | None = None

    def __init__(self, name: str, key: str, vocab_size: int, splits: dict[str, Pairs],
                 pad_id: int, bos_id: int, eos_id: int) -> None:
        self.name, self.key, self.vocab_size = name, key, vocab_size  # key: hash of the data config
        self.splits = splits
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id

    # -- data ----------------------------------------------------------------------------------------------
    def pairs(self, split: str) -> Pairs:
        """A split's pairs (``len``, ``src(i)``, ``tgt(i)``, ``pair(i)``, ``sources()``, the lengths arrays)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; use train, dev or test.")
        return self.splits[split]

    def train_batches(self, pairs: Pairs, max_tokens: int, seed: int, rank: int = 0, world_size: int = 1,
                      workers: int = 0, pin_memory: bool = False) -> Callable[[int, int], Iterator[Batch]]:
        """``batches(epoch, start)``: this rank's shuffled token-bucket batches of an epoch from index
        ``start`` on (a pure function of the seed and the epoch, which is what makes resume exact), collated
        by ``workers`` DataLoader processes (0: in this process)."""

        def batches(epoch: int, start: int = 0) -> Iterator[Batch]:
            order = make_batches(pairs.src_lengths, pairs.tgt_lengths, max_tokens, shuffle=True, seed=seed + epoch,
                                 rank=rank, world_size=world_size)
            return batch_iterator(pairs, order, self.pad_id, self.bos_id, start, workers, pin_memory)

        return batches

    def eval_batches(self, pairs: Pairs, max_tokens: int) -> Callable[[], Iterator[Batch]]:
        order = make_batches(pairs.src_lengths, pairs.tgt_lengths, max_tokens, shuffle=False)
        return lambda: batch_iterator(pairs, order, self.pad_id, self.bos_id)

    def fingerprint(self) -> str:
        """A content hash of the data (and tokenizer) as the model sees it: a shipped model trained on other
        data is refused (``bpd.shipped``)."""
        raise NotImplementedError

    # -- models --------------------------------------------------------------------------------------------
    def build_model(self, model: ModelConfig, heads: HeadsConfig, k: int, seed: int):
        """A fresh model with ``k`` slots (k = 1: the base model) of ``heads``' architecture."""
        raise NotImplementedError

    def fit_before_base(self, model, train: TrainConfig, seed: int) -> None:
        """What a fresh base model fits before its first training step (none here; images: a learned upsampler)."""

    def check_model(self, model, path: Path) -> None:
        """A checkpoint trained with another vocabulary would decode garbage: refuse it with the fix."""
        v = model.cfg.vocab_size
        if v != self.vocab_size:
            raise CheckpointError(
                f"checkpoint {path} was trained with a vocabulary of {v} but task {self.name} has "
                f"{self.vocab_size}; use the same task.vocab_size (and data) or retrain the checkpoint."
            )

    # -- decoding ------------------------------------------------------------------------------------------
    #: Options of the acceptance criteria that depend on the vocabulary (the distance criterion's ordinals).
    criterion_kwargs: dict[str, Any] = {}

    def max_len(self, decode: DecodeConfig) -> Callable[[torch.Tensor], int]:
        """The output length limit of a padded source batch."""
        raise NotImplementedError

    def proposal_vocab(self, n: int | None) -> torch.Tensor | None:
        """The token ids ``decode.proposal_vocab = n`` lets the heads propose (None: all of them)."""
        if n is not None:
            raise ValueError(f"decode.proposal_vocab={n} is not supported by {self.kind} tasks; set it to null.")
        return None

    # -- evaluation outputs --------------------------------------------------------------------------------
    def detokenize(self, tokens: list[int]) -> str:
        """An output as text (translation: the sentence; images: the intensities)."""
        return " ".join(map(str, tokens))

    def scorer(self, split: str, n: int, first: int = 0) -> Scorer:
        """The scorer of ``n`` examples of ``split`` from its ``first``."""
        raise NotImplementedError

    def dev_score(self, model, decode: DecodeConfig, n: int | None = None, split: str = "dev",
                  batch_size: int = 32, device: str | torch.device = "cpu") -> dict[str, float]:
        """Greedy quality of the first ``n`` examples of ``split`` ({quality: value}, e.g. BLEU): the learning
        curve a training stage records every ``train.score_every`` steps."""
        pairs = self.pairs(split)
        n = len(pairs) if n is None else min(n, len(pairs))
        was_training = model.training
        model.eval()
        try:
            out = decode_and_time(model, pairs.sources(range(n)), [DecodeSpec("greedy")], self.max_len(decode),
                                  batch_size=batch_size, device=device,
                                  passes=Passes(warmup=0, progress=False))["greedy"]
        finally:
            model.train(was_training)
        return {self.quality: float(self.scorer(split, n).score(out.tokens, out.tokens)[self.quality])}

    def extra_rows(self, scorer: Scorer, outs: dict[str, RunOutput], specs: list[DecodeSpec],
                   rows: list[dict[str, Any]], common: dict[str, Any], out_dir: Path) -> list[dict[str, Any]]:
        """Rows (and row columns) beyond one per decoder: e.g. upsampling references, a figure's file."""
        return []

    def log_outputs(self, tracker: Tracker, scorer: Scorer, outs: dict[str, RunOutput], specs: list[DecodeSpec],
                    pairs: Pairs, out_dir: Path) -> None:
        """Samples for W&B (translations with accepted blocks marked, an image grid)."""


class Corpus:
    """How a task gets one corpus registered in ``bpd/config/corpora.py`` (``task.source``): one subclass per
    corpus, naming its ``source``, in its task kind's module (a plugin's in the module its entry names), where
    that module's ``CORPORA`` finds it and pairs it with its registration."""

    source: ClassVar[str]

    def prepare(self, cfg: Any, options: Any, data_cache: Path) -> Any:
        """What its task reads (a translation corpus: its ``{train,dev,test}.{src,tgt}`` folder; an image corpus:
        (low, high)-resolution uint8 arrays per split), built or found under ``data_cache`` from the task's config
        and the corpus's own options (``task.corpora.<source>``; None for a corpus without options)."""
        raise NotImplementedError

    def content_key(self, cfg: Any, options: Any, data_cache: Path, prepared: Any) -> str | None:
        """A hash of the corpus's content, for a corpus that the same options may build differently (the task's
        key adds it, so no model trained on one build is reused on another); None when the options determine
        it. ``prepared``: what ``prepare`` returned."""
        return None


def heads_options(heads: HeadsConfig) -> dict[str, Any]:
    """The model options a ``HeadsConfig`` sets (the heads' architecture, p_1, their hidden size, tying)."""
    opts: dict[str, Any] = {"heads_arch": heads.arch, "identity_p1": heads.identity_p1}
    if heads.d_ff:
        opts["heads_d_ff"] = heads.d_ff
    if heads.tie_slots:
        opts["heads_tied"] = True
    if heads.ahead:
        opts["heads_ahead"] = True
    return opts


def task_key(cfg: Any, content: str | None) -> str:
    """The key of a task's data: the options it sets, and its corpus's content key where the options do not
    determine the corpus (``Corpus.content_key``)."""
    return cache_key(keyed(cfg), *([content] if content is not None else []))
