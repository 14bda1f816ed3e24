"""Three toy extensions, outside the library, loaded as a plugin (``BPD_PLUGINS=tests/toys``): a decoding method
with options of its own and an auxiliary model it builds itself (``toy_bigram``, implemented in ``bigram.py``), a
proposal-head architecture (``toy_shared``, ``heads.py``) and a corpus (``toy_reverse``, ``corpus.py``, with its
task file ``conf/task/toy_reverse.yaml``). tests/test_extensions.py runs them; docs/architecture.md shows them.

This module is what ``bpd.config`` imports: the toys' declarations, torch-free as the library's own (configs and
the report read them without torch). Each entry names the module of its implementation, which bpd imports when it
pairs implementations with entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from bpd.config.common import check
from bpd.config.corpora import CorpusInfo
from bpd.config.heads import HeadInfo
from bpd.config.methods import Role, declare
from bpd.config.registry import register


@dataclass
class BigramOptions:
    """``decode.methods.toy_bigram``: the chain, its blocks drafted by a bigram table of the training targets (its
    decoders read these options as they are, ``o.toy_bigram``)."""

    on: bool = False  # decode with it: a decoder at every k >= 2 and criterion of the evaluation
    min_count: int = 1  # a successor seen fewer times is not drafted (the token is repeated instead)

    def validate(self, where: str) -> None:
        check(self.min_count >= 1, f"{where}.min_count must be >= 1 (got {self.min_count}).")


declare("toy_bigram", Role.BEYOND, "bigram-drafted chain", 70, options=BigramOptions, auxiliary=True, exact=True,
        module=f"{__name__}.bigram")

register("head", "toy_shared", info=HeadInfo(), module=f"{__name__}.heads")


@dataclass
class ReverseOptions:
    """``task.corpora.toy_reverse``: generated pairs, each target its source's words reversed and capitalised."""

    n_train: int = 300
    seed: int = 0

    def validate(self, where: str) -> None:
        check(self.n_train >= 1, f"{where}.n_train must be >= 1 (got {self.n_train}).")


register("corpus", "toy_reverse", ReverseOptions, CorpusInfo("translation"), module=f"{__name__}.corpus")
