"""Translation: a parallel corpus (the embedded ding sentences, WMT14, or any folder) with a joint
sentencepiece vocabulary, scored by detokenized sacreBLEU."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bpd.config import (
    SPLITS,
    DecodeConfig,
    HeadsConfig,
    ModelConfig,
    TranslationTaskConfig,
    split_parts,
)
from bpd.config.common import config_hash
from bpd.config.methods import Role
from bpd.config.registry import implementations, kept
from bpd.config.task import corpora as kind_corpora
from bpd.data.store import StoreEncoding, build_store, file_hash
from bpd.data.tokenizer import Tokenizer, install_tokenizer
from bpd.data.translation import directed_name, prepare_wmt14
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import RunOutput
from bpd.metrics import bleu
from bpd.models import build_translation_model
from bpd.tasks.base import Corpus, Pairs, Task, heads_options, task_key
from bpd.tracking import Tracker
from corpora.debian import DebianOptions
from corpora.debian.build import HeldOut, corpus_hash, prepare_debian
from corpora.ding import prepare_ding

WMT14_LAYOUT = "train.{en,de}, newstest2013.{en,de}, newstest2014.{en,de}"


class TranslationCorpus(Corpus):
    """A translation corpus (``Corpus``): ``prepare`` gives its ``{train,dev,test}.{src,tgt}`` folder."""

    directed = True  # its pairs have a direction to name (a folder's src and tgt files are what they are)

    def prepare(self, cfg: TranslationTaskConfig, options: Any, data_cache: Path) -> Path:
        raise NotImplementedError


class DingCorpus(TranslationCorpus):
    source = "ding"

    def prepare(self, cfg: TranslationTaskConfig, options: Any, data_cache: Path) -> Path:
        return prepare_ding(data_cache, ding_path=options.path, direction=cfg.direction,
                            include_phrases=options.include_phrases, tag_phrases=options.tag_phrases,
                            sentence_repeat=options.sentence_repeat, n_dev=cfg.n_dev, n_test=cfg.n_test)


class DebianCorpus(TranslationCorpus):
    source = "debian"

    def prepare(self, cfg: TranslationTaskConfig, options: DebianOptions, data_cache: Path) -> Path:
        """Its options (``task.corpora.debian``) as they are, with the task's direction and held-out sizes."""
        return prepare_debian(data_cache, options, HeldOut(cfg.direction, cfg.n_dev, cfg.n_test))

    def content_key(self, cfg: TranslationTaskConfig, options: Any, data_cache: Path, prepared: Path) -> str | None:
        # The same options build another corpus after a format change or a point release: the corpus's own hash
        # keys the stores and every model trained on them, so no run resumes on a different corpus.
        return corpus_hash(prepared)


class Wmt14Corpus(TranslationCorpus):
    source = "wmt14"

    def prepare(self, cfg: TranslationTaskConfig, options: Any, data_cache: Path) -> Path:
        if not cfg.data_dir:
            raise FileNotFoundError(
                f"task wmt14_en_de needs task.data_dir=/path/to/wmt14 ({WMT14_LAYOUT}); see docs/data.md.")
        return prepare_wmt14(Path(cfg.data_dir), direction=cfg.direction, cache_dir=data_cache)


class FolderCorpus(TranslationCorpus):
    source = "folder"
    directed = False

    def prepare(self, cfg: TranslationTaskConfig, options: Any, data_cache: Path) -> Path:
        folder = Path(cfg.data_dir or "")
        missing = [f"{s}.{x}" for s in SPLITS for x in ("src", "tgt") if not (folder / f"{s}.{x}").exists()]
        if not cfg.data_dir or missing:
            raise FileNotFoundError(
                f"task folder needs task.data_dir with train/dev/test .src/.tgt files (missing in {folder}: "
                f"{', '.join(missing) or 'data_dir'}); point task.data_dir at such a folder.")
        return folder


#: Each translation corpus by ``task.source``, paired with its registration.
CORPORA: dict[str, TranslationCorpus] = kept(lambda: {
    name: c() for name, c in implementations("corpus", __name__, TranslationCorpus, "source",
                                             kind_corpora("translation")).items()})


def corpus_folder(cfg: TranslationTaskConfig, data_cache: Path) -> Path:
    """The task's corpus folder, prepared (or found in the cache) by its corpus."""
    return CORPORA[cfg.source].prepare(cfg, getattr(cfg.corpora, cfg.source, None), data_cache)


class TranslationScorer:
    def __init__(self, tok: Tokenizer, refs: list[str]) -> None:
        self.tok, self.refs = tok, refs

    def detok(self, tokens: list[list[int]]) -> list[str]:
        return [self.tok.decode(t) for t in tokens]

    def score(self, tokens, greedy_tokens) -> dict[str, Any]:
        b, sig = bleu(self.detok(tokens), self.refs)
        return {"bleu": b, "bleu_signature": sig}

    def write(self, tokens, stem: Path) -> dict[str, str]:
        stem.parent.mkdir(parents=True, exist_ok=True)
        hyp, ref = stem.with_suffix(".hyp.txt"), stem.parent / "ref.txt"
        hyp.write_text("\n".join(self.detok(tokens)) + "\n", encoding="utf-8")
        if not ref.exists():
            ref.write_text("\n".join(self.refs) + "\n", encoding="utf-8")
        return {"hyp_file": str(hyp), "ref_file": str(ref)}


class TranslationTask(Task):
    kind = "translation"
    quality = "bleu"

    def __init__(self, cfg: TranslationTaskConfig, data_cache: Path, shipped_dir: str | Path | None = None) -> None:
        """``shipped_dir``: where shipped tokenizers are looked for (``bpd.data.tokenizer.install_tokenizer``); None
        learns every tokenizer here."""
        folder = corpus_folder(cfg, data_cache)
        for split in ("dev", "test"):  # before any training: an empty test set would only fail at scoring
            if not (folder / f"{split}.src").stat().st_size:
                raise ValueError(f"the {split} set {folder / f'{split}.src'} is empty; every split needs "
                                 "sentence pairs (see docs/data.md).")
        content = CORPORA[cfg.source].content_key(cfg, getattr(cfg.corpora, cfg.source, None), data_cache, folder)
        # The name a tokenizer learned from this corpus ships under (``bpd.data.tokenizer.tokenizer_file``): only
        # a corpus with a content key (the Debian corpus) can name the text it was learned from.
        self.tokenizer_corpus = f"{cfg.name}_{content}" if content is not None else None
        if self.tokenizer_corpus is not None and shipped_dir is not None:
            install_tokenizer(folder / f"spm{cfg.vocab_size}.model", Path(shipped_dir), self.tokenizer_corpus,
                              cfg.vocab_size)
        # The tokenizer learns from a fixed-seed sample of the training text (sentencepiece's own sampling).
        tok = Tokenizer.train([folder / "train.src", folder / "train.tgt"], folder / f"spm{cfg.vocab_size}",
                              cfg.vocab_size, seed=0)
        key = task_key(cfg, content)
        encoding = StoreEncoding(tok.encode_batch, tok.eos_id, tok.vocab_size, tok.content_hash())
        splits = {}
        for split in SPLITS:
            # Training pairs are cut to max_len; dev and test lines are all kept whole (BLEU is measured on
            # the whole file), long ones decoded with the proportionally longer output limit.
            train = split == "train"
            splits[split] = build_store(
                data_cache / "stores" / f"{cfg.name}_{key}_{split}.store", folder / f"{split}.src",
                folder / f"{split}.tgt", encoding, max_len=cfg.max_len if train else None, keep_all=not train,
            )
        self.folder = folder
        # utf-8-sig: a byte-order mark opening the file is not part of the first reference (as in the store).
        self.refs = {s: (folder / f"{s}.tgt").read_text(encoding="utf-8-sig").split("\n")[: len(splits[s])]
                     for s in ("dev", "test")}
        # A folder's pairs have no direction to name: its src and tgt files are what they are.
        name = directed_name(cfg.name, cfg.direction) if CORPORA[cfg.source].directed else cfg.name
        super().__init__(name, key, tok.vocab_size, splits, tok.pad_id, tok.bos_id, tok.eos_id)
        self.cfg, self.tokenizer, self.data_cache = cfg, tok, data_cache
        self.others: dict[str, tuple[Pairs, list[str]]] = {}  # other corpora's held-out sets, once read

    def pairs(self, split: str) -> Pairs:
        """A split's pairs; ``<corpus>:<split>`` (``ding:test``) is another corpus's held-out set (``other``)."""
        return self.other(split)[0] if split_parts(split)[0] else super().pairs(split)

    def other(self, split: str) -> tuple[Pairs, list[str]]:
        """Another corpus's held-out sentences and references (``decode.split=ding:test``), encoded with this
        task's tokenizer: an out-of-domain test set for a model trained here. The corpus is built (or found
        in the cache) with its defaults and this task's direction; its store is cached beside this task's, keyed
        by this task's data and the two files' contents."""
        if split not in self.others:
            corpus, name = split_parts(split)
            folder = corpus_folder(TranslationTaskConfig(name=f"{corpus}_en_de", source=corpus,
                                                         direction=self.cfg.direction), self.data_cache)
            src, tgt = folder / f"{name}.src", folder / f"{name}.tgt"
            key = config_hash(self.key, split, file_hash(src), file_hash(tgt))
            tok = self.tokenizer
            encoding = StoreEncoding(tok.encode_batch, tok.eos_id, tok.vocab_size, tok.content_hash())
            store = build_store(self.data_cache / "stores" / f"{self.cfg.name}_{key}_{corpus}_{name}.store", src, tgt,
                                encoding, keep_all=True)
            refs = tgt.read_text(encoding="utf-8-sig").split("\n")[: len(store)]
            self.others[split] = (store, refs)
        return self.others[split]

    def fingerprint(self) -> str:
        files = [self.folder / f"{s}.{x}" for s in SPLITS for x in ("src", "tgt")]
        return config_hash([file_hash(f) for f in files] + [self.tokenizer.content_hash()], self.cfg.max_len)

    def build_model(self, model: ModelConfig, heads: HeadsConfig, k: int, seed: int):
        # Room for the longest dev/test line (4 * max_len) and its output limit.
        max_positions = model.max_positions or 4 * self.cfg.max_len + 64
        return build_translation_model(
            self.vocab_size, k, dataclasses.replace(model, max_positions=max_positions), seed=seed,
            pad_id=self.pad_id, bos_id=self.bos_id, eos_id=self.eos_id, **heads_options(heads),
        )

    def max_len(self, decode: DecodeConfig) -> Callable[[torch.Tensor], int]:
        return lambda src: decode.output_limit(src.shape[1])

    def proposal_vocab(self, n: int | None) -> torch.Tensor | None:
        """The ``n`` most frequent target tokens of the training data (EOS always included, ties broken by
        token id, so the list is deterministic)."""
        if n is None:
            return None
        if int(n) < 1:
            raise ValueError(f"decode.proposal_vocab={n}: use a positive number of tokens, or null.")
        counts = self.pairs("train").target_counts(self.vocab_size)
        counts[self.eos_id] = np.iinfo(np.int64).max  # a row must always be able to end inside a block
        order = np.lexsort((np.arange(len(counts)), -counts))[: min(int(n), len(counts))]
        return torch.from_numpy(np.sort(order))

    def detokenize(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens)

    def scorer(self, split: str, n: int, first: int = 0) -> TranslationScorer:
        refs = self.other(split)[1] if split_parts(split)[0] else self.refs.get(split, [])
        return TranslationScorer(self.tokenizer, refs[first : first + n])

    def log_outputs(self, tracker: Tracker, scorer, outs: dict[str, RunOutput], specs: list[DecodeSpec],
                    pairs: Pairs, out_dir: Path) -> None:
        """A table of sample translations with accepted blocks marked like the paper's figure: a|b c|d."""
        if tracker.run is None:
            return
        blockwise = [s for s in specs if s.role is Role.CHAIN]
        if not blockwise:
            return
        best = max(blockwise, key=lambda s: sum(len(t) for t in outs[s.name].tokens)
                   / max(1, sum(outs[s.name].iterations)))
        o, tok = outs[best.name], self.tokenizer
        rows = []
        for i in range(min(20, len(o.tokens))):  # decode.n_examples may stop short of the split
            pieces, pos, marked = [tok.id_to_piece(t) for t in o.tokens[i]], 0, []
            for b in o.block_sizes[i]:
                marked.append("".join(pieces[pos : pos + b]).replace("\u2581", " ").strip())
                pos += b
            rows.append([tok.decode(pairs.src(i).tolist()), tok.decode(o.tokens[i]), " | ".join(marked),
                         len(o.block_sizes[i])])
        tracker.table(f"samples/{best.name}", ["source", "output", "accepted blocks", "iterations"], rows)
