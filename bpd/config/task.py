"""The tasks' configs: a parallel corpus (translation) or an image set (super-resolution), each task kind and
corpus registered by name (``bpd.config.registry``); ``bpd.tasks`` pairs each kind with its ``Task`` class."""

from __future__ import annotations

from dataclasses import dataclass, field

from bpd.config.common import check
from bpd.config.registry import entries, lookup, register
from corpora.debian import FETCH_MODES


@dataclass(frozen=True)
class CorpusInfo:
    kind: str  # the task kind whose ``task.source`` it is
    #: Its held-out sets can score another task's model (``decode.split=<corpus>:<split>``): built without a data
    #: folder, so the same command scores the same examples on any machine.
    scores_others: bool = False
    #: Its held-out sets that may score another task's model (the photo corpus's models: faces' test set only).
    other_splits: tuple[str, ...] = ("test", "dev")


register("corpus", "ding", info=CorpusInfo("translation", scores_others=True))  # embedded
register("corpus", "debian", info=CorpusInfo("translation", scores_others=True))  # built from Debian's packages
register("corpus", "wmt14", info=CorpusInfo("translation"))
register("corpus", "folder", info=CorpusInfo("translation"))  # any {train,dev,test}.{src,tgt} folder
register("corpus", "faces", info=CorpusInfo("image", scores_others=True, other_splits=("test",)))  # embedded
register("corpus", "photos", info=CorpusInfo("image"))  # built from Debian's packages
register("corpus", "celeba", info=CorpusInfo("image"))


def corpora(kind: str) -> tuple[str, ...]:
    """The corpora of a task kind (its ``task.source`` values)."""
    return tuple(name for name, e in entries("corpus").items() if e.info.kind == kind)


def other_corpora(kind: str) -> tuple[str, ...]:
    """The corpora of ``kind`` whose held-out sets may score another task's model."""
    return tuple(name for name, e in entries("corpus").items() if e.info.kind == kind and e.info.scores_others)


def check_source(kind: str, source: str) -> None:
    check(source in corpora(kind), f"unknown task.source {source!r} for {kind}; use {', '.join(corpora(kind))}.")


@dataclass
class TranslationTaskConfig:
    """A parallel corpus: the embedded ding sentences, the Debian corpus, WMT14, or any ``{train,dev,test}.{src,tgt}``
    folder."""

    name: str = "ding_en_de"  # a label for the rows; read de-en, rows and shipped files say ding_de_en
    kind: str = "translation"
    source: str = "ding"  # ding (embedded) | debian (built from Debian's packages) | wmt14 | folder
    data_dir: str | None = None  # wmt14, folder: where the text files are
    direction: str = "en-de"  # ding, wmt14: en-de (the paper's) or de-en
    ding_path: str | None = None  # ding: an explicit dictionary file (else Debian's, else apt-get download)
    include_phrases: bool = False  # ding: add the dictionary's phrase pairs to training
    tag_phrases: bool = False  # ding: mark phrase sources with a tag, so untagged sentences keep their length
    sentence_repeat: int = 1  # ding with phrases: the sentence pairs appear this many times in training
    vocab_size: int = 4000  # joint sentencepiece vocabulary
    max_len: int = 64  # training pairs longer than this (in pieces) are cut
    n_dev: int = 500  # ding, debian: held-out sentences
    n_test: int = 1000
    # debian: which extractors (null = all), which kinds of text, the shortest English side, and a folder of .deb
    # files to build from instead of downloading with apt (offline, repeatable).
    debian_sources: list[str] | None = None
    debian_kinds: list[str] = field(default_factory=lambda: ["sentences", "strings"])
    debian_min_words: int = 1
    debian_deb_dir: str | None = None
    # debian: how the packages are fetched: apt, http (bookworm's from deb.debian.org, no apt needed) or auto
    # (apt on Debian bookworm, the release of the reference build; http on any other machine). Not in cache keys.
    debian_fetch: str = "auto"

    #: ``decode.proposal_vocab`` (the heads propose among the most frequent target tokens) applies here.
    proposal_vocab_applies = True

    def validate(self) -> None:
        check(self.kind == "translation", f"task.kind={self.kind!r} does not match a translation task.")
        check_source(self.kind, self.source)
        check(self.direction in ("en-de", "de-en"), f"task.direction must be en-de or de-en (got {self.direction!r}).")
        check(self.vocab_size >= 8, f"task.vocab_size must be >= 8 (got {self.vocab_size}).")
        check(self.max_len >= 2, f"task.max_len must be >= 2 (one token plus EOS; got {self.max_len}).")
        check(self.include_phrases or (not self.tag_phrases and self.sentence_repeat == 1),
               "task.tag_phrases and task.sentence_repeat shape the phrase pairs: set task.include_phrases=true.")
        check(self.sentence_repeat >= 1, f"task.sentence_repeat must be >= 1 (got {self.sentence_repeat}).")
        # Each option would otherwise be ignored yet change the cache keys: the run would train its models
        # anew (a ding run with a data_dir does not find the shipped base).
        check(self.data_dir is None or self.source != "ding",
               "task.data_dir names a wmt14 or folder corpus; the ding corpus is embedded (use task.ding_path "
               "for another dictionary file), so drop task.data_dir or set task.source.")
        check(self.source == "ding" or (self.ding_path is None and not self.include_phrases),
               f"task.ding_path and task.include_phrases apply to the ding corpus; drop them for "
               f"task.source={self.source}.")
        debian_set = (self.debian_sources is not None or self.debian_kinds != ["sentences", "strings"]
                      or self.debian_min_words != 1 or self.debian_deb_dir is not None
                      or self.debian_fetch != "auto")
        check(self.source == "debian" or not debian_set,
               f"the task.debian_* options shape the Debian corpus; drop them for task.source={self.source}.")
        check(self.debian_fetch in FETCH_MODES,
               f"task.debian_fetch must be one of {', '.join(FETCH_MODES)} (got {self.debian_fetch!r}).")
        check(self.data_dir is None or self.source != "debian",
               "task.data_dir names a wmt14 or folder corpus; the Debian corpus is built from packages (use "
               "task.debian_deb_dir for a folder of .deb files), so drop task.data_dir.")

    #: Fields added after data was cached: in keys only when they differ from their defaults.
    KEYED_WHEN_SET = {"tag_phrases": False, "sentence_repeat": 1, "debian_sources": None,
                      "debian_kinds": ["sentences", "strings"], "debian_min_words": 1, "debian_deb_dir": None}


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
    # photos: a folder of .deb files to build from instead of downloading (offline, repeatable), and how the
    # packages are fetched (as task.debian_fetch). Neither changes the corpus, so neither is in cache keys.
    photos_deb_dir: str | None = None
    photos_fetch: str = "auto"

    proposal_vocab_applies = False  # intensities: a restricted proposal vocabulary makes no sense
    #: Fields that never change the data: left out of the task's key.
    NOT_KEYED = ("photos_deb_dir", "photos_fetch")

    def validate(self) -> None:
        check(self.kind == "image", f"task.kind={self.kind!r} does not match an image task.")
        check_source(self.kind, self.source)
        check(self.source == "photos" or (self.photos_deb_dir is None and self.photos_fetch == "auto"),
               f"task.photos_deb_dir and task.photos_fetch shape how the photo corpus is fetched; drop them for "
               f"task.source={self.source}.")
        check(self.photos_fetch in FETCH_MODES,
               f"task.photos_fetch must be one of {', '.join(FETCH_MODES)} (got {self.photos_fetch!r}).")
        check(self.data_dir is None or self.source == "celeba",
               "task.data_dir names the CelebA folder; the faces patches are embedded, so drop task.data_dir or "
               "set task.source=celeba.")
        check(self.lr_size >= 1 and self.hr_size % self.lr_size == 0,
               f"task.hr_size ({self.hr_size}) must be a multiple of task.lr_size ({self.lr_size}).")


TaskConfig = TranslationTaskConfig | ImageTaskConfig
register("task", "translation", TranslationTaskConfig)
register("task", "image", ImageTaskConfig)


def task_config(kind: object) -> type:
    """The config class of a task kind (``task.kind``), refused with the choices."""
    return lookup("task", kind, "task.kind").options
