"""The tasks' configs: a parallel corpus (translation) or an image set (super-resolution), each task kind and
corpus registered by name (``bpd.config.registry``; the corpora and their options in ``bpd.config.corpora``);
``bpd.tasks`` pairs each kind with its ``Task`` class."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from bpd.config import corpora as _declared  # noqa: F401  (registers the corpora)
from bpd.config.common import check
from bpd.config.registry import entries, lookup, made, made_from, refill, register


def corpora(kind: str) -> tuple[str, ...]:
    """The corpora of a task kind (its ``task.source`` values)."""
    return tuple(name for name, e in entries("corpus").items() if e.info.kind == kind)


def other_corpora(kind: str) -> tuple[str, ...]:
    """The corpora of ``kind`` whose held-out sets may score another task's model."""
    return tuple(name for name, e in entries("corpus").items() if e.info.kind == kind and e.info.scores_others)


def check_source(kind: str, source: str) -> None:
    check(source in corpora(kind), f"unknown task.source {source!r} for {kind}; use {', '.join(corpora(kind))}.")


@dataclass
class TranslationCorpora:
    """Each translation corpus's options, by corpus name (``bpd.config.corpora``)."""


@dataclass
class ImageCorpora:
    """Each image corpus's options, by corpus name (``bpd.config.corpora``)."""


@made
def _make_corpora() -> None:
    """What a task of each kind asks of its corpora that take options (``task.corpora``): one field per such corpus,
    of its own type, made from the registry (after the plugins' declarations; again when a plugin loads later)."""
    every = made_from("corpus")
    for kind, cls in (("translation", TranslationCorpora), ("image", ImageCorpora)):
        refill(cls, [(n, e.options, field(default_factory=e.options)) for n, e in every.items()
                     if e.info.kind == kind and e.options is not None])


def check_corpora(task: Any) -> None:
    """The chosen corpus's options checked by their owner; any other corpus's set is refused (it would be
    ignored, yet change the cache keys: the run would train its models anew)."""
    for f in dataclasses.fields(task.corpora):
        options, where = getattr(task.corpora, f.name), f"task.corpora.{f.name}"
        options.validate(where)
        check(f.name == task.source or options == type(options)(),
               f"{where} shapes the {f.name} corpus; drop it for task.source={task.source}.")
    readers = [n for n, e in entries("corpus").items() if e.info.kind == task.kind and e.info.reads_data_dir]
    check(task.data_dir is None or task.source in readers,
           f"task.data_dir names the folder a {' or '.join(readers)} corpus is read from; the {task.source} corpus "
           "is built here, so drop task.data_dir or set task.source.")


@dataclass
class TranslationTaskConfig:
    """A parallel corpus: the embedded ding sentences, the Debian corpus, WMT14, or any ``{train,dev,test}.{src,tgt}``
    folder."""

    name: str = "ding_en_de"  # a label for the rows; read de-en, rows and shipped files say ding_de_en
    kind: str = "translation"
    source: str = "ding"  # ding (embedded) | debian (built from Debian's packages) | wmt14 | folder
    data_dir: str | None = None  # wmt14, folder: where the text files are
    direction: str = "en-de"  # ding, debian, wmt14: en-de (the paper's) or de-en
    vocab_size: int = 4000  # joint sentencepiece vocabulary
    max_len: int = 64  # training pairs longer than this (in pieces) are cut
    n_dev: int = 500  # ding, debian: held-out sentences
    n_test: int = 1000
    corpora: TranslationCorpora = field(default_factory=TranslationCorpora)  # ding: {include_phrases: true}, ...

    #: ``decode.proposal_vocab`` (the heads propose among the most frequent target tokens) applies here.
    proposal_vocab_applies = True

    def validate(self) -> None:
        check(self.kind == "translation", f"task.kind={self.kind!r} does not match a translation task.")
        check_source(self.kind, self.source)
        check(self.direction in ("en-de", "de-en"), f"task.direction must be en-de or de-en (got {self.direction!r}).")
        check(self.vocab_size >= 8, f"task.vocab_size must be >= 8 (got {self.vocab_size}).")
        check(self.max_len >= 2, f"task.max_len must be >= 2 (one token plus EOS; got {self.max_len}).")
        check_corpora(self)


@dataclass
class ImageTaskConfig:
    """Super-resolution: embedded photograph patches (faces_sr), the Debian photo corpus (photos_sr) or CelebA
    (celeba_sr)."""

    name: str = "faces_sr"  # a label for the rows
    kind: str = "image"
    source: str = "faces"  # faces (embedded photograph patches) | photos (built from Debian's packages) | celeba
    data_dir: str | None = None  # celeba: img_align_celeba/*.jpg and list_eval_partition.txt
    lr_size: int = 4
    hr_size: int = 16  # 16x16x3 = 768 tokens per image; the paper's 8 -> 32 is lr_size=8 hr_size=32
    n_train: int | None = 16384  # faces: patches drawn; photos, celeba: a cap (null = the whole split)
    n_dev: int | None = 128
    n_test: int | None = 256
    seed: int = 0  # faces: which patches are drawn
    corpora: ImageCorpora = field(default_factory=ImageCorpora)  # photos: {deb_dir: ..., fetch: http}

    proposal_vocab_applies = False  # intensities: a restricted proposal vocabulary makes no sense

    def validate(self) -> None:
        check(self.kind == "image", f"task.kind={self.kind!r} does not match an image task.")
        check_source(self.kind, self.source)
        check_corpora(self)
        check(self.lr_size >= 1 and self.hr_size % self.lr_size == 0,
               f"task.hr_size ({self.hr_size}) must be a multiple of task.lr_size ({self.lr_size}).")


TaskConfig = TranslationTaskConfig | ImageTaskConfig
register("task", "translation", TranslationTaskConfig)
register("task", "image", ImageTaskConfig)


def task_config(kind: object) -> type:
    """The config class of a task kind (``task.kind``), refused with the choices."""
    return lookup("task", kind, "task.kind").options

