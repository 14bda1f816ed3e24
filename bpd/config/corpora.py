"""The corpora (``task.source``) by name, as ``bpd.config.registry`` holds them, each with the options it owns:
a task reads them under ``task.corpora.<corpus>`` (``task.corpora.debian.sources``), and only the chosen corpus's
may differ from their defaults. The builders live in ``corpora/``; ``bpd.tasks`` pairs each corpus with how its
task prepares it."""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config.common import check
from bpd.config.registry import register
from corpora.debian import DebianOptions, check_fetch


@dataclass(frozen=True)
class CorpusInfo:
    kind: str  # the task kind whose ``task.source`` it is
    #: Its held-out sets can score another task's model (``decode.split=<corpus>:<split>``): built without a data
    #: folder, so the same command scores the same examples on any machine.
    scores_others: bool = False
    #: Its held-out sets that may score another task's model (the photo corpus's models: faces' test set only).
    other_splits: tuple[str, ...] = ("test", "dev")
    reads_data_dir: bool = False  # it is read from ``task.data_dir`` (no other corpus takes one)
    #: Other corpora's held-out sets its own folder holds: only its task scores them (the photo corpus holds the
    #: face test set, ``decode.split=faces:test``).
    holds: tuple[str, ...] = ()


@dataclass
class DingOptions:
    """The embedded ding sentences (Debian's trans-de-en dictionary)."""

    path: str | None = None  # an explicit dictionary file (else Debian's, else apt-get download)
    include_phrases: bool = False  # add the dictionary's phrase pairs to training
    tag_phrases: bool = False  # mark phrase sources with a tag, so untagged sentences keep their length
    sentence_repeat: int = 1  # with phrases: the sentence pairs appear this many times in training

    #: Where the dictionary is read from does not change the corpus: left out of cache keys.
    NOT_KEYED = ("path",)

    def validate(self, where: str) -> None:
        check(self.include_phrases or (not self.tag_phrases and self.sentence_repeat == 1),
               f"{where}.tag_phrases and {where}.sentence_repeat shape the phrase pairs: set "
               f"{where}.include_phrases=true.")
        check(self.sentence_repeat >= 1, f"{where}.sentence_repeat must be >= 1 (got {self.sentence_repeat}).")


@dataclass
class PhotosOptions:
    """The Debian photo corpus: where its packages come from (neither changes the corpus), and its flatness filter."""

    deb_dir: str | None = None  # a folder of .deb files to build from instead of downloading (offline, repeatable)
    fetch: str = "auto"  # as task.corpora.debian.fetch
    # A patch is flat (dropped) when no channel varies by 2 levels, instead of its R, G and B values pooled (which a
    # uniform coloured patch passes): another corpus, in its own folder (corpora.photos.build.PhotoOptions).
    flat_per_channel: bool = False

    NOT_KEYED = ("deb_dir", "fetch")

    def validate(self, where: str) -> None:
        check_fetch(self.fetch, where)


register("corpus", "ding", DingOptions, CorpusInfo("translation", scores_others=True))  # embedded
register("corpus", "debian", DebianOptions, CorpusInfo(  # built from Debian's packages
    "translation", scores_others=True))
register("corpus", "wmt14", info=CorpusInfo("translation", reads_data_dir=True))
register("corpus", "folder", info=CorpusInfo("translation", reads_data_dir=True))  # any {train,dev,test}.{src,tgt}
register("corpus", "faces", info=CorpusInfo("image", scores_others=True, other_splits=("test",)))  # embedded
# photos:test is the corpus's whole test split (task.n_test caps test, and keys the models; this one does not)
register("corpus", "photos", PhotosOptions, CorpusInfo("image", scores_others=True, other_splits=("test",),
                                                       holds=("faces", "photos")))  # built from Debian's packages
register("corpus", "celeba", info=CorpusInfo("image", reads_data_dir=True))
