"""CelebA for the paper's super-resolution task: aligned faces cropped and area-resized to 8x8 and 32x32."""

from __future__ import annotations

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
