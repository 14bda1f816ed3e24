"""Super-resolution: low-resolution images in, high-resolution images out one channel intensity at a time
(the paper's Section 6 task), scored by PSNR, with nearest-neighbour and bicubic upsampling as reference
rows and a grid of outputs as the figure."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bpd.config import SPLITS, DecodeConfig, HeadsConfig, ImageTaskConfig, ModelConfig, TrainConfig, split_parts
from bpd.config.methods import Role
from bpd.config.registry import implementations, kept
from bpd.config.task import corpora as kind_corpora
from bpd.data import images as im
from bpd.data.celeba import prepare_celeba
from bpd.data.faces import SRPatches, load_sr_npz, prepare_embedded_sr
from bpd.data.grid import save_grid
from bpd.data.store import ArrayPairs
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import RunOutput
from bpd.models import build_image_model
from bpd.models.image_transformer import ImageTransformer
from bpd.models.upsampler import fit_upsampler
from bpd.runtime import repo_relative
from bpd.tasks.base import Corpus, Pairs, Task, heads_options, task_key
from bpd.tracking import Tracker
from corpora.photos.build import FACES, PhotoOptions, corpus_hash, open_photos, prepare_photos

Images = dict[str, tuple[np.ndarray, np.ndarray]]


class ImageCorpus(Corpus):
    """An image corpus (``Corpus``): ``prepare`` gives its (low-resolution, high-resolution) uint8 arrays per
    split."""

    def prepare(self, cfg: ImageTaskConfig, options: Any, data_cache: Path) -> Images:
        raise NotImplementedError


#: The photo corpus's whole test split (``decode.split=photos:test``): ``test`` is its first ``task.n_test``
#: patches, which the task's key (and so every model's) hashes; this set's size keys no model.
WHOLE_TEST = "photos:test"


def held(split: str) -> str:
    """The key of ``images`` that ``split`` decodes: ``faces:test`` the face set, others their own name."""
    return FACES if split_parts(split)[0] == FACES else split


class FacesCorpus(ImageCorpus):
    source = "faces"

    def prepare(self, cfg: ImageTaskConfig, options: Any, data_cache: Path) -> Images:
        spec = SRPatches(lr_size=cfg.lr_size, factor=cfg.hr_size // cfg.lr_size, n_train=cfg.n_train,
                         n_dev=cfg.n_dev, n_test=cfg.n_test, seed=cfg.seed)
        path = prepare_embedded_sr(data_cache, spec)
        return load_sr_npz(path)


class PhotosCorpus(ImageCorpus):
    source = "photos"

    def folder(self, cfg: ImageTaskConfig, options: Any, data_cache: Path) -> Path:
        deb_dir = Path(options.deb_dir).expanduser() if options.deb_dir else None
        opts = PhotoOptions(lr_size=cfg.lr_size, hr_size=cfg.hr_size, flat_per_channel=options.flat_per_channel)
        return prepare_photos(data_cache, opts, deb_dir=deb_dir, fetch=options.fetch)

    def prepare(self, cfg: ImageTaskConfig, options: Any, data_cache: Path) -> Images:
        images = open_photos(self.folder(cfg, options, data_cache))
        limits = {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test, FACES: None}
        # each split is stored shuffled: its first n patches sample every photograph of the split
        capped = {s: (lr[: limits[s]], hr[: limits[s]]) for s, (lr, hr) in images.items()}
        return {**capped, WHOLE_TEST: images["test"]}

    def content_key(self, cfg: ImageTaskConfig, options: Any, data_cache: Path, prepared: Images) -> str | None:
        # Other packages (a point release) or another Pillow build another photo corpus: its hash keys every model
        # trained on it.
        return corpus_hash(self.folder(cfg, options, data_cache))


class CelebaCorpus(ImageCorpus):
    source = "celeba"

    def prepare(self, cfg: ImageTaskConfig, options: Any, data_cache: Path) -> Images:
        if not cfg.data_dir:
            raise FileNotFoundError(
                "task celeba_sr needs task.data_dir=/path/to/celeba holding img_align_celeba/*.jpg and "
                "list_eval_partition.txt."
            )
        limits = {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test}
        # Preprocessed once, in parallel, into memory-mapped uint8 arrays (202,599 images: a few minutes).
        return {s: prepare_celeba(cfg.data_dir, data_cache / "celeba", s, cfg.lr_size, cfg.hr_size, limits[s])
                for s in limits}


#: Each image corpus by ``task.source``, paired with its registration.
CORPORA: dict[str, ImageCorpus] = kept(lambda: {
    name: c() for name, c in implementations("corpus", __name__, ImageCorpus, "source", kind_corpora("image")).items()})


class ImageScorer:
    def __init__(self, lr: np.ndarray, hr: np.ndarray) -> None:
        self.lr, self.hr = lr, hr
        self.h, self.w = hr.shape[1], hr.shape[2]

    def images(self, tokens) -> np.ndarray:
        return np.stack([im.tokens_to_image(np.asarray(t, dtype=np.int64), self.h, self.w) for t in tokens])

    def score(self, tokens, greedy_tokens) -> dict[str, Any]:
        pred, greedy = self.images(tokens), self.images(greedy_tokens)
        return {
            "psnr": im.mean_psnr(pred, self.hr),
            "psnr_vs_greedy": im.mean_psnr(pred, greedy),
            "pixel_agreement_with_greedy": float((pred == greedy).mean()),
        }

    def write(self, tokens, stem: Path) -> dict[str, str]:
        stem.parent.mkdir(parents=True, exist_ok=True)
        pred, target = stem.with_suffix(".pred.npy"), stem.parent / "target.npy"
        np.save(pred, self.images(tokens))
        if not target.exists():
            np.save(target, self.hr)
            np.save(stem.parent / "input.npy", self.lr)
        return {"pred_file": str(pred), "target_file": str(target)}


class ImageTask(Task):
    kind = "image"
    quality = "psnr"
    # Images decode 768+ tokens each: a small sample is enough to track per-head agreement with the base.
    dev_outputs_sample = 16
    # Token ids are intensities: the distance criterion compares them as ordinals (the ids the model declares
    # ordered, which train.ordinal_sigma spreads targets over).
    criterion_kwargs = dict(zip(("offset", "n_values"), ImageTransformer.ordinal_values, strict=True))

    def __init__(self, cfg: ImageTaskConfig, data_cache: Path, shipped_dir: str | Path | None = None) -> None:
        """``shipped_dir``: unused (shipped files are tokenizers, which images do not have)."""
        corpus, options = CORPORA[cfg.source], getattr(cfg.corpora, cfg.source, None)
        self.images = corpus.prepare(cfg, options, data_cache)

        # Raster-order tokens are a reshape of the uint8 arrays (a view: memory-mapped arrays stay on disk).
        splits = {s: ArrayPairs(lr.reshape(len(lr), -1), hr.reshape(len(hr), -1))
                  for s, (lr, hr) in self.images.items()}
        key = task_key(cfg, corpus.content_key(cfg, options, data_cache, self.images))
        super().__init__(cfg.name, key, im.VOCAB_SIZE, splits, im.PAD_ID, im.BOS_ID, im.EOS_ID)
        self.cfg = cfg

    def pairs(self, split: str) -> Pairs:
        """A split's pairs; ``faces:test`` is the photo corpus's face test set, ``photos:test`` its whole test
        split."""
        return super().pairs(split) if split_parts(split)[0] is None else self.splits[held(split)]

    def fingerprint(self) -> str:
        digest = hashlib.sha1()
        for split in SPLITS:
            for array in self.images[split]:
                digest.update(np.ascontiguousarray(array).data)
        return digest.hexdigest()[:16]

    def build_model(self, model: ModelConfig, heads: HeadsConfig, k: int, seed: int):
        return build_image_model(k, model, self.cfg.lr_size, self.cfg.hr_size, seed=seed, **heads_options(heads))

    def fit_before_base(self, model, train: TrainConfig, seed: int) -> None:
        """A learned upsampler (``model.aligned_upsample=learned``) is fitted to the training patches for
        ``train.upsampler_steps`` steps, then frozen, before the base trains on its guesses."""
        if model.upsampler is not None and train.upsampler_steps:
            lr, hr = self.images["train"]
            fit_upsampler(model.upsampler, lr, hr, train.upsampler_steps, train.upsampler_batch, train.upsampler_lr,
                          seed)

    def max_len(self, decode: DecodeConfig) -> Callable[[torch.Tensor], int]:
        seq = self.cfg.hr_size * self.cfg.hr_size * 3  # a whole image, no EOS
        return lambda src: seq

    def scorer(self, split: str, n: int, first: int = 0) -> ImageScorer:
        lr, hr = self.images[held(split)]
        return ImageScorer(lr[first : first + n], hr[first : first + n])

    def extra_rows(self, scorer: ImageScorer, outs: dict[str, RunOutput], specs: list[DecodeSpec],
                   rows: list[dict[str, Any]], common: dict[str, Any], out_dir: Path) -> list[dict[str, Any]]:
        """Nearest-neighbour and bicubic upsampling PSNR on the same test images, for context; every row
        points at the grid of outputs."""
        factor = scorer.h // scorer.lr.shape[1]
        extra = []
        for name, fn in (("nearest", im.nearest_upsample), ("bicubic", im.bicubic_upsample)):
            pred = fn(scorer.lr, factor)
            extra.append({**common, "decoder": name, "method": "reference", "k": None, "n_examples": len(pred),
                          "psnr": im.mean_psnr(pred, scorer.hr)})
        path, columns = self.grid(scorer, outs, specs, out_dir / "grid.png")
        grid = repo_relative(path)
        for r in rows + extra:
            r["grid_file"], r["grid_columns"] = grid, columns  # what the figure shows, for its caption
        return extra

    @staticmethod
    def grid(scorer: ImageScorer, outs: dict[str, RunOutput], specs: list[DecodeSpec], path: Path
             ) -> tuple[Path, list[str]]:
        """LR input | greedy | exact blockwise at the largest k | approximate blockwise at the largest k |
        ground truth; returns the file and the columns' labels (blockwise ones with their k̂)."""
        cols: list[tuple[str, np.ndarray]] = [
            ("low-res input", scorer.lr),
            ("greedy", scorer.images(outs["greedy"].tokens)),
        ]
        captions = [label for label, _ in cols]
        bw = [s for s in specs if s.role is Role.CHAIN]
        for crit in ("exact", "distance"):
            cands = [s for s in bw if s.criterion == crit and s.min_block_size == 1]
            if cands:
                best = max(cands, key=lambda s: s.k)
                label = f"blockwise k={best.k} " + ("exact" if crit == "exact" else f"eps={best.criterion_param:g}")
                o = outs[best.name]
                cols.append((label, scorer.images(o.tokens)))
                captions.append(f"{label} (k̂={sum(len(t) for t in o.tokens) / max(1, sum(o.iterations)):.2f})")
        cols.append(("ground truth", scorer.hr))
        captions.append("ground truth")
        return save_grid(cols, path, max_images=8), captions

    def log_outputs(self, tracker: Tracker, scorer: ImageScorer, outs: dict[str, RunOutput], specs: list[DecodeSpec],
                    pairs: Pairs, out_dir: Path) -> None:
        tracker.image("grid", out_dir / "grid.png", caption="LR | greedy | blockwise exact | blockwise eps | truth")
        for s in specs:
            if s.role is Role.CHAIN:
                o = outs[s.name]
                tracker.histogram(f"{s.name}/block_size_per_image",
                                  [len(t) / max(1, i) for t, i in zip(o.tokens, o.iterations)])
