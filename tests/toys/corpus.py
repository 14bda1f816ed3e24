"""``toy_reverse``'s builder: generated pairs, each target its source's words reversed and capitalised, written
once under the task's data cache as the ``{train,dev,test}.{src,tgt}`` folder a translation task reads."""

from __future__ import annotations

import random
from pathlib import Path

from bpd.config import SPLITS, TranslationTaskConfig
from bpd.config.common import config_hash
from bpd.tasks.translation import TranslationCorpus

WORDS = "red green blue cyan black white grey pink gold teal plum rose sand snow jade ruby".split()


class ReverseCorpus(TranslationCorpus):
    source = "toy_reverse"
    directed = False  # generated text: no language pair to name

    def prepare(self, cfg: TranslationTaskConfig, options, data_cache: Path) -> Path:
        sizes = {"train": options.n_train, "dev": cfg.n_dev, "test": cfg.n_test}
        folder = data_cache / f"toy_reverse_{config_hash(sizes, options.seed)}"  # what the text depends on
        if not (folder / "test.tgt").is_file():  # written last
            rng = random.Random(options.seed)
            folder.mkdir(parents=True, exist_ok=True)
            for split in SPLITS:
                words = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(sizes[split])]
                (folder / f"{split}.src").write_text("".join(" ".join(w) + "\n" for w in words))
                (folder / f"{split}.tgt").write_text("".join(" ".join(reversed(w)).title() + "\n" for w in words))
        return folder
