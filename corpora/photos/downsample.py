"""The exact area downsample that makes a super-resolution input from its target: the photo corpus's inputs, and
those of bpd's embedded patch set (``bpd.data.faces``)."""

from __future__ import annotations

import numpy as np


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
