"""Joint source/target subword tokenizer (sentencepiece) with the id contract the models rely on.

The models and decoders hard-code three ids: ``pad = 0`` (ignored by the loss and masked in attention),
``bos = 1`` (first decoder input) and ``eos = 2`` (stops decoding). Training the sentencepiece model with
exactly those ids keeps that contract in one place instead of remapping ids at every call site.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3


class Tokenizer:
    """A thin wrapper around a trained sentencepiece model.

    ``encode`` adds neither BOS nor EOS: the batching code adds them where the model needs them (EOS on the
    target, BOS on the shifted decoder input), so the tokenizer stays agnostic of source vs target.
    """

    def __init__(self, model_path: str | Path) -> None:
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"sentencepiece model {self.model_path} does not exist; train it first")
        self._sp = spm.SentencePieceProcessor(model_file=str(self.model_path))
        ids = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id())
        if ids != (PAD_ID, BOS_ID, EOS_ID):
            # A model trained elsewhere with sentencepiece's defaults (unk 0, bos 1, eos 2, pad -1) would
            # silently feed real tokens in as padding; refuse it instead.
            raise ValueError(
                f"{self.model_path} has pad/bos/eos ids {ids}, expected ({PAD_ID}, {BOS_ID}, {EOS_ID}); "
                "retrain it with Tokenizer.train"
            )

    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    @property
    def unk_id(self) -> int:
        return int(self._sp.unk_id())

    def content_hash(self) -> str:
        """A hash of what the tokenizer does (its pieces, their scores and types), not of its file: the file
        also records the training run's input paths and temporary prefix (with a process id), so the same
        vocabulary retrained on another machine or in another run has other bytes."""
        sp, h = self._sp, hashlib.sha1()
        for i in range(self.vocab_size):
            kind = "c" if sp.is_control(i) else "u" if sp.is_unknown(i) else "b" if sp.is_byte(i) else "n"
            h.update(f"{sp.id_to_piece(i)}\t{sp.get_score(i)!r}\t{kind}\n".encode())
        return h.hexdigest()[:16]

    def encode(self, text: str) -> list[int]:
        """Subword ids of ``text`` without BOS/EOS."""
        return list(self._sp.encode(text, out_type=int))

    def unknown_spans(self, text: str) -> list[str]:
        """The stretches of ``text`` the vocabulary cannot spell (each becomes one unknown token): what a user is
        told to replace before translating."""
        pieces = self._sp.encode(text, return_type="proto").pieces
        return [p.surface for p in pieces if p.id == self.unk_id]

    def encode_batch(self, texts: Sequence[str], num_threads: int = 2) -> list[list[int]]:
        """``encode`` for many lines at once; sentencepiece does the loop in C++, which matters for WMT."""
        return [list(x) for x in self._sp.encode(list(texts), out_type=int, num_threads=num_threads)]

    def id_to_piece(self, i: int) -> str:
        """The subword piece of one id (for marking accepted blocks in sample tables)."""
        return str(self._sp.id_to_piece(int(i)))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a model output: everything from the first EOS on is cut, PAD and BOS are ignored.

        Decoders emit fixed-width tensors (padding after EOS, blockwise decoding may even propose tokens past
        EOS), so cutting at the first EOS is the only reading that matches what the model "said". Ids outside
        the vocabulary (a model whose output layer is rounded up) become UNK rather than crashing a BLEU run.
        """
        out: list[int] = []
        n = self.vocab_size
        for raw in ids:
            i = int(raw)
            if i == EOS_ID:
                break
            if i in (PAD_ID, BOS_ID):
                continue
            out.append(i if 0 <= i < n else self.unk_id)
        return str(self._sp.decode(out))

    @classmethod
    def train(
        cls,
        text_files: Sequence[str | Path],
        model_prefix: str | Path,
        vocab_size: int,
        seed: int = 0,
        model_type: str = "unigram",
        character_coverage: float = 0.9999,
        input_sentence_size: int = 1_000_000,
        num_threads: int = 2,
    ) -> Tokenizer:
        """Train (or reuse) a joint subword model on ``text_files`` and return it.

        Source and target text go into one model so both sides share a vocabulary, as in the paper's
        Transformer setup (shared embeddings need a shared vocabulary).

        The result is cached: if ``<model_prefix>.model`` exists it is loaded, not retrained, so the prefix
        should encode anything that changes the model (corpus, vocab size). Training writes to a temporary
        prefix and renames, so an interrupted or concurrent run never leaves a half-written model behind.

        ``hard_vocab_limit=False`` lets tiny corpora (tests) ask for more pieces than they can support.
        ``input_sentence_size`` caps memory and time on WMT-sized input: sentencepiece then samples that many
        lines, and ``seed`` fixes the sample so the vocabulary is reproducible.
        """
        prefix = Path(model_prefix)
        model_path = prefix.with_name(prefix.name + ".model")
        if model_path.is_file():
            return cls(model_path)
        files = _training_files(text_files)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        tmp_prefix = prefix.with_name(f"{prefix.name}.tmp{os.getpid()}")
        spm.set_random_generator_seed(seed)
        # sentencepiece prints nothing for minutes on a large corpus: say what is happening and how big it is.
        n_lines = sum(_count_lines(f) for f in files)
        print(f"tokenizer: learning a {vocab_size}-piece sentencepiece vocabulary from {n_lines:,} lines "
              f"({'all of them' if n_lines <= input_sentence_size else f'a sample of {input_sentence_size:,}'}) "
              f"with {num_threads} threads ...", flush=True)
        t0 = time.perf_counter()
        _learn(files, tmp_prefix, vocab_size, model_type=model_type, character_coverage=character_coverage,
               input_sentence_size=input_sentence_size, num_threads=num_threads)
        print(f"tokenizer: done in {time.perf_counter() - t0:.0f} s -> {model_path}", flush=True)
        vocab_path = prefix.with_name(prefix.name + ".vocab")
        os.replace(tmp_prefix.with_name(tmp_prefix.name + ".vocab"), vocab_path)
        os.replace(tmp_prefix.with_name(tmp_prefix.name + ".model"), model_path)
        return cls(model_path)


#: A corpus built from packages (the Debian corpus) ships the tokenizer learned from it beside its base models
#: (``<task>_<corpus hash>.spm<pieces>.model``): a run on that corpus installs it instead of learning it again, which
#: saves a minute and keeps the vocabulary, and so the shipped bases' fingerprints, the same where another
#: sentencepiece version would learn other pieces from the same text.


def tokenizer_file(shipped_dir: Path, corpus: str, vocab_size: int) -> Path:
    """Where the tokenizer learned from ``corpus`` (``<task>_<corpus hash>``) with ``vocab_size`` pieces ships."""
    return Path(shipped_dir) / f"{corpus}.spm{vocab_size}.model"


def install_tokenizer(model_path: Path, shipped_dir: Path, corpus: str, vocab_size: int) -> bool:
    """Copy the shipped tokenizer of ``corpus`` to ``model_path`` where the corpus has none yet (one already
    there, learned or installed earlier, is kept); False if none ships for this corpus and vocabulary size."""
    shipped = tokenizer_file(shipped_dir, corpus, vocab_size)
    if model_path.is_file() or not shipped.is_file():
        return False
    model_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = model_path.with_name(f"{model_path.name}.tmp{os.getpid()}")
    shutil.copyfile(shipped, tmp)
    os.replace(tmp, model_path)  # a concurrent run sees the whole file or none
    print(f"tokenizer: the shipped {shipped.name} (learned from this corpus)")
    return True


def export_tokenizer(model_path: Path, shipped_dir: Path, corpus: str, vocab_size: int) -> Path | None:
    """Ship the tokenizer a base was trained with, unless one ships for this corpus already."""
    out = tokenizer_file(shipped_dir, corpus, vocab_size)
    if out.is_file():
        return None
    # The file records the training run's input paths and temporary prefix: keep only the file names, which
    # say what it was learned from without this machine's folders (the pieces, what it does, are unchanged).
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    spec = proto.trainer_spec
    spec.input[:] = [Path(f).name for f in spec.input]
    spec.model_prefix = model_path.stem
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(proto.SerializeToString())
    return out


def _training_files(text_files: Sequence[str | Path]) -> list[Path]:
    """The files to learn a vocabulary from, refused in one sentence when one is missing or empty."""
    files = [Path(f) for f in text_files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"tokenizer training files missing: {', '.join(missing)}")
    empty = [str(f) for f in files if not _has_text(f)]
    if empty:
        raise ValueError(f"no text to learn a vocabulary from: {', '.join(empty)} "
                         f"{'is' if len(empty) == 1 else 'are'} empty; check the data folder.")
    return files


def _learn(files: list[Path], prefix: Path, vocab_size: int, **options) -> None:
    """Run sentencepiece's trainer (``options``: model_type, character_coverage, input_sentence_size,
    num_threads), writing ``<prefix>.model`` and ``<prefix>.vocab``, with the special ids bpd uses."""
    try:
        spm.SentencePieceTrainer.train(
            input=",".join(str(f) for f in files),
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            hard_vocab_limit=False,
            shuffle_input_sentence=True,
            minloglevel=2,
            **options,
        )
    except RuntimeError as e:  # sentencepiece's own checks (e.g. fewer pieces than characters)
        raise ValueError(f"sentencepiece could not learn a {vocab_size}-piece vocabulary from "
                         f"{', '.join(str(f) for f in files)} ({str(e).split('] ')[-1].strip()}); "
                         "change task.vocab_size.") from e


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 22), b""))


def _has_text(path: Path) -> bool:
    """Whether a file holds a non-blank line (stops at the first one: cheap on WMT-sized files)."""
    with open(path, "rb") as f:
        return any(line.strip() for line in f)
