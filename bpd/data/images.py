"""Image super-resolution data for the paper's second task (Stern et al. 2018, section 6.2).

The paper super-resolves CelebA faces from 8x8 to 32x32 with an image Transformer that generates the
high-resolution image one *pixel channel* at a time. Everything the model and the decoders need to agree on
lives here:

Token layout (the contract with the model)
    A high-resolution RGB image of shape (H, W, 3) uint8 is the target sequence of H*W*3 tokens in raster
    order: row-major over pixels and R, G, B within a pixel, so token ``3*(r*W + c) + ch`` is pixel
    ``(r, c, ch)``. The token id *is* the intensity (0..255), so no lookup table is needed and a decoded
    sequence is an image after a reshape. Two extra ids exist for the decoder input: ``BOS_ID`` (256), which
    starts the shifted target, and ``PAD_ID`` (257). Images have a fixed length, so there is no EOS and
    ``EOS_ID`` is -1 (a value no decoder can emit, which turns "stop at EOS" off). The low-resolution source
    uses the same layout and ids.

Datasets
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
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

N_INTENSITIES = 256
BOS_ID = 256
PAD_ID = 257
VOCAB_SIZE = 258
EOS_ID = -1

SPLITS = ("train", "dev", "test")

# --- token layout ---------------------------------------------------------------------------------------


def image_to_tokens(img: np.ndarray) -> np.ndarray:
    """Flatten (H, W, 3) -- or a batch (N, H, W, 3) -- uint8 images to raster-order int64 token ids.

    A C-order reshape is exactly the documented layout (row-major pixels, R, G, B within a pixel), so the
    conversion is free and cannot drift from :func:`tokens_to_image`.
    """
    arr = np.asarray(img)
    if arr.ndim not in (3, 4) or arr.shape[-1] != 3:
        raise ValueError(f"expected (H, W, 3) or (N, H, W, 3) image(s), got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"expected uint8 intensities, got {arr.dtype}")
    lead = arr.shape[:-3]
    return arr.reshape(*lead, -1).astype(np.int64)


def tokens_to_image(tokens: np.ndarray | Sequence[int] | torch.Tensor, h: int, w: int) -> np.ndarray:
    """Inverse of :func:`image_to_tokens`: (L,) -> (h, w, 3) uint8, or (N, L) -> (N, h, w, 3).

    A decoder stopped early (step budget) returns fewer than h*w*3 tokens, so short sequences are zero-padded
    and over-long ones truncated instead of failing on a figure or a PSNR row. Ids outside 0..255 (BOS/PAD
    emitted by a poorly trained model) are clipped into range for the same reason.
    """
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens, dtype=np.int64)
    if arr.ndim not in (1, 2):
        raise ValueError(f"expected (L,) or (N, L) tokens, got shape {arr.shape}")
    n = h * w * 3
    arr = arr[..., :n]
    if arr.shape[-1] < n:
        pad = [(0, 0)] * (arr.ndim - 1) + [(0, n - arr.shape[-1])]
        arr = np.pad(arr, pad)
    arr = np.clip(arr, 0, N_INTENSITIES - 1).astype(np.uint8)
    return arr.reshape(*arr.shape[:-1], h, w, 3)


# --- resampling and metrics -----------------------------------------------------------------------------


def area_downsample(img: np.ndarray, factor: int) -> np.ndarray:
    """Average non-overlapping factor x factor blocks of (..., H, W, C) uint8 images, rounding half up.

    This is the paper's "area" resize for integer factors, computed exactly in float64 (Pillow's BOX filter
    uses fixed point and can differ by 1 intensity level). H and W must be multiples of ``factor`` so that no
    pixel is silently dropped.
    """
    arr = np.asarray(img)
    if arr.ndim < 3:
        raise ValueError(f"expected (..., H, W, C) image(s), got shape {arr.shape}")
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    *lead, h, w, c = arr.shape
    if h % factor or w % factor:
        raise ValueError(f"image size {h}x{w} is not divisible by factor {factor}")
    blocks = arr.reshape(*lead, h // factor, factor, w // factor, factor, c).astype(np.float64)
    mean = blocks.mean(axis=(-4, -2))
    return np.floor(mean + 0.5).astype(np.uint8)


def nearest_upsample(img: np.ndarray, factor: int) -> np.ndarray:
    """Repeat each pixel factor x factor times: the "nearest" reference row and the LR display column."""
    arr = np.asarray(img)
    return np.repeat(np.repeat(arr, factor, axis=-3), factor, axis=-2)


def bicubic_upsample(img: np.ndarray, factor: int) -> np.ndarray:
    """Upsample (H, W, 3) or (N, H, W, 3) uint8 images with Pillow's BICUBIC: the "bicubic" reference row."""
    arr = np.asarray(img, dtype=np.uint8)
    if arr.ndim == 4:
        return np.stack([bicubic_upsample(x, factor) for x in arr]) if len(arr) else arr
    h, w = arr.shape[:2]
    out = Image.fromarray(arr).resize((w * factor, h * factor), Image.Resampling.BICUBIC)
    return np.asarray(out, dtype=np.uint8)


def psnr(pred: np.ndarray, target: np.ndarray) -> float:
    """PSNR in dB of one uint8 image against its target (peak 255); ``inf`` when they are identical."""
    p = np.asarray(pred)
    t = np.asarray(target)
    if p.shape != t.shape:
        raise ValueError(f"shape mismatch: {p.shape} vs {t.shape}")
    mse = float(np.mean((p.astype(np.float64) - t.astype(np.float64)) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(255.0**2 / mse)


PSNR_CAP_DB = 100.0


def mean_psnr(preds: np.ndarray, targets: np.ndarray, cap_db: float = PSNR_CAP_DB) -> float:
    """Average of per-image PSNRs over the leading (batch) axis, each capped at ``cap_db`` (100 dB).

    Per-image averaging (not PSNR of the pooled MSE) is the usual super-resolution convention. The cap
    exists because a single exactly reproduced image has infinite PSNR and would make the mean infinite;
    100 dB is far above any real reconstruction (one off-by-one channel in a 16x16 image is ~77 dB), so
    the cap only changes the perfect images.
    """
    p = np.asarray(preds)
    t = np.asarray(targets)
    if p.shape != t.shape or p.ndim < 1 or len(p) == 0:
        raise ValueError(f"expected equal non-empty batches, got {p.shape} vs {t.shape}")
    return float(np.mean([min(psnr(a, b), cap_db) for a, b in zip(p, t)]))


# --- embedded dataset -----------------------------------------------------------------------------------


def _skimage_loaders() -> dict[str, Callable[[], np.ndarray]]:
    """Name -> loader for the colour images that ship inside the scikit-image wheel (no network)."""
    from skimage import data as skd

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


def build_sr_patches(
    images: Sequence[np.ndarray],
    lr_size: int = 4,
    factor: int = 4,
    n_train: int = 16384,
    n_dev: int = 128,
    n_test: int = 256,
    seed: int = 0,
    *,
    context: int = 8,
    block_scale: float = 1.5,
    dev_frac: float = 0.1,
    test_frac: float = 0.1,
    hflip_train: bool = True,
    return_plans: bool = False,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Cut random (LR, HR) patch pairs from arbitrary RGB photographs, with region-disjoint splits.

    Each source is area-downscaled to a short side of ``context * hr_size`` pixels, tiled into blocks of
    ``ceil(block_scale * hr_size)`` pixels that are dealt to train/dev/test (see :func:`assign_blocks`),
    and HR patches of ``hr_size = lr_size * factor`` are drawn inside the blocks; LR is the exact area
    downsample of HR. Returns ``{split: (lr (N, lr, lr, 3), hr (N, hr, hr, 3))}``, uint8. With
    ``return_plans`` the dict also holds ``"plans"`` (split -> :class:`PatchPlan`) and ``"sources"`` (the
    rescaled images), which tests use to check disjointness.
    """
    if lr_size < 1 or factor < 1:
        raise ValueError(f"lr_size and factor must be >= 1, got {lr_size}, {factor}")
    hr = lr_size * factor
    block = max(hr, math.ceil(block_scale * hr))
    srcs = [_area_resize_short_side(np.asarray(im, dtype=np.uint8), context * hr) for im in images]
    blocks = assign_blocks([s.shape[:2] for s in srcs], block, seed, dev_frac, test_frac)
    counts = {"train": n_train, "dev": n_dev, "test": n_test}
    out: dict = {}
    plans: dict[str, PatchPlan] = {}
    for k, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, k])
        plan = plan_patches(blocks[split], counts[split], hr, block, rng, flip=hflip_train and split == "train")
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
    lr_size: int = 4,
    factor: int = 4,
    n_train: int = 16384,
    n_dev: int = 128,
    n_test: int = 256,
    seed: int = 0,
    *,
    sources: Sequence[str] = DEFAULT_SOURCES,
    context: int = 8,
    block_scale: float = 1.5,
    dev_frac: float = 0.1,
    test_frac: float = 0.1,
    hflip_train: bool = True,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The ``faces_sr`` dataset: :func:`build_sr_patches` over the offline scikit-image photographs."""
    return build_sr_patches(
        load_embedded_sources(sources),
        lr_size,
        factor,
        n_train,
        n_dev,
        n_test,
        seed,
        context=context,
        block_scale=block_scale,
        dev_frac=dev_frac,
        test_frac=test_frac,
        hflip_train=hflip_train,
    )


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
    cache_dir: str | os.PathLike,
    lr_size: int = 4,
    factor: int = 4,
    n_train: int = 16384,
    n_dev: int = 128,
    n_test: int = 256,
    seed: int = 0,
    **kwargs,
) -> Path:
    """Build ``faces_sr`` once into ``cache_dir`` and return the .npz path; reuse it when already present.

    Every argument that changes the content is part of the file name (plus a version bumped when the
    builder changes), so different configurations never collide and a stale cache is never reused.
    Keyword arguments are passed to :func:`build_embedded_sr`.
    """
    extra = "".join(
        f"_{k}-{'+'.join(map(str, v)) if isinstance(v, list | tuple) else v}" for k, v in sorted(kwargs.items())
    )
    name = f"faces_sr_v{_EMBEDDED_CACHE_VERSION}_lr{lr_size}_x{factor}_n{n_train}-{n_dev}-{n_test}_s{seed}{extra}.npz"
    path = Path(cache_dir) / name
    if not path.exists():
        data = build_embedded_sr(lr_size, factor, n_train, n_dev, n_test, seed, **kwargs)
        save_sr_npz(data, path)
    return path


# --- CelebA ---------------------------------------------------------------------------------------------

CELEBA_IMAGE_SIZE = (178, 218)  # (width, height) of img_align_celeba
CELEBA_CROP_BOX = (20, 40, 158, 178)  # (left, top, right, bottom): 138x138 at top=40, left=20
CELEBA_SPLITS = {"train": 0, "dev": 1, "valid": 1, "val": 1, "validation": 1, "test": 2}
_CELEBA_LAYOUT = (
    "expected the standard CelebA layout: <data_dir>/img_align_celeba/*.jpg and <data_dir>/list_eval_partition.txt"
)


def load_celeba_sr(
    data_dir: str | os.PathLike,
    split: str,
    lr_size: int = 8,
    hr_size: int = 32,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Read one CelebA split as (lr (N, lr, lr, 3), hr (N, hr, hr, 3)) uint8 arrays.

    Each aligned 218x178 image is cropped to the central 138x138 face (top=40, left=20) and area-resized
    (Pillow BOX) to ``hr_size`` for the target and, directly from the crop, to ``lr_size`` for the source,
    so the LR input never sees HR rounding. Images are taken in partition-file order; ``limit`` keeps the
    first ``limit`` of the split (for smoke runs).
    """
    root = Path(data_dir)
    img_dir = root / "img_align_celeba"
    part = root / "list_eval_partition.txt"
    for p in (img_dir, part):
        if not p.exists():
            raise FileNotFoundError(f"{p} not found; {_CELEBA_LAYOUT}.")
    if split not in CELEBA_SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(CELEBA_SPLITS)}")
    want = CELEBA_SPLITS[split]
    names = []
    for line in part.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and int(fields[1]) == want:
            names.append(fields[0])
    if limit is not None:
        names = names[:limit]
    lr = np.empty((len(names), lr_size, lr_size, 3), dtype=np.uint8)
    hr = np.empty((len(names), hr_size, hr_size, 3), dtype=np.uint8)
    for i, name in enumerate(names):
        f = img_dir / name
        if not f.exists():
            raise FileNotFoundError(f"{f} is listed in {part.name} but missing; {_CELEBA_LAYOUT}.")
        with Image.open(f) as im:
            if im.size != CELEBA_IMAGE_SIZE:
                raise ValueError(f"{f} is {im.size[0]}x{im.size[1]} (WxH), expected aligned 178x218")
            crop = im.convert("RGB").crop(CELEBA_CROP_BOX)
        hr[i] = np.asarray(crop.resize((hr_size, hr_size), Image.Resampling.BOX))
        lr[i] = np.asarray(crop.resize((lr_size, lr_size), Image.Resampling.BOX))
    return lr, hr


# --- torch batches --------------------------------------------------------------------------------------


def sr_batches(
    lr: np.ndarray,
    hr: np.ndarray,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield ``(src, tgt_in, tgt_out)`` LongTensors for teacher-forced training or for decoding.

    ``src`` is the LR image as (B, h*w*3) tokens, ``tgt_out`` the HR image as (B, H*W*3) tokens and
    ``tgt_in`` is ``tgt_out`` shifted right behind ``BOS_ID`` (its last token dropped), so every row has the
    same fixed length and no padding is needed. The order is a ``seed``-determined permutation when
    ``shuffle``. For distributed runs each rank takes every ``world_size``-th example after the dataset is
    cut to a multiple of ``world_size``, so all ranks run the same number of steps (DDP would otherwise hang
    on the rank with an extra batch); with one rank nothing is dropped. The last batch may be smaller.
    """
    if len(lr) != len(hr):
        raise ValueError(f"lr and hr differ in length: {len(lr)} vs {len(hr)}")
    if batch_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"bad batch_size/rank/world_size: {batch_size}, {rank}, {world_size}")
    idx = np.random.default_rng(seed).permutation(len(lr)) if shuffle else np.arange(len(lr))
    idx = idx[: len(idx) - len(idx) % world_size][rank::world_size]
    for start in range(0, len(idx), batch_size):
        sel = idx[start : start + batch_size]
        src = torch.from_numpy(image_to_tokens(lr[sel]))
        tgt_out = torch.from_numpy(image_to_tokens(hr[sel]))
        tgt_in = torch.cat([torch.full((len(sel), 1), BOS_ID, dtype=torch.long), tgt_out[:, :-1]], dim=1)
        yield src, tgt_in, tgt_out


# --- figures --------------------------------------------------------------------------------------------


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """Pillow's bundled font at ``size`` when FreeType is available, else the fixed bitmap font."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):
        return ImageFont.load_default()


def save_grid(
    rows: list[tuple[str, np.ndarray]],
    path: str | os.PathLike,
    max_images: int = 8,
    scale: int | None = None,
) -> Path:
    """Save a labelled PNG grid: one column per (label, images) set, one row per image.

    Every set is (N, h, w, 3) uint8 (or one (h, w, 3) image). Sets smaller than the largest (the LR input)
    are nearest-upsampled to its size so pixels line up across a row, and the whole grid is enlarged by
    ``scale`` (default: so a cell is about 128 px) with nearest neighbour, because a 16x16 image is
    otherwise too small to judge. Column labels are wrapped to the cell width.
    """
    if not rows:
        raise ValueError("save_grid needs at least one (label, images) set")
    sets = []
    for label, imgs in rows:
        arr = np.asarray(imgs)
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[-1] != 3:
            raise ValueError(f"set {label!r}: expected (N, h, w, 3) images, got {arr.shape}")
        sets.append((label, arr.astype(np.uint8)))
    big_h = max(a.shape[1] for _, a in sets)
    big_w = max(a.shape[2] for _, a in sets)
    n = min(max_images, min(len(a) for _, a in sets))
    if scale is None:
        scale = max(1, 128 // max(big_h, big_w))
    cell_h, cell_w = big_h * scale, big_w * scale
    pad = 6
    font = _font(14)
    chars = max(4, cell_w // 8)
    labels = [textwrap.wrap(label, chars) or [""] for label, _ in sets]
    line_h = 17
    head = pad + line_h * max(len(lines) for lines in labels) + pad
    width = pad + len(sets) * (cell_w + pad)
    height = head + n * (cell_h + pad)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for j, ((_, arr), lines) in enumerate(zip(sets, labels)):
        x0 = pad + j * (cell_w + pad)
        for k, line in enumerate(lines):
            draw.text((x0, pad + k * line_h), line, fill=(0, 0, 0), font=font)
        for i in range(n):
            img = Image.fromarray(arr[i]).resize((cell_w, cell_h), Image.Resampling.NEAREST)
            canvas.paste(img, (x0, head + i * (cell_h + pad)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path, format="PNG")
    return path
