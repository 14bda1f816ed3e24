"""Translation corpora in one folder layout (``corpora.layout``): encoding ``bpd.data.store``, batching
``bpd.data.batches``.

Every corpus (the embedded ding sentences, ``corpora.ding``; WMT14; any folder) is prepared into
``{train,dev,test}.{src,tgt}`` with one sentence per line, so training and evaluation code never needs to
know which corpus or direction it is looking at.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bpd.data.tokenizer import Tokenizer
from corpora.layout import SPLITS, check_direction, count_lines


def directed_name(name: str, direction: str) -> str:
    """The corpus name with the direction it is read in: ``ding_en_de`` read de-en is ``ding_de_en``. Rows and
    shipped checkpoints carry it, so the two directions are never grouped together or saved over each other."""
    src, tgt = check_direction(direction)
    for suffix in ("_en_de", "_de_en"):
        if name.endswith(suffix):
            return f"{name[: -len(suffix)]}_{src}_{tgt}"
    return name if direction == "en-de" else f"{name}_{src}_{tgt}"


WMT14_HELP = (
    "newstest2013 (dev): sacrebleu -t wmt13 -l en-de --echo src > newstest2013.en; "
    "sacrebleu -t wmt13 -l en-de --echo ref > newstest2013.de; "
    "newstest2014 (test): sacrebleu -t wmt14 -l en-de --echo src > newstest2014.en; "
    "sacrebleu -t wmt14 -l en-de --echo ref > newstest2014.de; "
    "train.en/train.de: concatenate the WMT14 En-De training corpora from https://www.statmt.org/wmt14/ "
    "(Europarl v7, Common Crawl, News Commentary v9), keeping the two sides line-aligned"
)


def prepare_wmt14(data_dir: Path, direction: str = "en-de", cache_dir: Path | None = None) -> Path:
    """Expose WMT14 files in ``data_dir`` as a ``{train,dev,test}.{src,tgt}`` folder (symlinks) and return it.

    Dev is newstest2013 and test newstest2014, as in the paper. The folder defaults to
    ``data_dir/bpd_<direction>``; symlinks avoid copying the 1+ GB training text (copies are the fallback
    where symlinks are not allowed). Dev/test line counts are checked here because a misaligned reference
    file would otherwise only show up as a mysteriously low BLEU.
    """
    src_lang, tgt_lang = check_direction(direction)
    data_dir = Path(data_dir)
    names = {
        "train": "train",
        "dev": "newstest2013",
        "test": "newstest2014",
    }
    missing = [
        f"{names[s]}.{lang}" for s in SPLITS for lang in ("en", "de") if not (data_dir / f"{names[s]}.{lang}").is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"WMT14 files missing in {data_dir}: {', '.join(missing)}. Create them in that folder: {WMT14_HELP}."
        )
    for s in ("dev", "test"):
        n_src = count_lines(data_dir / f"{names[s]}.en")
        n_tgt = count_lines(data_dir / f"{names[s]}.de")
        if n_src != n_tgt:
            raise ValueError(f"{names[s]}.en has {n_src} lines but {names[s]}.de has {n_tgt}; they must align")
    folder = Path(cache_dir) if cache_dir is not None else data_dir / f"bpd_{direction}"
    folder.mkdir(parents=True, exist_ok=True)
    for s in SPLITS:
        for side, lang in (("src", src_lang), ("tgt", tgt_lang)):
            target = (data_dir / f"{names[s]}.{lang}").resolve()
            link = folder / f"{s}.{side}"
            if link.is_file() and link.resolve() == target:
                continue
            tmp = link.with_name(f".{link.name}.tmp{os.getpid()}")
            tmp.unlink(missing_ok=True)
            try:
                tmp.symlink_to(target)
            except OSError:
                shutil.copyfile(target, tmp)
            os.replace(tmp, link)
    return folder


__all__ = [
    "Tokenizer",
    "directed_name",
    "prepare_wmt14",
]
