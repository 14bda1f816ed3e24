"""CelebA for the paper's super-resolution task: aligned faces cropped and area-resized to 8x8 and 32x32."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from pathlib import Path

import numpy as np
from PIL import Image

# --- CelebA ---------------------------------------------------------------------------------------------

CELEBA_IMAGE_SIZE = (178, 218)  # (width, height) of img_align_celeba
CELEBA_CROP_BOX = (20, 40, 158, 178)  # (left, top, right, bottom): 138x138 at top=40, left=20
CELEBA_SPLITS = {"train": 0, "dev": 1, "valid": 1, "val": 1, "validation": 1, "test": 2}
_CELEBA_LAYOUT = (
    "expected the standard CelebA layout: <data_dir>/img_align_celeba/*.jpg and <data_dir>/list_eval_partition.txt"
)


def split_names(data_dir: str | os.PathLike, split: str, limit: int | None = None) -> list[str]:
    """The image file names of one split, in partition-file order (the first ``limit`` of them)."""
    root = Path(data_dir)
    img_dir, part = root / "img_align_celeba", root / "list_eval_partition.txt"
    for p in (img_dir, part):
        if not p.exists():
            raise FileNotFoundError(f"{p} not found; {_CELEBA_LAYOUT}.")
    if split not in CELEBA_SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(CELEBA_SPLITS)}")
    want = CELEBA_SPLITS[split]
    fields = (line.split() for line in part.read_text().splitlines())
    names = [f[0] for f in fields if len(f) == 2 and int(f[1]) == want]
    if not names:
        raise ValueError(f"{part} lists no image for the {split} split (partition {want}); use the standard "
                         "list_eval_partition.txt (lines '<file>.jpg <0|1|2>').")
    return names[:limit] if limit is not None else names


def _load(args: tuple[Path, list[str], int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Crop and area-resize a run of images (one worker's share)."""
    img_dir, names, lr_size, hr_size = args
    lr = np.empty((len(names), lr_size, lr_size, 3), dtype=np.uint8)
    hr = np.empty((len(names), hr_size, hr_size, 3), dtype=np.uint8)
    for i, name in enumerate(names):
        f = img_dir / name
        if not f.exists():
            raise FileNotFoundError(f"{f} is listed in list_eval_partition.txt but missing; {_CELEBA_LAYOUT}.")
        with Image.open(f) as im:
            if im.size != CELEBA_IMAGE_SIZE:
                raise ValueError(f"{f} is {im.size[0]}x{im.size[1]} (WxH), expected aligned 178x218")
            crop = im.convert("RGB").crop(CELEBA_CROP_BOX)
        hr[i] = np.asarray(crop.resize((hr_size, hr_size), Image.Resampling.BOX))
        lr[i] = np.asarray(crop.resize((lr_size, lr_size), Image.Resampling.BOX))
    return lr, hr


def load_celeba_sr(
    data_dir: str | os.PathLike,
    split: str,
    lr_size: int = 8,
    hr_size: int = 32,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Read one CelebA split as (lr (N, lr, lr, 3), hr (N, hr, hr, 3)) uint8 arrays, in this process.

    Each aligned 218x178 image is cropped to the central 138x138 face (top=40, left=20) and area-resized
    (Pillow BOX) to ``hr_size`` for the target and, directly from the crop, to ``lr_size`` for the source,
    so the LR input never sees HR rounding. Images are taken in partition-file order; ``limit`` keeps the
    first ``limit`` of the split (for smoke runs).
    """
    names = split_names(data_dir, split, limit)
    return _load((Path(data_dir) / "img_align_celeba", names, lr_size, hr_size))


def prepare_celeba(data_dir: str | os.PathLike, cache_dir: str | os.PathLike, split: str, lr_size: int = 8,
                   hr_size: int = 32, limit: int | None = None, workers: int | None = None) -> tuple[np.ndarray, ...]:
    """``load_celeba_sr`` once, in parallel over ``workers`` processes, into two uint8 ``.npy`` files under
    ``cache_dir`` (written whole, then renamed); every later call opens them memory-mapped in milliseconds."""
    names = split_names(data_dir, split, limit)
    key = hashlib.sha1("\n".join([str(Path(data_dir).resolve()), *names]).encode()).hexdigest()[:10]
    out = Path(cache_dir) / f"celeba_{split}_lr{lr_size}_hr{hr_size}_n{len(names)}_{key}"
    paths = [out.with_name(out.name + f"_{side}.npy") for side in ("lr", "hr")]
    if not all(p.is_file() for p in paths):
        out.parent.mkdir(parents=True, exist_ok=True)
        workers = workers or os.cpu_count() or 1
        step = max(1, min(2000, -(-len(names) // (4 * workers))))
        jobs = [(Path(data_dir) / "img_align_celeba", names[i : i + step], lr_size, hr_size)
                for i in range(0, len(names), step)]
        tmps = [p.with_name(f"{p.stem}.tmp{os.getpid()}.npy") for p in paths]
        lr = np.lib.format.open_memmap(tmps[0], "w+", np.uint8, (len(names), lr_size, lr_size, 3))
        hr = np.lib.format.open_memmap(tmps[1], "w+", np.uint8, (len(names), hr_size, hr_size, 3))
        with multiprocessing.get_context("spawn").Pool(workers) if workers > 1 else _Serial() as pool:
            pos = 0
            for a, b in pool.imap(_load, jobs):
                lr[pos : pos + len(a)], hr[pos : pos + len(b)] = a, b
                pos += len(a)
        lr.flush(), hr.flush()
        del lr, hr
        for tmp, p in zip(tmps, paths):
            os.replace(tmp, p)
    return tuple(np.load(p, mmap_mode="r") for p in paths)


class _Serial:
    """A one-process stand-in for ``multiprocessing.Pool`` (``imap`` in order)."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def imap(self, fn, jobs):
        return map(fn, jobs)
