"""The ``faces_sr`` dataset: super-resolution patches of photographs that ship inside scikit-image.

``faces_sr`` (the embedded default, :func:`build_embedded_sr`) needs no download: CelebA is 1.4 GB and
needs a manual licence click-through, so the CPU demo and the tests run on random patches cut from
colour photographs that ship *inside* the scikit-image wheel. Default resolution is 4x4 -> 16x16 (768
target tokens), configurable up to the paper's 8x8 -> 32x32. Despite the name, only two of the sources
contain a face (the astronaut's and the cat's); the name marks its role as the offline stand-in for
CelebA. ``celeba_sr`` (:func:`load_celeba_sr`) reads a locally provided CelebA in its standard layout.

Embedded sources and licences (as stated in the scikit-image docstrings of scikit-image 0.26)
    * ``astronaut`` - Eileen Collins, NASA Great Images database: "No known copyright restrictions,
      released into the public domain".
    * ``chelsea`` - Chelsea the cat, by Stefan van der Walt: "No copyright restrictions. CC0".
    * ``coffee`` - coffee cup, by Rachel Michetti (courtesy of Pikolo Espresso Bar): "No copyright
      restrictions. CC0".
    * ``rocket`` - SpaceX launch photo of DSCOVR on Falcon 9: released by SpaceX into the public domain.
    * ``immunohistochemistry`` - IHC-stained colonic glands, CMMI: "No known copyright restrictions".

    Other images in the wheel were deliberately left out of the default: ``retina`` (CC0) and
    ``hubble_deep_field`` (NASA, public domain) are mostly flat black, which would make decoding look easier
    than it is (they are available by name via ``sources=``); ``lfw_subset`` (25x25 faces) is grayscale, so
    its G and B tokens would be exact copies of R and inflate blockwise acceptance, and LFW states no
    licence; ``colorwheel`` and ``logo`` are synthetic; ``stereo_motorcycle`` (Middlebury) has no stated
    licence; the grayscale images (camera, brick, ...) have no colour; ``eagle``, ``lily``, ``skin``,
    ``kidney`` need a network download (pooch) and fail offline.

Held-out evaluation
    Each source photo is first area-downscaled so that its short side is ``context`` HR patches (a patch then
    covers a recognisable part of the object instead of a flat 16-pixel region), then tiled into square
    blocks of about 1.5 patch sizes. Blocks, not images, are assigned to train/dev/test (per image, so every
    photo contributes to every split), and every patch lies entirely inside one block. Train, dev and test
    patches therefore never share a single source pixel, while all splits come from the same distribution
    (holding out whole images would, with five photos, turn the test into a domain shift). Patch positions
    are uniformly random inside a uniformly random block of the split, never selected by content, and each
    split has its own random stream, so the test set does not change when ``n_train`` changes.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import numpy as np
from PIL import Image
from skimage import data as skd

from bpd.data.images import SPLITS
from corpora.photos.downsample import area_downsample

# --- embedded dataset -----------------------------------------------------------------------------------


def _skimage_loaders() -> dict[str, Callable[[], np.ndarray]]:
    """Name -> loader for the colour images that ship inside the scikit-image wheel (no network)."""
    return {
        "astronaut": skd.astronaut,
        "chelsea": skd.chelsea,
        "coffee": skd.coffee,
        "rocket": skd.rocket,
        "immunohistochemistry": skd.immunohistochemistry,
        "retina": skd.retina,
        "hubble_deep_field": skd.hubble_deep_field,
    }


DEFAULT_SOURCES: tuple[str, ...] = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry")


def load_embedded_sources(sources: Sequence[str] = DEFAULT_SOURCES) -> list[np.ndarray]:
    """Load the named scikit-image photographs as (H, W, 3) uint8 arrays (see the module docstring)."""
    loaders = _skimage_loaders()
    out = []
    for name in sources:
        if name not in loaders:
            raise ValueError(f"unknown embedded source {name!r}; available: {sorted(loaders)}")
        img = np.asarray(loaders[name]())
        if img.ndim != 3 or img.shape[-1] != 3 or img.dtype != np.uint8:
            raise ValueError(f"source {name!r} is not an RGB uint8 image: {img.shape} {img.dtype}")
        out.append(img)
    return out


def _area_resize_short_side(img: np.ndarray, short_side: int) -> np.ndarray:
    """Area-downscale (Pillow BOX) so the short side is ``short_side``; smaller images are left as they are."""
    h, w = img.shape[:2]
    if min(h, w) <= short_side:
        return img
    s = short_side / min(h, w)
    size = (max(1, round(w * s)), max(1, round(h * s)))
    return np.asarray(Image.fromarray(img).resize(size, Image.Resampling.BOX), dtype=np.uint8)


@dataclass(frozen=True)
class PatchPlan:
    """Where a split's patches come from: source index and top-left corner per patch, plus a flip flag."""

    image: np.ndarray  # (N,) int64 index into the (rescaled) source list
    y: np.ndarray  # (N,) int64 top row
    x: np.ndarray  # (N,) int64 left column
    flip: np.ndarray  # (N,) bool horizontal flip (train augmentation only)


def assign_blocks(
    shapes: Sequence[tuple[int, int]],
    block: int,
    seed: int,
    dev_frac: float = 0.1,
    test_frac: float = 0.1,
) -> dict[str, list[tuple[int, int, int]]]:
    """Tile each image into ``block``-sized squares and deal them to splits as (image, top, left) triples.

    The deal is per image (so each photo is seen by every split) with at least one dev and one test block
    per image, and depends only on the shapes, ``block`` and ``seed`` -- not on how many patches are drawn.
    """
    rng = np.random.default_rng([seed, 7919])
    out: dict[str, list[tuple[int, int, int]]] = {s: [] for s in SPLITS}
    for i, (h, w) in enumerate(shapes):
        cells = [(i, r * block, c * block) for r in range(h // block) for c in range(w // block)]
        if not cells:
            continue
        k_dev = max(1, round(dev_frac * len(cells))) if dev_frac > 0 else 0
        k_test = max(1, round(test_frac * len(cells))) if test_frac > 0 else 0
        if len(cells) - k_dev - k_test < 1:
            raise ValueError(f"source {i} ({h}x{w}) has too few {block}-pixel blocks to split three ways")
        order = rng.permutation(len(cells))
        out["test"] += [cells[j] for j in order[:k_test]]
        out["dev"] += [cells[j] for j in order[k_test : k_test + k_dev]]
        out["train"] += [cells[j] for j in order[k_test + k_dev :]]
    if not out["train"]:
        raise ValueError(f"no source image is at least {block}x{block} pixels")
    return out


def plan_patches(
    blocks: Sequence[tuple[int, int, int]], n: int, patch: int, block: int, rng: np.random.Generator, flip: bool
) -> PatchPlan:
    """Draw ``n`` patch positions: a uniformly random block, then a uniformly random corner inside it."""
    if n > 0 and not blocks:
        raise ValueError("no blocks assigned to this split")
    b = np.asarray(blocks, dtype=np.int64).reshape(-1, 3)
    pick = rng.integers(0, len(b), size=n) if n else np.zeros(0, dtype=np.int64)
    span = block - patch + 1
    dy = rng.integers(0, span, size=n)
    dx = rng.integers(0, span, size=n)
    flips = rng.random(n) < 0.5 if flip else np.zeros(n, dtype=bool)
    return PatchPlan(image=b[pick, 0], y=b[pick, 1] + dy, x=b[pick, 2] + dx, flip=flips)


@dataclass(frozen=True)
class SRPatches:
    """What :func:`build_sr_patches` cuts: ``n_train`` / ``n_dev`` / ``n_test`` (LR, HR) patch pairs of ``lr_size``
    and ``hr_size = lr_size * factor`` pixels, drawn with ``seed``; and how: each source is area-downscaled to a
    short side of ``context * hr_size`` pixels and tiled into blocks of ``ceil(block_scale * hr_size)`` pixels, of
    which ``dev_frac`` and ``test_frac`` go to dev and test (see :func:`assign_blocks`); ``hflip_train`` flips
    half the training patches."""

    lr_size: int
    factor: int
    n_train: int
    n_dev: int
    n_test: int
    seed: int
    context: int = 8
    block_scale: float = 1.5
    dev_frac: float = 0.1
    test_frac: float = 0.1
    hflip_train: bool = True

    def tuned(self) -> dict[str, object]:
        """The options with a default that differ from it, by name (what a cache file's name adds)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.default is not MISSING and getattr(self, f.name) != f.default}


def build_sr_patches(
    images: Sequence[np.ndarray], spec: SRPatches, *, return_plans: bool = False
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Cut random (LR, HR) patch pairs from arbitrary RGB photographs, with region-disjoint splits.

    Each source is area-downscaled to a short side of ``spec.context * hr_size`` pixels, tiled into blocks of
    ``ceil(spec.block_scale * hr_size)`` pixels that are dealt to train/dev/test (see :func:`assign_blocks`),
    and HR patches of ``hr_size = lr_size * factor`` are drawn inside the blocks; LR is the exact area
    downsample of HR. Returns ``{split: (lr (N, lr, lr, 3), hr (N, hr, hr, 3))}``, uint8. With
    ``return_plans`` the dict also holds ``"plans"`` (split -> :class:`PatchPlan`) and ``"sources"`` (the
    rescaled images), which tests use to check disjointness.
    """
    lr_size, factor, seed = spec.lr_size, spec.factor, spec.seed
    if lr_size < 1 or factor < 1:
        raise ValueError(f"lr_size and factor must be >= 1, got {lr_size}, {factor}")
    hr = lr_size * factor
    block = max(hr, math.ceil(spec.block_scale * hr))
    srcs = [_area_resize_short_side(np.asarray(im, dtype=np.uint8), spec.context * hr) for im in images]
    blocks = assign_blocks([s.shape[:2] for s in srcs], block, seed, spec.dev_frac, spec.test_frac)
    counts = {"train": spec.n_train, "dev": spec.n_dev, "test": spec.n_test}
    out: dict = {}
    plans: dict[str, PatchPlan] = {}
    for k, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, k])
        plan = plan_patches(blocks[split], counts[split], hr, block, rng, flip=spec.hflip_train and split == "train")
        plans[split] = plan
        hr_arr = np.empty((counts[split], hr, hr, 3), dtype=np.uint8)
        for j, (i, y, x, f) in enumerate(zip(plan.image, plan.y, plan.x, plan.flip)):
            p = srcs[i][y : y + hr, x : x + hr]
            hr_arr[j] = p[:, ::-1] if f else p
        out[split] = (area_downsample(hr_arr, factor), hr_arr)
    if return_plans:
        out["plans"] = plans
        out["sources"] = srcs
    return out


def build_embedded_sr(
    spec: SRPatches, sources: Sequence[str] = DEFAULT_SOURCES
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The ``faces_sr`` dataset: :func:`build_sr_patches` of ``spec`` over the offline scikit-image photographs
    named by ``sources``."""
    return build_sr_patches(load_embedded_sources(sources), spec)


_EMBEDDED_CACHE_VERSION = 1


def save_sr_npz(data: dict[str, tuple[np.ndarray, np.ndarray]], path: str | os.PathLike) -> Path:
    """Write ``{split: (lr, hr)}`` as ``<split>_lr`` / ``<split>_hr`` arrays, atomically.

    The file is written to a temporary name in the same folder and renamed, so a crashed or concurrent run
    (several ranks, several Hydra jobs) never sees a half-written cache.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split in SPLITS:
        if split in data:
            arrays[f"{split}_lr"], arrays[f"{split}_hr"] = data[split]
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_sr_npz(path: str | os.PathLike) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read a cache written by :func:`save_sr_npz` back into ``{split: (lr, hr)}``."""
    with np.load(Path(path)) as z:
        return {s: (z[f"{s}_lr"], z[f"{s}_hr"]) for s in SPLITS if f"{s}_lr" in z.files}


def prepare_embedded_sr(
    cache_dir: str | os.PathLike, spec: SRPatches, sources: Sequence[str] = DEFAULT_SOURCES
) -> Path:
    """Build ``faces_sr`` once into ``cache_dir`` and return the .npz path; reuse it when already present.

    Every option that changes the content is part of the file name (an option with a default, and ``sources``,
    only where it differs from that default; plus a version bumped when the builder changes), so different
    configurations never collide and a stale cache is never reused.
    """
    named = spec.tuned() | ({"sources": tuple(sources)} if tuple(sources) != DEFAULT_SOURCES else {})
    extra = "".join(
        f"_{k}-{'+'.join(map(str, v)) if isinstance(v, list | tuple) else v}" for k, v in sorted(named.items())
    )
    counts = f"n{spec.n_train}-{spec.n_dev}-{spec.n_test}"
    name = f"faces_sr_v{_EMBEDDED_CACHE_VERSION}_lr{spec.lr_size}_x{spec.factor}_{counts}_s{spec.seed}{extra}.npz"
    path = Path(cache_dir) / name
    if not path.exists():
        data = build_embedded_sr(spec, sources)
        save_sr_npz(data, path)
    return path
